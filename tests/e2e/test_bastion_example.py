"""``examples/aws-cluster-bastion.yaml`` through the real CLI on a moto endpoint: the cluster with its bastion
host converges, ``capa audit`` classifies the bastion's instance and group as the store's, ``capa delete
--wait`` leaves nothing; and ``capa apply`` SIGKILLed right after each ``RunInstances`` (the bastion's and
the machine's, in whatever order they come) is finished by a second apply without a duplicate instance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capa_py.engine.tags import CAPA_PY_ROLE_TAG, cluster_tag_key
from tests.e2e.e2e_support import ROOT, Capa, MotoInspector
from tests.harness.faults import CRASH_AFTER_MUTATING, FAULT_LOG, TRACE_MUTATING
from tests.harness.moto_server import MotoServer

pytestmark = pytest.mark.slow(minutes=3)

EXAMPLE = ROOT / "examples" / "aws-cluster-bastion.yaml"
CLUSTER = "jump"
APPLY = ("apply", "-f", str(EXAMPLE), "--timeout", "2m", "-o", "json")
LIVE = ["pending", "running", "stopping", "stopped"]


def _instances(inspector: MotoInspector) -> dict[str, str]:
    """The cluster's live instances: id → capa-py role."""
    filters = [
        {"Name": f"tag:{cluster_tag_key(CLUSTER)}", "Values": ["owned"]},
        {"Name": "instance-state-name", "Values": LIVE},
    ]
    found: dict[str, str] = {}
    for reservation in inspector.ec2.describe_instances(Filters=filters)["Reservations"]:
        for instance in reservation["Instances"]:
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
            found[instance["InstanceId"]] = tags.get(CAPA_PY_ROLE_TAG, "")
    return found


def _every_instance(inspector: MotoInspector) -> list[str]:
    """Every live instance on the server, tagged or not (an untagged duplicate counts)."""
    reservations = inspector.ec2.describe_instances(
        Filters=[{"Name": "instance-state-name", "Values": LIVE}]
    )["Reservations"]
    return [i["InstanceId"] for r in reservations for i in r["Instances"]]


def _audit_rows(capa: Capa, endpoint: str) -> list[dict[str, Any]]:
    document = capa.ok("audit", "-o", "json", "--aws-endpoint", endpoint).json()
    return [row for row in document["rows"] if row.get("cluster") == CLUSTER]


def test_the_bastion_example_converges_is_audited_as_managed_and_deletes_clean(
    capa: Capa, inspector: MotoInspector, endpoint: str
) -> None:
    document = capa.ok(*APPLY).json()
    assert document["converged"] is True, document
    (awscluster,) = capa.get("awsclusters")
    status = awscluster["status"]
    bastion = status["bastion"]
    assert bastion["instanceState"] == "running"
    assert bastion["publicIp"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["BastionHostReady"] == "True", conditions
    group = status["network"]["securityGroups"]["bastion"]["id"]
    assert _instances(inspector).get(bastion["id"]) == "bastion"

    rows = {row["id"]: row for row in _audit_rows(capa, endpoint)}
    for resource_id, role in ((bastion["id"], "bastion"), (group, "sg-bastion")):
        row = rows.get(resource_id)
        assert row is not None, f"capa audit does not list {resource_id}: {sorted(rows)}"
        assert (row["class"], row["role"], row["owner"]) == ("managed", role, f"awscluster/{CLUSTER}"), row
    leaks = [row for row in rows.values() if row["class"] != "managed"]
    assert not leaks, leaks

    deleted = capa.run("delete", "-f", str(EXAMPLE), "--wait", "--timeout", "2m")
    assert deleted.returncode == 0, f"delete --wait failed:\n{deleted}"
    left = {k: v for k, v in inspector.inventory(tag_key=cluster_tag_key(CLUSTER)).tagged.items() if v}
    assert not left, f"resources still tagged with the cluster after delete --wait: {left}"
    assert _audit_rows(capa, endpoint) == []


def test_a_crash_after_each_launch_leaves_one_bastion_and_one_machine(
    tmp_path: Path, e2e_moto: MotoServer, endpoint: str, inspector: MotoInspector
) -> None:
    measure_log = tmp_path / "measure.jsonl"
    measuring = Capa(state=tmp_path / "measure" / "state.db", endpoint=endpoint)
    measuring.ok(*APPLY, faults={TRACE_MUTATING: "1", FAULT_LOG: str(measure_log)})
    trace = [json.loads(line) for line in measure_log.read_text().splitlines() if line.strip()]
    launches = [entry["n"] for entry in trace if entry.get("mutating") == "ec2:RunInstances"]
    assert len(launches) == 2, trace

    problems: list[str] = []
    for n in launches:
        e2e_moto.reset()
        capa = Capa(state=tmp_path / f"crash-{n}" / "state.db", endpoint=endpoint)
        crashed = capa.run(*APPLY, faults={CRASH_AFTER_MUTATING: str(n)})
        if crashed.returncode == 0:
            problems.append(f"crash point {n}: the apply was not killed:\n{crashed}")
            continue
        finished = capa.run(*APPLY)
        if finished.returncode != 0:
            problems.append(f"crash point {n}: the apply after the crash failed:\n{finished}")
            continue
        roles = sorted(_instances(inspector).values())
        if roles != ["bastion", f"instance-{CLUSTER}-control-plane-0"]:
            problems.append(f"crash point {n}: the cluster's instances by role: {roles}")
        if len(_every_instance(inspector)) != 2:
            problems.append(
                f"crash point {n}: {len(_every_instance(inspector))} live instances on the server"
            )
    assert not problems, "\n".join(problems)
