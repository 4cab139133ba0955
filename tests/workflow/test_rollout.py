"""Upgrade Cluster's machine rollout (capa_app.rollout) over real parts.

AWS: a real SQLite store and moto over HTTP; the controllers run in-process during each wait (the ``wait``
given to roll_out runs ``controllers.run.converge`` over the AWS controllers: the simplest way to have the
controllers working while roll_out waits, with nothing left running between waits). Tinkerbell: every
embedded controller running in a background thread and roll_out's default wait (``observe``); what an
agent does to a Workflow is done through the transition functions the gRPC server calls, as the bare-metal
provider's tests do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

import pytest

from capa_app.rollout import (
    CONFIG_NAME_LABEL,
    RolloutError,
    UpgradeRefused,
    check_upgrade,
    label_machines,
    plan_rollout,
    replacement_name,
    roll_out,
)
from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Machine
from capa_py.api.core import Secret
from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware, Workflow
from capa_py.api.tinkerbell_capi import HARDWARE_OWNER_NAME_LABEL, TinkerbellMachine
from capa_py.aws.accounting import CallCounter, call_scope
from capa_py.operations import apply_objects
from capa_py.store.helpers import get_or_none
from capa_py.store.sqlite import SQLiteStore
from capa_py.workflow.provider import RolloutStep
from controllers.run import ConvergeResult, converge
from tests.controllers.conftest import EXAMPLE, Harness
from tests.tinkerbell.capt_world import (
    NS,
    cluster_objects,
    hardware,
    machine_objects,
    prepared,
    run_workflow,
    running,
)

Goal = Literal["ready", "gone"]
Events = list[tuple[RolloutStep, str]]


# -- AWS ---------------------------------------------------------------------------------------------------
def _converging(harness: Harness) -> Callable[[Sequence[KubeObject], Goal, float], ConvergeResult]:
    def wait(targets: Sequence[KubeObject], goal: Goal, timeout: float) -> ConvergeResult:
        return converge(harness.store, harness.controllers(), targets, goal=goal, timeout=min(timeout, 120.0))

    return wait


def _created(harness: Harness, objects: list[KubeObject]) -> None:
    stored = [a.object for a in apply_objects(harness.store, label_machines(objects))]
    result = harness.converge([o for o in stored if not isinstance(o, Secret)], timeout=120.0)
    assert result.converged, f"the example cluster did not come up: {result.states}"


def _instance_ids(harness: Harness) -> dict[str, str]:
    return {m.name: m.status.instance_id or "" for m in harness.store.list(AWSMachine)}


def _instances(harness: Harness) -> dict[str, dict]:  # type: ignore[type-arg]
    pages = harness.aws.ec2.pages("DescribeInstances", "Reservations")
    return {i["InstanceId"]: i for r in pages for i in r["Instances"]}


def _with(objects: list[KubeObject], change: Callable[[KubeObject], None]) -> list[KubeObject]:
    for obj in objects:
        change(obj)
    return objects


def _worker1_type(instance_type: str) -> Callable[[KubeObject], None]:
    def change(obj: KubeObject) -> None:
        if isinstance(obj, AWSMachine) and obj.name == "demo-worker-1":
            obj.spec.instance_type = instance_type

    return change


def _machine_events(store: SQLiteStore, since: str) -> list[tuple[str, bool, str | None]]:
    """Every Machine change after ``since``, in order: (name, being deleted, phase)."""
    return [
        (e.object.name, e.object.being_deleted, e.object.status.phase)
        for e in store.watch(Machine, resource_version=since, timeout=0.3)
    ]


def test_changed_worker_is_replaced_alone_new_ready_before_old_deleted(
    harness: Harness,
    example: Callable[[], list[KubeObject]],
) -> None:
    _created(harness, example())
    before = _instance_ids(harness)

    def add_tag(obj: KubeObject) -> None:
        if isinstance(obj, AWSCluster):
            obj.spec.additional_tags["cost-center"] = "42"

    desired = _with(_with(example(), _worker1_type("t3.large")), add_tag)
    since = harness.store.current_resource_version()
    events: Events = []
    with call_scope() as calls:
        steps = roll_out(
            harness.store,
            desired,
            timeout=300.0,
            wait=_converging(harness),
            on_step=lambda step, phase: events.append((step, phase)),
        )

    new = next(s.new for s in steps if s.action == "replace")
    assert new is not None
    assert new.startswith("demo-worker-1-"), new
    assert [(s.action, s.machine, s.old) for s in steps] == [
        ("unchanged", "demo-control-plane-0", "demo-control-plane-0"),
        ("unchanged", "demo-worker-0", "demo-worker-0"),
        ("replace", "demo-worker-1", "demo-worker-1"),
    ]
    assert [(s.machine, phase) for s, phase in events] == [
        (m, phase)
        for m in ("demo-control-plane-0", "demo-worker-0", "demo-worker-1")
        for phase in ("started", "finished")
    ]
    ops = calls.by_operation()
    assert ops.get("ec2:RunInstances") == 1, ops
    assert ops.get("ec2:TerminateInstances") == 1, ops

    # The new Machine was Provisioned before the old one was marked for deletion.
    history = _machine_events(harness.store, since)
    ready_at = next(i for i, (n, _, phase) in enumerate(history) if n == new and phase == "Provisioned")
    deleting_at = next(i for i, (n, deleting, _) in enumerate(history) if n == "demo-worker-1" and deleting)
    assert ready_at < deleting_at, history

    after = _instance_ids(harness)
    assert {n: after[n] for n in ("demo-control-plane-0", "demo-worker-0")} == {
        n: before[n] for n in ("demo-control-plane-0", "demo-worker-0")
    }, "untouched machines keep their instances"
    assert "demo-worker-1" not in after
    assert get_or_none(harness.store, Machine, "demo-worker-1", "default") is None
    instances = _instances(harness)
    assert instances[before["demo-worker-1"]]["State"]["Name"] == "terminated"
    assert instances[after[new]]["InstanceType"] == "t3.large"
    assert instances[after[new]]["State"]["Name"] == "running"
    replacement = harness.store.get(Machine, new, "default")
    assert replacement.metadata.labels[CONFIG_NAME_LABEL] == "demo-worker-1"
    assert replacement.spec.infrastructure_ref.name == new
    assert replacement.spec.bootstrap.data_secret_name == "demo-bootstrap"

    vpc_id = harness.store.get(AWSCluster, "demo", "default").status.network.vpc_id
    vpc = harness.aws.ec2.call("DescribeVpcs", VpcIds=[vpc_id])["Vpcs"][0]
    assert {"Key": "cost-center", "Value": "42"} in vpc["Tags"], vpc["Tags"]

    with call_scope() as again:
        rerun = roll_out(harness.store, desired, timeout=300.0, wait=_converging(harness))
    assert [(s.action, s.old) for s in rerun] == [
        ("unchanged", "demo-control-plane-0"),
        ("unchanged", "demo-worker-0"),
        ("unchanged", new),
    ]
    assert again.total(mutating=True) == 0, again.mutating_operations()


class Interrupted(Exception):
    """Stands for the process being killed."""


@pytest.mark.parametrize(
    "killed_at",
    ["replacement stored", "replacement ready", "old being deleted"],
)
def test_replace_interrupted_at_each_point_finishes_with_one_new_instance(
    harness: Harness,
    example: Callable[[], list[KubeObject]],
    killed_at: str,
) -> None:
    _created(harness, example())
    old_instance = _instance_ids(harness)["demo-worker-1"]
    desired = _with(example(), _worker1_type("t3.large"))
    converging = _converging(harness)

    def killed(targets: Sequence[KubeObject], goal: Goal, timeout: float) -> ConvergeResult:
        replacement = any(t.name.startswith("demo-worker-1-") for t in targets)
        if killed_at == "replacement stored" and goal == "ready" and replacement:
            raise Interrupted
        if killed_at == "old being deleted" and goal == "gone":
            raise Interrupted
        result = converging(targets, goal, timeout)
        if killed_at == "replacement ready" and goal == "ready" and replacement:
            raise Interrupted
        return result

    counter = CallCounter()
    with call_scope(counter), pytest.raises(Interrupted):
        roll_out(harness.store, desired, timeout=300.0, wait=killed)
    names = sorted(m.name for m in harness.store.list(Machine) if m.name.startswith("demo-worker-1"))
    assert len(names) == 2, f"both the old and the replacement are stored: {names}"
    deleting = harness.store.get(Machine, "demo-worker-1", "default").being_deleted
    assert deleting == (killed_at == "old being deleted"), (
        "the old machine is deleted only once the new is ready"
    )
    assert plan_rollout(harness.store, desired)[-1].action == "replace"

    with call_scope(counter):
        steps = roll_out(harness.store, desired, timeout=300.0, wait=converging)
    if killed_at == "old being deleted":
        # Waiting for the cluster first may already let the Machine controller finish the deletion it was
        # asked for; either way the replacement is the machine that stays.
        assert (steps[-1].action, names[1]) in {("replace", steps[-1].new), ("unchanged", steps[-1].old)}
    else:
        assert (steps[-1].action, steps[-1].old, steps[-1].new) == ("replace", "demo-worker-1", names[1])
    assert counter.by_operation().get("ec2:RunInstances") == 1, counter.by_operation()
    assert counter.by_operation().get("ec2:TerminateInstances") == 1, counter.by_operation()
    live = [i for i in _instances(harness).values() if i["State"]["Name"] != "terminated"]
    assert len(live) == 3, [i["InstanceId"] for i in live]
    assert old_instance not in {i["InstanceId"] for i in live}
    assert sorted(m.name for m in harness.store.list(Machine)) == sorted(
        ["demo-control-plane-0", "demo-worker-0", names[1]]
    )


def test_a_worker_left_out_of_the_config_is_deleted(
    harness: Harness,
    example: Callable[[], list[KubeObject]],
) -> None:
    _created(harness, example())
    gone = _instance_ids(harness)["demo-worker-1"]
    desired = [o for o in example() if o.name != "demo-worker-1"]
    steps = roll_out(harness.store, desired, timeout=300.0, wait=_converging(harness))
    assert [(s.action, s.machine) for s in steps] == [
        ("unchanged", "demo-control-plane-0"),
        ("unchanged", "demo-worker-0"),
        ("delete", "demo-worker-1"),
    ]
    assert get_or_none(harness.store, Machine, "demo-worker-1", "default") is None
    assert get_or_none(harness.store, AWSMachine, "demo-worker-1", "default") is None
    assert _instances(harness)[gone]["State"]["Name"] == "terminated"


# -- store only --------------------------------------------------------------------------------------------
def test_plan_lists_each_step_and_writes_nothing(store: SQLiteStore) -> None:
    stored = [*cluster_objects(), *machine_objects("m1"), *machine_objects("m2"), *machine_objects("m3")]
    apply_objects(store, label_machines(stored))
    before = store.current_resource_version()

    desired = [*cluster_objects(), *machine_objects("m1"), *machine_objects("m2"), *machine_objects("m4")]
    changed = next(o for o in desired if isinstance(o, TinkerbellMachine) and o.name == "m2")
    changed.spec.template_override = (changed.spec.template_override or "").replace("streaming", "copying")
    steps = plan_rollout(store, desired)

    machine, infra = (o for o in desired if o.name == "m2" and isinstance(o, Machine | TinkerbellMachine))
    assert isinstance(machine, Machine)
    expected_name = replacement_name(machine, infra)
    assert steps == [
        RolloutStep("unchanged", "m1", "m1", None),
        RolloutStep("replace", "m2", "m2", expected_name),
        RolloutStep("create", "m4", None, "m4"),
        RolloutStep("delete", "m3", "m3", None),
    ]
    assert expected_name.startswith("m2-")
    assert len(expected_name) == len("m2-") + 5
    assert store.current_resource_version() == before, "planning wrote to the store"


def test_check_refuses_immutable_cluster_change_and_bad_machines_naming_each(store: SQLiteStore) -> None:
    apply_objects(store, label_machines(load_manifests([EXAMPLE])))
    before = store.current_resource_version()
    desired = load_manifests([EXAMPLE])
    for obj in desired:
        if isinstance(obj, AWSCluster):
            obj.spec.network.vpc.cidr_block = "10.1.0.0/16"
        if isinstance(obj, Machine) and obj.name == "demo-worker-0":
            obj.spec.cluster_name = "other"
    desired = [o for o in desired if not (isinstance(o, AWSMachine) and o.name == "demo-worker-1")]

    with pytest.raises(UpgradeRefused) as refused:
        check_upgrade(store, desired)
    message = str(refused.value)
    assert "AWSCluster default/demo: spec.network.vpc.cidrBlock" in message, message
    assert "Machine default/demo-worker-0: spec.clusterName" in message, message
    assert "Machine default/demo-worker-1: spec.infrastructureRef: AWSMachine demo-worker-1" in message
    with pytest.raises(UpgradeRefused):
        roll_out(store, desired, timeout=1.0)
    assert store.current_resource_version() == before, "a refused upgrade wrote to the store"

    missing = [o for o in load_manifests([EXAMPLE]) if not isinstance(o, Machine | AWSMachine)]
    for obj in missing:
        obj.metadata.name = "absent" if obj.KIND in ("Cluster", "AWSCluster") else obj.metadata.name
        if obj.KIND == "Cluster":
            obj.spec.infrastructure_ref.name = "absent"  # type: ignore[attr-defined]
    with pytest.raises(UpgradeRefused, match="Cluster default/absent: not in the store"):
        check_upgrade(store, missing)


# -- Tinkerbell --------------------------------------------------------------------------------------------
@contextmanager
def _agent(store: SQLiteStore) -> Iterator[None]:
    """Runs every prepared Workflow to success as an agent would (through the server's transitions)."""
    stop = threading.Event()

    def loop() -> None:
        done: set[str] = set()
        while not stop.wait(0.05):
            for workflow in store.list(Workflow, namespace=NS):
                key = f"{workflow.name}/{workflow.metadata.uid}"
                if key not in done and prepared(store, workflow.name):
                    run_workflow(store, workflow.name)
                    done.add(key)

    thread = threading.Thread(target=loop, daemon=True, name="test-agent")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10.0)


