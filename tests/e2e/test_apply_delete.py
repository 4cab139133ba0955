"""The example cluster's life through the real CLI: apply, apply again, list its resources, delete.

Each test applies the quick start, ``examples/aws-cluster.yaml`` (its workers a MachineDeployment of an
AWSMachineTemplate), with ``capa apply`` (a subprocess, its own store, the test's moto server as
``--aws-endpoint``) and checks what the CLI reports against what moto holds.
"""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.aws.accounting import is_mutating
from tests.e2e.e2e_support import (
    QUICK_START,
    Capa,
    MotoInspector,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
)

pytestmark = pytest.mark.slow(minutes=2)

KINDS = (
    "clusters",
    "machines",
    "awsclusters",
    "awsmachines",
    "secrets",
    "awsmachinetemplates",
    "machinedeployments",
    "machinesets",
)
APPLY = ("apply", "-f", str(QUICK_START), "--timeout", "2m", "-o", "json")
# Kinds whose AWS API has no tags: `capa resources` reports their tags as not applicable (null).
ARN_PREFIX = "arn:aws:ec2:us-east-1:123456789012:"
UNTAGGABLE = {"route", "route-table-association", "internet-gateway-attachment", "target-registration"}


def _apply(capa: Capa) -> dict[str, Any]:
    run = capa.ok(*APPLY)
    document: dict[str, Any] = run.json()
    assert document["converged"] is True, f"apply exited 0 but did not converge:\n{run}"
    return document


def _not_ready(objects: list[dict[str, Any]]) -> list[str]:
    """Objects that are not ready, by their kind's convention, with why."""
    problems = []
    for obj in objects:
        kind, status = obj["kind"], obj.get("status", {})
        name = f"{kind} {obj['metadata']['name']}"
        if kind == "Cluster" and status.get("phase") != "Provisioned":
            problems.append(f"{name}: phase {status.get('phase')!r}, expected Provisioned")
        elif kind == "Machine" and status.get("phase") not in ("Provisioned", "Running"):
            problems.append(f"{name}: phase {status.get('phase')!r}, expected Provisioned or Running")
        elif kind == "MachineDeployment" and (status.get("phase"), status.get("readyReplicas")) != (
            "Running",
            2,
        ):
            problems.append(
                f"{name}: phase {status.get('phase')!r}, {status.get('readyReplicas')} ready replicas"
            )
        elif kind in ("AWSCluster", "AWSMachine") and status.get("ready") is not True:
            problems.append(f"{name}: status.ready is {status.get('ready')!r}")
        if kind in ("Cluster", "Machine", "AWSCluster", "AWSMachine"):
            ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
            if not ready or ready[0]["status"] != "True":
                problems.append(f"{name}: Ready condition is {ready or 'missing'}")
            if status.get("failureReason"):
                problems.append(f"{name}: failureReason {status['failureReason']!r}")
    return problems


def test_clean_apply_exits_0_with_every_object_ready_and_exactly_one_of_every_resource(
    capa: Capa, inspector: MotoInspector
) -> None:
    baseline = inspector.inventory().counts("total")
    document = _apply(capa)
    assert set(document["states"].values()) == {"ready"}, f"apply -o json states: {document['states']}"

    objects = {kind: capa.get(kind) for kind in KINDS}
    assert [len(objects[k]) for k in KINDS] == [1, 3, 1, 3, 1, 1, 1, 1], (
        "the store should hold the example's 1 cluster, 3 machines, 1 AWSCluster, 3 AWSMachines, 1 secret, "
        "1 AWSMachineTemplate, 1 MachineDeployment and the MachineSet it made: "
        + str({k: [o["metadata"]["name"] for o in v] for k, v in objects.items()})
    )
    problems = _not_ready([obj for items in objects.values() for obj in items])
    assert not problems, "objects not ready after a clean apply:\n" + "\n".join(problems)

    awscluster = objects["awsclusters"][0]
    endpoint = awscluster["spec"].get("controlPlaneEndpoint", {})
    assert endpoint.get("host"), f"the AWSCluster has no control-plane endpoint host: {endpoint}"
    assert endpoint.get("port") == 6443, f"the control-plane endpoint port is not 6443: {endpoint}"
    assert objects["clusters"][0]["spec"].get("controlPlaneEndpoint") == endpoint, (
        "the Cluster's control-plane endpoint should be copied from the AWSCluster"
    )
    instance_ids = [m["status"].get("instanceID") for m in objects["awsmachines"]]
    assert None not in instance_ids, f"an AWSMachine has no status.instanceID: {instance_ids}"
    assert len(set(instance_ids)) == 3, f"every AWSMachine should have its own instance, got {instance_ids}"

    recorded = recorded_ids(objects["awsclusters"] + objects["awsmachines"])
    problems = problems_with_cluster(inspector.inventory(), expected_counts(QUICK_START), baseline, recorded)
    assert not problems, "after a clean apply:\n" + "\n".join(problems)


