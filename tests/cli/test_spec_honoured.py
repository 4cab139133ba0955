"""``capa apply`` over the local endpoint honours the spec or refuses it: an immutable change exits 2 naming
the field, with the store untouched and no AWS call; a mutable change is configured and reaches AWS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import yaml

from capa_py.aws.accounting import PROCESS_COUNTER
from tests.cli.cli_support import Cli
from tests.e2e.e2e_support import EXAMPLE, REGION, Capa
from tests.harness.moto_server import MotoServer

KINDS = ("clusters", "machines", "awsclusters", "awsmachines", "secrets")
WORKER = "demo-worker-0"


def _documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def _worker(documents: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in documents if d["kind"] == "AWSMachine" and d["metadata"]["name"] == WORKER)


def _write(path: Path, documents: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def _snapshot(cli: Cli, state: Path) -> dict[str, Any]:
    snapshot = {}
    for kind in KINDS:
        result = cli("get", kind, "-A", "-o", "json", state_path=state)
        assert result.exit_code == 0, str(result)
        snapshot[kind] = json.loads(result.stdout)
    return snapshot


def _instance(server: MotoServer, instance_id: str) -> dict[str, Any]:
    ec2 = boto3.client(
        "ec2",
        endpoint_url=server.url,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return dict(ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0])


def test_immutable_edit_exits_2_unchanged_without_aws_calls_and_mutable_edit_reaches_the_instance(
    cli: Cli, cli_moto: MotoServer, tmp_path: Path
) -> None:
    cli_moto.reset()
    state = tmp_path / "spec.db"
    capa = Capa(state=state, endpoint=cli_moto.url)
    capa.ok("apply", "-f", str(_write(tmp_path / "first.yaml", _documents())), "--timeout", "2m", timeout=180)
    worker = next(o for o in capa.get("awsmachines") if o["metadata"]["name"] == WORKER)
    instance_id = worker["status"]["instanceID"]
    assert _instance(cli_moto, instance_id)["InstanceType"] == "t3.medium"

    # The immutable edit, in-process so that every AWS call the process makes is counted.
    documents = _documents()
    _worker(documents)["spec"]["instanceType"] = "t3.large"
    _worker(documents)["spec"]["additionalTags"] = {"role": "batch"}  # refused along with it
    before, calls_before = _snapshot(cli, state), PROCESS_COUNTER.total()
    refused = cli(
        "apply",
        "-f",
        str(_write(tmp_path / "immutable.yaml", documents)),
        "--aws-endpoint",
        cli_moto.url,
        "--timeout",
        "1m",
        state_path=state,
    )
    assert refused.exit_code == 2, f"an immutable change should exit 2:\n{refused}"
    assert (
        f"AWSMachine default/{WORKER}: spec.instanceType: immutable (was t3.medium, now t3.large)"
        in refused.stderr
    ), str(refused)
    assert "configured" not in refused.stdout, str(refused)
    assert PROCESS_COUNTER.total() == calls_before, "a refused apply called AWS"
    assert _snapshot(cli, state) == before, "a refused apply changed the store"
    assert _instance(cli_moto, instance_id)["InstanceType"] == "t3.medium"

    # The mutable edit alone is configured and reaches the running instance.
    documents = _documents()
    _worker(documents)["spec"]["additionalTags"] = {"role": "batch"}
    applied = capa.ok(
        "apply", "-f", str(_write(tmp_path / "mutable.yaml", documents)), "--timeout", "2m", timeout=180
    )
    assert f"awsmachine/{WORKER} configured" in applied.stdout, str(applied)
    instance = _instance(cli_moto, instance_id)
    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
    assert tags.get("role") == "batch", f"the new additional tag is not on the instance: {tags}"
    assert instance["InstanceType"] == "t3.medium"
