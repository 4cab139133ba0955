"""The bare-metal provider over a real SQLite store with every embedded controller running (Cluster API core,
the workflow controller, TinkerbellCluster and TinkerbellMachine).

The gRPC server and the agent are not part of these tests: what they do to a Workflow (schedule it, start
and finish its actions) is done by hand through the transition functions the server calls
(capa_py.tinkerbell.states), written to the store as the server writes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.api.cluster import Cluster, Machine, MachineAddress
from capa_py.api.conditions import get_condition
from capa_py.api.tinkerbell import Hardware, Template, Workflow
from capa_py.api.tinkerbell_capi import (
    HARDWARE_OWNER_NAME_LABEL,
    HARDWARE_OWNER_NAMESPACE_LABEL,
    HardwareAffinity,
    HardwareAffinityTerm,
    LabelSelector,
    LabelSelectorRequirement,
    TinkerbellCluster,
    TinkerbellMachine,
    WeightedHardwareAffinityTerm,
)
from capa_py.operations import apply_objects
from capa_py.runtime.events import events_for
from capa_py.store.helpers import get_or_none
from capa_py.store.sqlite import SQLiteStore
from capa_py.tinkerbell.hegel import start_in_thread
from controllers.tinkerbell_capi import default_template_spec
from tests.tinkerbell.capt_world import (
    NS,
    bootstrap_data,
    cluster_objects,
    hardware,
    machine_objects,
    owner_of,
    prepared,
    run_workflow,
    running,
    start_workflow,
)
from tests.tinkerbell.test_hegel import call


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


def _tm(store: SQLiteStore, name: str) -> TinkerbellMachine:
    return store.get(TinkerbellMachine, name, NS)


def _hw(store: SQLiteStore, name: str) -> Hardware:
    return store.get(Hardware, name, NS)


def _selector(**labels: str) -> LabelSelector:
    return LabelSelector(match_labels=labels)


def test_a_machine_is_provisioned_on_hardware_and_cluster_api_sees_it(store: SQLiteStore) -> None:
    apply_objects(
        store,
        [
            *cluster_objects(),
            *machine_objects("m1"),
            hardware("hw-a", "127.0.0.21", hostname="node-a"),
            hardware("hw-b", "127.0.0.22"),
        ],
    )
    with running(store) as ctl:
        ctl.wait_for(lambda: prepared(store, "m1"), "the machine's workflow is prepared")
        tm = _tm(store, "m1")
        assert tm.spec.hardware_name == "hw-a", "no affinity: the first free Hardware by name"
        claimed = _hw(store, "hw-a")
        assert claimed.metadata.labels[HARDWARE_OWNER_NAME_LABEL] == "m1"
        assert claimed.metadata.labels[HARDWARE_OWNER_NAMESPACE_LABEL] == NS
        assert claimed.spec.instance is not None
        assert claimed.spec.instance.userdata == bootstrap_data("m1")
        assert owner_of(_hw(store, "hw-b")) is None
        # The Template and Workflow are named after the machine and owned by it.
        template = store.get(Template, "m1", NS)
        workflow = store.get(Workflow, "m1", NS)
        for made in (template, workflow):
            assert [r.kind for r in made.metadata.owner_references] == ["TinkerbellMachine"]
        assert workflow.spec.hardware_ref.name == "hw-a"
        assert workflow.spec.template_ref.name == "m1"
        assert next(a.rendered.args for _, a in workflow.ordered_actions()) == [
            "-c",
            "echo streaming to /dev/sda",
        ]
        assert not tm.status.ready
        assert tm.status.instance_status == "Pending"
        assert store.get(Machine, "m1", NS).status.phase == "Provisioning"

        run_workflow(store, "m1")
        ctl.wait_for(
            lambda: store.get(Machine, "m1", NS).status.phase == "Provisioned", "machine provisioned"
        )

    tm = _tm(store, "m1")
    assert tm.status.ready
    assert tm.spec.provider_id == "tinkerbell://default/hw-a"
    assert tm.status.addresses == [
        MachineAddress(type="InternalIP", address="127.0.0.21"),
        MachineAddress(type="Hostname", address="node-a"),
    ]
    ready = get_condition(tm.status, "Ready")
    assert ready is not None
    assert ready.status == "True"
    machine = store.get(Machine, "m1", NS)
    assert machine.spec.provider_id == "tinkerbell://default/hw-a"
    assert machine.status.infrastructure_ready
    assert [a.address for a in machine.status.addresses] == ["127.0.0.21", "node-a"]
    cluster = store.get(Cluster, "bm", NS)
    assert cluster.status.phase == "Provisioned"
    assert cluster.status.infrastructure_ready
    assert (cluster.spec.control_plane_endpoint.host, cluster.spec.control_plane_endpoint.port) == (
        "192.168.2.100",
        6443,
    )
    assert store.get(TinkerbellCluster, "bm", NS).status.ready
    assert [(e.type, e.reason, e.message) for e in events_for(store, tm)] == [
        ("Normal", "HardwareClaimed", "claimed hardware hw-a"),
        ("Normal", "Provisioned", "provisioned on hardware hw-a"),
    ]


def test_hegel_serves_the_bootstrap_data_to_the_claimed_hardware(store: SQLiteStore) -> None:
    apply_objects(store, [*cluster_objects(), *machine_objects("m1"), hardware("hw-a", "127.0.0.21")])
    with running(store) as ctl:
        ctl.wait_for(lambda: prepared(store, "m1"), "the machine's workflow is prepared")
    hegel = start_in_thread(store, "127.0.0.1", 0, ())
    try:
        status, body, _ = call(f"{hegel.url}/2009-04-04/user-data", "127.0.0.21")
    finally:
        hegel.stop()
    assert (status, body.decode()) == (200, bootstrap_data("m1"))


def test_required_affinity_any_term_and_preferred_weights_summed(store: SQLiteStore) -> None:
    required = HardwareAffinity(
        required=[
            HardwareAffinityTerm(label_selector=_selector(rack="c")),
            HardwareAffinityTerm(
                label_selector=LabelSelector(
                    match_expressions=[
                        LabelSelectorRequirement(key="rack", operator="In", values=["b"]),
                        LabelSelectorRequirement(key="broken", operator="DoesNotExist"),
                    ]
                )
            ),
        ]
    )
    preferred = HardwareAffinity(
        preferred=[
            WeightedHardwareAffinityTerm(
                weight=50, hardware_affinity_term=HardwareAffinityTerm(label_selector=_selector(disk="nvme"))
            ),
            WeightedHardwareAffinityTerm(
                weight=30, hardware_affinity_term=HardwareAffinityTerm(label_selector=_selector(gpu="yes"))
            ),
            WeightedHardwareAffinityTerm(
                weight=30,
                hardware_affinity_term=HardwareAffinityTerm(
                    label_selector=LabelSelector(
                        match_expressions=[LabelSelectorRequirement(key="fast", operator="Exists")]
                    )
                ),
            ),
        ]
    )
    apply_objects(
        store,
        [
            *cluster_objects(),
            hardware("a-1", "127.0.0.31", {"rack": "a"}),
            hardware("b-1", "127.0.0.32", {"rack": "b", "broken": "yes"}),
            hardware("b-2", "127.0.0.33", {"rack": "b"}),
            hardware("x-1", "127.0.0.34", {"rack": "x", "disk": "nvme"}),
            hardware("x-2", "127.0.0.35", {"rack": "x", "gpu": "yes", "fast": "1"}),
            *machine_objects("needs-b", required),
            *machine_objects("prefers", preferred),
        ],
    )
    with running(store) as ctl:
        ctl.wait_for(
            lambda: prepared(store, "needs-b") and prepared(store, "prefers"),
            "both machines claimed hardware",
        )
    assert _tm(store, "needs-b").spec.hardware_name == "b-2", "rack b without the broken label"
    assert _tm(store, "prefers").spec.hardware_name == "x-2", "30 + 30 outweighs 50"


def test_no_matching_hardware_waits_with_a_condition_until_a_new_one_appears(store: SQLiteStore) -> None:
    affinity = HardwareAffinity(required=[HardwareAffinityTerm(label_selector=_selector(rack="z"))])
    apply_objects(
        store,
        [*cluster_objects(), hardware("a-1", "127.0.0.31", {"rack": "a"}), *machine_objects("m1", affinity)],
    )
    with running(store) as ctl:

        def waiting() -> bool:
            condition = get_condition(_tm(store, "m1").status, "HardwareReady")
            return condition is not None and condition.reason == "NoHardwareAvailable"

        ctl.wait_for(waiting, "the machine says no hardware is available")
        condition = get_condition(_tm(store, "m1").status, "HardwareReady")
        assert condition is not None
        assert condition.message is not None
        assert "spec.hardwareAffinity.required" in condition.message
        assert _tm(store, "m1").spec.hardware_name is None
        assert owner_of(_hw(store, "a-1")) is None
        # The running controllers see the new Hardware through their watch.
        store.create(hardware("z-1", "127.0.0.36", {"rack": "z"}))
        ctl.wait_for(lambda: _tm(store, "m1").spec.hardware_name == "z-1", "the new hardware is claimed")
        ctl.wait_for(lambda: prepared(store, "m1"), "its workflow is prepared")


def test_deleting_a_machine_deletes_its_workflow_and_frees_its_hardware(store: SQLiteStore) -> None:
    apply_objects(
        store,
        [*cluster_objects(), *machine_objects("m1"), *machine_objects("m2"), hardware("hw-a", "127.0.0.21")],
    )
    with running(store) as ctl:
        # Either machine may win the only Hardware; the other waits for one.
        ctl.wait_for(lambda: prepared(store, "m1") or prepared(store, "m2"), "one machine holds the hardware")
        winner, waiting = ("m1", "m2") if prepared(store, "m1") else ("m2", "m1")
        run_workflow(store, winner)
        ctl.wait_for(lambda: _tm(store, winner).status.ready, f"{winner} ready")
        assert _tm(store, waiting).spec.hardware_name is None
        first = _tm(store, winner)
        store.delete(Machine, winner, NS)
        ctl.wait_for(lambda: get_or_none(store, Machine, winner, NS) is None, f"{winner} gone")
        assert "HardwareReleased" in [e.reason for e in events_for(store, first)], "the events outlive it"
        assert get_or_none(store, TinkerbellMachine, winner, NS) is None
        assert get_or_none(store, Workflow, winner, NS) is None
        assert get_or_none(store, Template, winner, NS) is None
        # The freed Hardware goes to the machine that was waiting for one, with its own user-data.
        ctl.wait_for(
            lambda: _tm(store, waiting).spec.hardware_name == "hw-a", f"{waiting} claims the freed hardware"
        )
        ctl.wait_for(lambda: prepared(store, waiting), f"{waiting}'s workflow is prepared")
        freed = _hw(store, "hw-a")
        assert freed.metadata.labels[HARDWARE_OWNER_NAME_LABEL] == waiting
        assert freed.spec.instance is not None
        assert freed.spec.instance.userdata == bootstrap_data(waiting)


def test_deleting_a_machine_whose_workflow_runs_waits_for_the_cancellation(store: SQLiteStore) -> None:
    from capa_py.api.meta import utcnow
    from capa_py.store.helpers import retry_on_conflict
    from capa_py.tinkerbell import states

    apply_objects(store, [*cluster_objects(), *machine_objects("m1"), hardware("hw-a", "127.0.0.21")])
    with running(store) as ctl:
        ctl.wait_for(lambda: prepared(store, "m1"), "workflow prepared")
        start_workflow(store, "m1")
        store.delete(Machine, "m1", NS)
        ctl.wait_for(
            lambda: store.get(Workflow, "m1", NS).status.state == "Cancelling", "the workflow is cancelling"
        )
        # Until the agent confirms, the Hardware stays claimed and the machine stays.
        assert owner_of(_hw(store, "hw-a")) == "m1"
        assert get_or_none(store, TinkerbellMachine, "m1", NS) is not None
        workflow = store.get(Workflow, "m1", NS)
        retry_on_conflict(store, workflow, lambda w: states.cancelled(w, utcnow()), status=True)
        ctl.wait_for(lambda: get_or_none(store, TinkerbellMachine, "m1", NS) is None, "machine gone")
    freed = _hw(store, "hw-a")
    assert owner_of(freed) is None
    assert HARDWARE_OWNER_NAMESPACE_LABEL not in freed.metadata.labels
    assert freed.spec.instance is None or freed.spec.instance.userdata is None


def test_a_failed_workflow_is_the_machines_error_and_is_not_retried(store: SQLiteStore) -> None:
    apply_objects(store, [*cluster_objects(), *machine_objects("m1"), hardware("hw-a", "127.0.0.21")])
    with running(store) as ctl:
        ctl.wait_for(lambda: prepared(store, "m1"), "workflow prepared")
        run_workflow(store, "m1", fail_at="reboot")
        ctl.wait_for(lambda: store.get(Machine, "m1", NS).status.phase == "Failed", "machine failed")
    tm = _tm(store, "m1")
    assert not tm.status.ready
    assert tm.status.error_reason == "WorkflowFailed"
    assert tm.status.error_message == "workflow m1 failed: exit status 1"
    condition = get_condition(tm.status, "WorkflowReady")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "ExitCode")
    assert store.get(Machine, "m1", NS).status.failure_reason == "WorkflowFailed"
    warnings = [(e.reason, e.message) for e in events_for(store, tm) if e.type == "Warning"]
    assert warnings == [("WorkflowFailed", "workflow m1 failed: exit status 1")]
    # A reconcile of the failed machine writes nothing and asks for no retry.
    from capa_py.runtime.queue import ObjectKey
    from controllers.tinkerbell_capi import TinkerbellMachineController

    version = tm.metadata.resource_version
    result = TinkerbellMachineController(store).reconcile(ObjectKey("TinkerbellMachine", NS, "m1"))
    assert (result.requeue, result.requeue_after) == (False, 0)
    assert _tm(store, "m1").metadata.resource_version == version
    assert len(store.list(Workflow, namespace=NS)) == 1


def test_the_default_template_images_a_disk_from_the_tinkerbell_hub(store: SQLiteStore) -> None:
    apply_objects(
        store, [*cluster_objects(), *machine_objects("m1", override=None), hardware("hw-a", "127.0.0.21")]
    )
    with running(store) as ctl:
        ctl.wait_for(lambda: prepared(store, "m1"), "workflow prepared")
    assert store.get(Template, "m1", NS).spec == default_template_spec()
    workflow = store.get(Workflow, "m1", NS)
    actions = workflow.ordered_actions()
    assert [name for name, _ in actions] == ["stream-image", "add-cloud-init-datasource", "kexec"]
    assert all(a.rendered.image.startswith("quay.io/tinkerbell/actions/") for _, a in actions)
    assert actions[0][1].rendered.env["DEST_DISK"] == "/dev/sda"
    assert actions[1][1].rendered.env["CONTENTS"].endswith("['http://127.0.0.1:50061']}")


def test_a_machine_whose_hardware_is_deleted_says_so_and_takes_no_other(store: SQLiteStore) -> None:
    apply_objects(
        store,
        [
            *cluster_objects(),
            *machine_objects("m1"),
            hardware("hw-a", "127.0.0.21"),
            hardware("hw-b", "127.0.0.22"),
        ],
    )
    with running(store) as ctl:
        ctl.wait_for(lambda: prepared(store, "m1"), "workflow prepared")
        store.delete(Hardware, "hw-a", NS)

        def lost() -> bool:
            condition = get_condition(_tm(store, "m1").status, "HardwareReady")
            return condition is not None and condition.reason == "HardwareLost"

        ctl.wait_for(lost, "the machine reports its hardware gone")
    condition = get_condition(_tm(store, "m1").status, "HardwareReady")
    assert condition is not None
    assert condition.message == "hardware default/hw-a (spec.hardwareName) is gone"
    assert _tm(store, "m1").spec.hardware_name == "hw-a"
    assert owner_of(_hw(store, "hw-b")) is None, "a provisioned machine never moves to other hardware"


def test_status_writes_alone_wake_the_machine(store: SQLiteStore) -> None:
    """The TinkerbellCluster becoming ready and the Workflow's state are status writes (the gRPC server
    writes nothing else): each wakes the machine. Cluster API core adopts the objects first; then only the
    machine controller runs, so nothing else writes in between."""
    import threading

    from capa_py.runtime.manager import Manager
    from capa_py.store.helpers import retry_on_conflict
    from controllers.core import ClusterController, MachineController
    from controllers.tinkerbell_capi import TinkerbellMachineController
    from tests.tinkerbell.capt_world import Running

    apply_objects(store, [*cluster_objects(), *machine_objects("m1"), hardware("hw-a", "127.0.0.21")])
    core = Manager(
        store,
        [ClusterController(store, (TinkerbellCluster,)), MachineController(store, (TinkerbellMachine,))],
    )

    def adopted() -> bool:
        return any(r.kind == "Machine" for r in _tm(store, "m1").metadata.owner_references)

    assert core.run(until=adopted, timeout=60)
    manager = Manager(store, [TinkerbellMachineController(store)], workers=1)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: manager.run(stop=stop), daemon=True)
    thread.start()
    waiter = Running(store)  # only its wait_for is used: the manager above does the work
    try:

        def waiting_for_cluster() -> bool:
            condition = get_condition(_tm(store, "m1").status, "Ready")
            return condition is not None and condition.reason == "WaitingForClusterInfrastructure"

        waiter.wait_for(waiting_for_cluster, "the machine waits for the TinkerbellCluster")
        cluster = store.get(TinkerbellCluster, "bm", NS)
        retry_on_conflict(store, cluster, lambda c: setattr(c.status, "ready", True), status=True)
        waiter.wait_for(lambda: get_or_none(store, Workflow, "m1", NS) is not None, "the workflow is made")
        workflow = store.get(Workflow, "m1", NS)
        retry_on_conflict(store, workflow, lambda w: setattr(w.status, "state", "Succeeded"), status=True)
        waiter.wait_for(lambda: _tm(store, "m1").status.ready, "the machine is ready")
    finally:
        stop.set()
        thread.join(timeout=60)