def test_second_apply_of_a_ready_cluster_makes_no_mutating_call(capa: Capa) -> None:
    _apply(capa)
    second = _apply(capa)
    calls = second["awsCalls"]
    mutating = {op: n for op, n in calls["byOperation"].items() if is_mutating(op.split(":", 1)[1])}
    assert not mutating, f"a second apply of a ready cluster changed something in AWS: {mutating} ({calls})"
    assert calls["mutating"] == 0, f"awsCalls.mutating of a second apply is not 0: {calls}"
    assert set(second["states"].values()) == {"ready"}, f"second apply states: {second['states']}"


def test_resources_lists_every_recorded_resource_present_with_complete_tags(capa: Capa) -> None:
    _apply(capa)
    recorded = recorded_ids(capa.get("awsclusters") + capa.get("awsmachines"))
    rows = capa.ok("resources", "-o", "json").json()["resources"]

    listed = {row["id"]: row for row in rows}
    assert len(listed) == len(rows), f"capa resources lists an id twice: {sorted(r['id'] for r in rows)}"
    assert set(listed) == set(recorded), (
        f"capa resources and the statuses disagree: only listed {sorted(set(listed) - set(recorded))}, "
        f"only recorded {sorted(set(recorded) - set(listed))}"
    )
    problems = []
    for row in rows:
        where = f"{row['owner']} {row['role']} {row['kind']} {row['id']}"
        if row["state"] in ("missing", "recorded"):
            problems.append(f"{where}: state {row['state']!r} (AWS does not know it, or was not asked)")
        if row["kind"] in UNTAGGABLE:
            if row["tagsComplete"] is not None:
                problems.append(f"{where}: untaggable kind with tagsComplete {row['tagsComplete']!r}")
        elif row["tagsComplete"] is not True:
            problems.append(f"{where}: tagsComplete {row['tagsComplete']!r}")
        if row["cluster"] != "demo":
            problems.append(f"{where}: cluster {row['cluster']!r}")
    assert not problems, "capa resources -o json:\n" + "\n".join(problems)
    assert {r["kind"] for r in rows} >= {"vpc", "subnet", "nat-gateway", "load-balancer", "instance"}


def test_delete_wait_leaves_nothing_tagged_with_the_cluster_and_no_object(
    capa: Capa, inspector: MotoInspector
) -> None:
    baseline = inspector.inventory().counts("total")
    _apply(capa)
    assert inspector.tagging_api_arns(), "the tagging API lists nothing after apply; the check below is void"

    deleted = capa.run("delete", "-f", str(QUICK_START), "--wait", "--timeout", "2m")
    assert deleted.returncode == 0, f"delete --wait failed:\n{deleted}"

    inventory = inspector.inventory()
    left = {kind: ids for kind, ids in inventory.tagged.items() if ids}
    assert not left, f"resources still tagged with the cluster after delete --wait: {left}"
    extra = {kind: ids for kind, ids in inventory.total.items() if len(ids) != baseline.get(kind, 0)}
    assert not extra, f"resources left beyond what was there before the cluster: {extra}"

    # Terminated instances and deleted NAT gateways stay visible for a while (on AWS too), tags and all.
    gone = {
        f"{ARN_PREFIX}instance/{i['InstanceId']}"
        for r in inspector.ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] == "terminated"
    } | {
        f"{ARN_PREFIX}natgateway/{n['NatGatewayId']}"
        for n in inspector.ec2.describe_nat_gateways()["NatGateways"]
        if n["State"] == "deleted"
    }
    tagged = [arn for arn in inspector.tagging_api_arns() if arn not in gone]
    assert not tagged, (
        f"the Resource Groups Tagging API still lists resources tagged with the cluster: {tagged}"
    )

    remaining = {kind: [o["metadata"]["name"] for o in capa.get(kind)] for kind in KINDS}
    assert not any(remaining.values()), f"objects left in the store after delete --wait: {remaining}"