def _owners(store: SQLiteStore) -> dict[str, str | None]:
    return {h.name: h.metadata.labels.get(HARDWARE_OWNER_NAME_LABEL) for h in store.list(Hardware)}


def test_tinkerbell_machine_with_a_changed_spec_is_rolled_onto_other_hardware(store: SQLiteStore) -> None:
    machines = [*machine_objects("m1"), *machine_objects("m2")]
    config = [*cluster_objects(), *machines, *(hardware(f"hw-{i}", f"127.0.0.2{i}") for i in (1, 2, 3))]
    with running(store), _agent(store):
        apply_objects(store, label_machines(config))
        initial = roll_out(store, config, timeout=60.0)
        assert [s.action for s in initial] == ["unchanged", "unchanged"]
        claimed = {owner: hw for hw, owner in _owners(store).items()}
        assert set(claimed) == {"m1", "m2", None}, claimed

        desired = [*cluster_objects(), *machine_objects("m1"), *machine_objects("m2")]
        desired += [hardware(f"hw-{i}", f"127.0.0.2{i}") for i in (1, 2, 3)]
        changed = next(o for o in desired if isinstance(o, TinkerbellMachine) and o.name == "m2")
        changed.spec.template_override = (changed.spec.template_override or "").replace(
            "streaming", "copying"
        )
        since = store.current_resource_version()
        events: Events = []
        steps = roll_out(store, desired, timeout=60.0, on_step=lambda s, p: events.append((s, p)))

    new = steps[1].new
    assert [(s.machine, p) for s, p in events] == [
        ("m1", "started"),
        ("m1", "finished"),
        ("m2", "started"),
        ("m2", "finished"),
    ]
    history = _machine_events(store, since)
    ready_at = next(i for i, (n, _, phase) in enumerate(history) if n == new and phase == "Provisioned")
    deleting_at = next(i for i, (n, deleting, _) in enumerate(history) if n == "m2" and deleting)
    assert ready_at < deleting_at, history
    assert [(s.action, s.old) for s in steps] == [("unchanged", "m1"), ("replace", "m2")]
    assert new is not None
    assert _owners(store) == {claimed["m1"]: "m1", claimed["m2"]: None, claimed[None]: new}
    assert store.get(Machine, new, NS).status.phase == "Provisioned"
    assert get_or_none(store, Machine, "m2", NS) is None
    assert get_or_none(store, TinkerbellMachine, "m2", NS) is None
    tm = store.get(TinkerbellMachine, new, NS)
    assert "copying" in (tm.spec.template_override or "")
    assert tm.metadata.labels[CONFIG_NAME_LABEL] == "m2"


def test_a_wait_that_does_not_converge_names_the_objects(store: SQLiteStore) -> None:
    config = [*cluster_objects(), *machine_objects("m1"), hardware("hw-1", "127.0.0.21")]
    apply_objects(store, label_machines(config))
    with pytest.raises(RolloutError, match=r"Cluster default/bm: pending"):
        roll_out(store, config, timeout=0.5)


def test_label_machines_marks_each_machine_and_its_infrastructure_only() -> None:
    objects = [*cluster_objects(), *machine_objects("m1")]
    labelled = label_machines(objects)
    assert {o.KIND: o.metadata.labels.get(CONFIG_NAME_LABEL) for o in labelled} == {
        "Cluster": None,
        "TinkerbellCluster": None,
        "Secret": None,
        "Machine": "m1",
        "TinkerbellMachine": "m1",
    }
    assert all(CONFIG_NAME_LABEL not in o.metadata.labels for o in objects), "the input is left as it was"
