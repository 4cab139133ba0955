"""A store whose resources lived on a local AWS endpoint that was stopped says so, instead of recreating them.

``capa local stop`` ends the moto server and everything it held. Before, the next ``apply --aws-endpoint
local`` started a new server, found every recorded resource gone and made each anew with a warning per
resource (39 for the example cluster). Now it exits 1 before any change or AWS call, with one line saying
that the store's resources lived on a local endpoint that was stopped and how to start again; a new store
at another path works as usual. The real ``capa`` runs in subprocesses, its endpoint record in the test's
own directory; the endpoint is stopped (and its process gone) afterwards.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml

from tests.e2e.e2e_support import EXAMPLE, Capa, wait_for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.fixture
def local_capa(tmp_path: Path) -> Iterator[Capa]:
    capa = Capa(state=tmp_path / "one" / "state.db")
    capa.state.parent.mkdir()
    yield capa
    assert capa.home is not None
    record = capa.home / "local-aws" / "local-aws.json"
    pid = json.loads(record.read_text())["pid"] if record.exists() else None
    capa.run("local", "stop", timeout=180)
    if pid is not None and _alive(pid):  # only the server this test started
        os.kill(pid, 9)


def _cluster_only(tmp_path: Path) -> Path:
    """The example's Cluster and AWSCluster: the network and load balancer, no instances."""
    documents = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([d for d in documents if d["kind"] in ("Cluster", "AWSCluster")]))
    return path


def _vpcs(url: str) -> int:
    ec2 = boto3.client(
        "ec2", endpoint_url=url, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    try:
        return len(ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["false"]}])["Vpcs"])
    finally:
        ec2.close()


def test_apply_on_a_store_whose_local_endpoint_was_stopped_says_so_and_changes_nothing(
    local_capa: Capa, tmp_path: Path
) -> None:
    manifest = str(_cluster_only(tmp_path))
    local_capa.ok("apply", "-f", manifest, "--aws-endpoint", "local", "--timeout", "5m", timeout=400)
    recorded = local_capa.ok("resources", "--offline", "-o", "json").json()["resources"]
    assert recorded, "the apply recorded no AWS resource"
    local_capa.ok("local", "stop", timeout=180)

    again = local_capa.run("apply", "-f", manifest, "--aws-endpoint", "local", "--timeout", "5m", timeout=400)
    assert again.returncode == 1, f"an apply on a store whose endpoint is gone should exit 1:\n{again}"
    errors = [line for line in again.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, f"one line should say what happened:\n{again}"
    assert (
        f"error: {local_capa.state} describes {len(recorded)} AWS resources made on a local AWS endpoint "
        "that has been stopped"
    ) in errors[0], errors
    assert f"remove {local_capa.state}" in errors[0], errors
    assert "creating it again" not in again.stderr, f"resources were made anew:\n{again}"
    status = local_capa.run("local", "status", "-o", "json").json()
    assert _vpcs(status["url"]) == 0, "the refused apply made a VPC on the new endpoint"

    # Starting again: a store at another path, on the same (new) endpoint, applies as usual.
    fresh = Capa(state=tmp_path / "two" / "state.db", home=local_capa.home)
    fresh.state.parent.mkdir()
    fresh.ok("apply", "-f", manifest, "--aws-endpoint", "local", "--timeout", "5m", timeout=400)
    assert wait_for(lambda: _vpcs(status["url"]) == 1, timeout=5), "the new store's apply made no VPC"
