"""Kubernetes Events the AWS controllers record, against moto over HTTP: what ``kubectl describe`` shows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from capa_py.api.aws import AWSCluster, AWSMachine, SubnetSpec
from capa_py.api.cluster import Cluster
from capa_py.api.core import Event, Secret
from capa_py.api.meta import KubeObject
from capa_py.runtime.events import EventRecorder, events_for
from capa_py.runtime.queue import ObjectKey
from controllers.awscluster import AWSClusterController
from controllers.events import reasons_for
from tests.controllers.conftest import Harness

MACHINES = ("demo-control-plane-0", "demo-worker-0", "demo-worker-1")


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if not isinstance(o, Secret)]


def _snapshot(harness: Harness) -> dict[str, tuple[str | None, str | None, int | None]]:
    return {e.name: (e.reason, e.message, e.count) for e in harness.store.list(Event)}


def test_converging_the_example_records_one_creation_event_per_aws_resource(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(example()))
    assert harness.converge(objects).converged
    awscluster = harness.store.get(AWSCluster, "demo", "default")
    events = events_for(harness.store, awscluster)
    assert events, "no events recorded for the AWSCluster"
    assert {e.type for e in events} == {"Normal"}, [(e.reason, e.message) for e in events]
    assert all(e.count == 1 for e in events), [(e.reason, e.count) for e in events]
    # One event per resource the cluster's status records, named as CAPA names it, carrying its id.
    expected = Counter(reasons_for(r.kind).created for r in awscluster.status.resources.values())
    assert Counter(e.reason for e in events) == expected
    assert expected["SuccessfulCreateVPC"] == 1
    assert expected["SuccessfulCreateSubnet"] == 6
    assert expected["SuccessfulCreateNATGateway"] == 3
    assert expected["SuccessfulCreateSecurityGroup"] == 3
    messages = " ".join(e.message or "" for e in events)
    for record in awscluster.status.resources.values():
        assert record.id in messages, f"no event names {record.kind} {record.id}"
    [vpc_event] = [e for e in events if e.reason == "SuccessfulCreateVPC"]
    assert vpc_event.message == f"Created new managed VPC {awscluster.status.network.vpc_id}"
    assert vpc_event.involved_object.uid == awscluster.uid
    for name in MACHINES:
        machine = harness.store.get(AWSMachine, name, "default")
        reasons = Counter(e.reason for e in events_for(harness.store, machine))
        # The bootstrap data's secret, created before the instance and deleted once it runs.
        expected_machine = Counter(
            {"SuccessfulCreate": 1, "SuccessfulCreateSecret": 1, "SuccessfulDeleteSecret": 1}
        )
        if "control-plane" in name:
            expected_machine["SuccessfulAttachControlPlaneELB"] = 1
        assert reasons == expected_machine, (name, reasons)
        [created] = [e for e in events_for(harness.store, machine) if e.reason == "SuccessfulCreate"]
        assert created.message == f"Created new instance with id {machine.status.instance_id}"

    # A second pass over a converged cluster creates nothing, so it records nothing either.
    before = _snapshot(harness)
    assert harness.converge(objects).converged
    assert _snapshot(harness) == before


def test_deleting_the_cluster_records_deletions_and_what_blocked_them(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(example()))
    assert harness.converge(objects).converged
    awscluster = harness.store.get(AWSCluster, "demo", "default")
    recorded = dict(awscluster.status.resources)
    machines = {name: harness.store.get(AWSMachine, name, "default") for name in MACHINES}
    harness.store.delete(Cluster, "demo", "default")
    assert harness.converge(objects, goal="gone").converged
    events = events_for(harness.store, awscluster)
    deleted = Counter(e.reason for e in events if e.reason and e.reason.startswith("Successful"))
    for record in recorded.values():
        reason = reasons_for(record.kind).deleted
        assert any(e.reason == reason and record.id in (e.message or "") for e in events), (
            f"no {reason} event for {record.kind} {record.id}"
        )
    assert deleted["SuccessfulDeleteVPC"] == 1
    assert deleted["SuccessfulDeleteNATGateway"] == 3, "a NAT gateway still deleting is reported once"
    for name, machine in machines.items():
        reasons = [e.reason for e in events_for(harness.store, machine)]
        assert reasons.count("SuccessfulTerminate") == 1, (name, reasons)


def test_deletion_waiting_for_machines_records_why(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(example()))
    assert harness.converge(objects).converged
    harness.store.delete(AWSCluster, "demo", "default")
    controller = AWSClusterController(harness.store, harness.pool, harness.engine)
    key = ObjectKey("AWSCluster", "default", "demo")
    controller.reconcile(key)
    controller.reconcile(key)
    awscluster = harness.store.get(AWSCluster, "demo", "default")
    [blocked] = [e for e in events_for(harness.store, awscluster) if e.reason == "DeletionBlocked"]
    assert blocked.type == "Normal"
    assert blocked.message == (
        "waiting for 3 AWSMachine(s) to be deleted: demo-control-plane-0, demo-worker-0, demo-worker-1"
    )
    assert blocked.count == 2, "the same reason again is counted, not written again"


def test_a_failing_step_records_a_warning_and_repeats_are_counted(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = example()
    for obj in objects:
        if isinstance(obj, AWSCluster):
            obj.spec.network.vpc.id = "vpc-0abc1234567890def"
            obj.spec.network.vpc.cidr_block = None
            obj.spec.network.subnets = [SubnetSpec(id="subnet-0abc1234567890def")]
    stored = _targets(harness.apply(objects))
    cluster = next(o for o in stored if isinstance(o, Cluster))
    awscluster_obj = next(o for o in stored if isinstance(o, AWSCluster))
    # The core controller claims the AWSCluster (owner reference) first.
    harness.converge([cluster, awscluster_obj], timeout=20)
    recorder = EventRecorder(harness.store, instance="test-host")
    controller = AWSClusterController(harness.store, harness.pool, harness.engine, recorder)
    key = ObjectKey("AWSCluster", "default", "demo")
    controller.reconcile(key)
    controller.reconcile(key)
    awscluster = harness.store.get(AWSCluster, "demo", "default")
    warnings = [
        e
        for e in events_for(harness.store, awscluster)
        if e.type == "Warning" and e.source.host == "test-host"
    ]
    assert [(w.reason, w.count) for w in warnings] == [("FailedReconcileVpc", 2)]
    assert warnings[0].message == (
        "InvalidReference: spec.network.vpc.id: vpc-0abc1234567890def does not exist in us-east-1"
    )
