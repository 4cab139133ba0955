"""The Tinkerbell workflow controller over a real SQLite store: preparation, every supervised timeout (a
fake clock, never a sleep), cancellation by deletion in every state, and a restart in every state.

What the gRPC server will do (schedule, start and finish actions) is done here through the same
transition functions it will call (capa_py.tinkerbell.states), written to the store as it will write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster
from capa_py.api.conditions import get_condition
from capa_py.api.meta import ObjectMeta, OwnerReference
from capa_py.api.tinkerbell import (
    DHCP,
    WORKFLOW_FINALIZER,
    Action,
    Hardware,
    HardwareSpec,
    LocalObjectReference,
    NetworkInterface,
    Template,
    TemplateSpec,
    Workflow,
    WorkflowSpec,
)
from capa_py.api.tinkerbell_capi import TinkerbellMachine
from capa_py.operations import apply_objects
from capa_py.runtime.events import EventRecorder, events_for
from capa_py.runtime.manager import Manager
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import Conflict, Invalid, NotFound
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.sqlite import SQLiteStore
from capa_py.tinkerbell import states
from controllers.tinkerbell import WorkflowController, WorkflowTimeouts

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
TIMEOUTS = WorkflowTimeouts(scheduling=60, cancel=30, action=100)
KEY = ObjectKey("Workflow", "default", "wf")


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class World:
    """A store, a fake clock and the workflow controller; what the gRPC server does, by hand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = SQLiteStore(path)
        self.clock = FakeClock()
        self.controller = self.new_controller()

    def new_controller(self) -> WorkflowController:
        return WorkflowController(self.store, EventRecorder(self.store), TIMEOUTS, self.clock)

    def restart(self) -> None:
        """A new process: the store reopened, a new controller (nothing kept in memory)."""
        self.store.close()
        self.store = SQLiteStore(self.path)
        self.controller = self.new_controller()

    def reconcile(self) -> Any:
        return self.controller.reconcile(KEY)

    def workflow(self) -> Workflow:
        return self.store.get(Workflow, "wf", "default")

    def gone(self) -> bool:
        try:
            self.workflow()
        except NotFound:
            return True
        return False

    def server(self, change: Callable[[Workflow], None]) -> None:
        """A status write as the gRPC server makes it (at the clock's time)."""
        retry_on_conflict(self.store, self.workflow(), change, status=True)

    def schedule(self) -> None:
        self.server(lambda w: states.scheduled(w, self.clock()))

    def start(self, name: str) -> None:
        self.server(lambda w: states.action_started(w, name, self.clock()))

    def delete(self) -> None:
        self.store.delete(Workflow, "wf", "default")

    def reasons(self) -> list[str]:
        return [e.reason or "" for e in events_for(self.store, self.uid_ref)]

    uid_ref: Workflow


def hardware() -> Hardware:
    return Hardware(
        metadata=ObjectMeta(name="hw", namespace="default"),
        spec=HardwareSpec(
            network_interfaces={
                "3c:ec:ef:4c:4f:54": NetworkInterface(dhcp=DHCP(ip="192.168.2.10", netmask="255.255.255.0"))
            },
            storage_devices=["/dev/nvme0n1"],
        ),
    )


def template(*actions: Action, env: dict[str, str] | None = None) -> Template:
    return Template(
        metadata=ObjectMeta(name="tpl", namespace="default"),
        spec=TemplateSpec(
            actions=list(actions)
            or [
                Action(name="stream", image="image2disk", args=["{{ .device_1 }}"], timeout=30),
                Action(name="reboot", image="reboot"),
            ],
            env=env or {"DISK": "{{ index .Hardware.Disks 0 }}"},
        ),
    )


def workflow(timeout: int = 0, data: dict[str, Any] | None = None) -> Workflow:
    return Workflow(
        metadata=ObjectMeta(name="wf", namespace="default"),
        spec=WorkflowSpec(
            hardware_ref=LocalObjectReference(name="hw"),
            template_ref=LocalObjectReference(name="tpl"),
            template_data={"device_1": "/dev/sda"} if data is None else data,
            timeout=timeout,
        ),
    )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path / "state.db")
    yield made
    made.store.close()


def setup(
    world: World, wf: Workflow | None = None, with_hardware: bool = True, with_template: bool = True
) -> None:
    objects = [*([hardware()] if with_hardware else []), *([template()] if with_template else [])]
    applied = apply_objects(world.store, [*objects, wf or workflow()])
    world.uid_ref = applied[-1].object  # type: ignore[assignment]


def prepared(world: World, wf: Workflow | None = None) -> Workflow:
    setup(world, wf)
    result = world.reconcile()
    assert result.requeue_after == 0
    return world.workflow()


# -- preparation ----------------------------------------------------------------------------------------
def test_preparation_renders_the_actions_in_order_and_holds_a_finalizer(world: World) -> None:
    wf = prepared(world)
    assert wf.status.state == "Pending"
    assert wf.status.last_transition_time == T0
    assert wf.status.observed_generation == wf.metadata.generation
    assert WORKFLOW_FINALIZER in wf.metadata.finalizers
    assert [(name, a.index) for name, a in wf.ordered_actions()] == [("stream", 0), ("reboot", 1)]
    stream = wf.status.actions["stream"]
    assert stream.state == "Pending"
    assert stream.rendered.args == ["/dev/sda"]
    assert stream.rendered.env == {"DISK": "/dev/nvme0n1"}, "the template's env is merged in"
    assert stream.rendered.timeout == 30
    prepared_condition = get_condition(wf.status, "Prepared")
    assert prepared_condition is not None
    assert prepared_condition.status == "True"
    assert "Prepared" in world.reasons()


@pytest.mark.parametrize(
    ("missing", "reason"), [("hardware", "HardwareNotFound"), ("template", "TemplateNotFound")]
)
def test_a_missing_reference_is_a_condition_and_its_creation_prepares_the_workflow(
    world: World, missing: str, reason: str
) -> None:
    setup(world, with_hardware=missing != "hardware", with_template=missing != "template")
    manager = Manager(world.store, [world.controller])
    manager.prime()
    drain(manager)
    wf = world.workflow()
    condition = get_condition(wf.status, "Prepared")
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", reason)
    assert wf.status.state is None
    assert not wf.status.actions
    assert not manager.queue.has_work([KEY]), "nothing polls for the missing object"
    apply_objects(world.store, [hardware() if missing == "hardware" else template()])
    manager.poll_changes()
    assert manager.queue.has_work([KEY]), f"the {missing}'s creation wakes the workflow naming it"
    drain(manager)
    wf = world.workflow()
    assert wf.status.state == "Pending"
    assert list(wf.status.actions) == ["stream", "reboot"]


def drain(manager: Manager) -> None:
    while manager.process_one(timeout=0):
        manager.poll_changes()


def test_a_render_error_fails_the_workflow_naming_the_field(world: World) -> None:
    setup(world, workflow(data={}))
    world.reconcile()
    wf = world.workflow()
    assert (wf.status.state, wf.status.reason) == ("Failed", "RenderFailed")
    assert wf.status.message is not None
    assert wf.status.message.startswith("spec.actions[0].args[0]: "), wf.status.message
    assert "device_1" in wf.status.message
    assert WORKFLOW_FINALIZER not in wf.metadata.finalizers, "an end state lets the workflow go"
    assert "RenderFailed" in world.reasons()


def test_template_data_may_not_shadow_the_hardware(world: World) -> None:
    refused = None
    try:
        setup(world, workflow(data={"device_1": "/dev/sda", "Hardware": "x"}))
    except Invalid as exc:
        refused = str(exc)
    if refused is not None:
        # Admission may refuse it first; then it must name the same field.
        assert "spec.templateData.Hardware" in refused
        return
    world.reconcile()
    wf = world.workflow()
    assert (wf.status.state, wf.status.reason) == ("Failed", "RenderFailed")
    assert (wf.status.message or "").startswith("spec.templateData.Hardware: ")


def test_a_pending_workflow_is_rendered_again_when_its_spec_changes_but_not_once_scheduled(
    world: World,
) -> None:
    wf = prepared(world)

    def new_disk(w: Workflow) -> None:
        w.spec.template_data = {"device_1": "/dev/sdb"}

    wf = retry_on_conflict(world.store, wf, new_disk)
    world.reconcile()
    wf = world.workflow()
    assert wf.status.actions["stream"].rendered.args == ["/dev/sdb"]
    assert wf.status.observed_generation == wf.metadata.generation
    world.schedule()

    def other_template(t: Template) -> None:
        t.spec.actions[0].args = ["changed"]

    retry_on_conflict(world.store, world.store.get(Template, "tpl", "default"), other_template)
    world.reconcile()
    assert world.workflow().status.actions["stream"].rendered.args == ["/dev/sdb"], "a scheduled one is kept"


# -- supervision ----------------------------------------------------------------------------------------
def test_scheduled_too_long_fails_with_scheduling_timeout(world: World) -> None:
    prepared(world)
    world.schedule()
    world.clock.advance(59)
    assert world.reconcile().requeue_after == pytest.approx(1.0), "requeued for the deadline"
    assert world.workflow().status.state == "Scheduled"
    world.clock.advance(1)
    world.reconcile()
    wf = world.workflow()
    assert (wf.status.state, wf.status.reason) == ("Failed", "SchedulingTimeout")
    assert wf.status.last_transition_time == world.clock()
    assert WORKFLOW_FINALIZER not in wf.metadata.finalizers
    assert "SchedulingTimeout" in world.reasons()


def test_running_longer_than_the_workflow_timeout_fails_it_and_its_action(world: World) -> None:
    prepared(world, workflow(timeout=20))
    world.schedule()
    world.start("stream")
    world.clock.advance(10)
    assert world.reconcile().requeue_after == pytest.approx(10.0)
    world.clock.advance(10)
    world.reconcile()
    wf = world.workflow()
    assert (wf.status.state, wf.status.reason) == ("Failed", "Timeout")
    assert "timeout of 20s" in (wf.status.message or "")
    assert wf.status.actions["stream"].state == "Failed"


def test_an_action_running_longer_than_its_timeout_fails_naming_it(world: World) -> None:
    prepared(world)
    world.schedule()
    world.start("stream")
    world.clock.advance(29)
    assert world.reconcile().requeue_after == pytest.approx(1.0), "the action's own 30s"
    world.clock.advance(1)
    world.reconcile()
    wf = world.workflow()
    assert (wf.status.state, wf.status.reason) == ("Failed", "Timeout")
    assert "action 'stream'" in (wf.status.message or "")
    assert (wf.status.actions["stream"].state, wf.status.actions["stream"].reason) == ("Failed", "Timeout")


def test_an_action_without_a_timeout_gets_the_controllers_default(world: World) -> None:
    prepared(world)
    world.schedule()
    world.start("stream")
    world.server(lambda w: states.action_succeeded(w, "stream", world.clock()))
    world.start("reboot")
    world.clock.advance(99)
    assert world.reconcile().requeue_after == pytest.approx(1.0), "the default action timeout, 100s"
    world.clock.advance(1)
    world.reconcile()
    wf = world.workflow()
    assert (wf.status.state, wf.status.current_action) == ("Failed", "reboot")
    assert "action 'reboot'" in (wf.status.message or "")


def test_a_workflow_timeout_of_zero_is_none(world: World) -> None:
    prepared(world, workflow(timeout=0))
    world.schedule()
    world.start("stream")
    world.server(lambda w: states.action_succeeded(w, "stream", world.clock()))
    world.start("reboot")
    world.clock.advance(50)
    assert world.reconcile().requeue_after == pytest.approx(50.0), "only the action's deadline is left"


def test_a_succeeded_workflow_drops_its_finalizer(world: World) -> None:
    prepared(world)
    world.schedule()
    for name in ("stream", "reboot"):
        world.start(name)
        world.server(lambda w, n=name: states.action_succeeded(w, n, world.clock()))  # type: ignore[misc]
    world.reconcile()
    wf = world.workflow()
    assert wf.status.state == "Succeeded"
    assert WORKFLOW_FINALIZER not in wf.metadata.finalizers


# -- cancellation by deletion ---------------------------------------------------------------------------
def test_deleting_a_pending_workflow_cancels_it_at_once(world: World) -> None:
    prepared(world)
    world.delete()
    world.reconcile()
    assert world.gone()
    canceled = [e for e in events_for(world.store, world.uid_ref) if e.reason == "Canceled"]
    assert canceled, "the final state outlives the object as an Event"
    assert canceled[-1].message == "Canceled: the workflow was deleted before it was scheduled"


def test_deleting_an_unprepared_workflow_cancels_it_at_once(world: World) -> None:
    setup(world, with_hardware=False)
    world.reconcile()
    assert WORKFLOW_FINALIZER in world.workflow().metadata.finalizers
    world.delete()
    world.reconcile()
    assert world.gone()
    assert "Canceled" in world.reasons()


@pytest.mark.parametrize("started", [False, True], ids=["scheduled", "running"])
def test_deleting_a_scheduled_or_running_workflow_waits_for_the_agent(world: World, started: bool) -> None:
    prepared(world)
    world.schedule()
    if started:
        world.start("stream")
    world.delete()
    assert world.reconcile().requeue_after == pytest.approx(30.0), "supervised by the cancel timeout"
    wf = world.workflow()
    assert wf.status.state == "Cancelling"
    assert wf.status.last_transition_time == T0
    world.clock.advance(5)
    world.server(lambda w: states.cancelled(w, world.clock()))
    world.reconcile()
    assert world.gone(), "Canceled is an end state: the finalizer goes"
    assert "Cancelling" in world.reasons()
    assert "Canceled" in world.reasons()


def test_cancelling_too_long_is_forced_to_canceled_with_a_reason(world: World) -> None:
    prepared(world)
    world.schedule()
    world.start("stream")
    world.delete()
    world.reconcile()
    world.clock.advance(30)
    world.reconcile()
    assert world.gone()
    messages = {e.reason: e for e in events_for(world.store, world.uid_ref)}
    assert messages["Canceled"].type == "Warning"
    assert (messages["Canceled"].message or "").startswith(
        "Canceled (CancelTimeout): the agent did not confirm"
    )
    assert "CancelTimeout" in messages


@pytest.mark.parametrize("end", ["Succeeded", "Failed"])
def test_deleting_an_ended_workflow_removes_it(world: World, end: str) -> None:
    prepared(world)
    world.schedule()
    world.start("stream")
    if end == "Failed":
        world.server(lambda w: states.action_failed(w, "stream", world.clock(), "Broken", "exit 1"))
    else:
        for name in ("stream", "reboot"):
            if name != "stream":
                world.start(name)
            world.server(lambda w, n=name: states.action_succeeded(w, n, world.clock()))  # type: ignore[misc]
    world.reconcile()
    world.delete()
    assert world.gone(), "no finalizer in an end state"


# -- restarts -------------------------------------------------------------------------------------------
def run_manager(world: World) -> None:
    manager = Manager(world.store, [world.controller])
    manager.prime()
    drain(manager)


def test_a_restart_while_unprepared_prepares_once_the_hardware_exists(world: World) -> None:
    setup(world, with_hardware=False)
    run_manager(world)
    apply_objects(world.store, [hardware()])
    world.restart()
    run_manager(world)
    assert world.workflow().status.state == "Pending"


def test_a_restart_keeps_a_pending_workflow_as_it_is(world: World) -> None:
    before = prepared(world)
    world.restart()
    world.clock.advance(3600)
    run_manager(world)
    after = world.workflow()
    assert after.status == before.status
    assert after.metadata.resource_version == before.metadata.resource_version, "nothing written"


@pytest.mark.parametrize("state", ["Scheduled", "Running", "Cancelling"])
def test_a_restart_resumes_the_deadline_of_every_supervised_state(world: World, state: str) -> None:
    prepared(world)
    world.schedule()
    if state != "Scheduled":
        world.start("stream")
    if state == "Cancelling":
        world.delete()
    run_manager(world)
    assert world.workflow().status.state == state
    world.restart()
    world.clock.advance(60 if state != "Cancelling" else 30)
    run_manager(world)
    if state == "Cancelling":
        assert world.gone()
        assert "CancelTimeout" in world.reasons()
    else:
        wf = world.workflow()
        assert wf.status.state == "Failed"
        assert wf.status.reason == ("SchedulingTimeout" if state == "Scheduled" else "Timeout")


def test_a_restart_after_a_deletion_while_down_cancels(world: World) -> None:
    prepared(world)
    world.restart()
    world.delete()
    run_manager(world)
    assert world.gone()
    assert "Canceled" in world.reasons()


def test_a_status_write_by_the_server_wakes_the_supervisor(world: World) -> None:
    prepared(world)
    manager = Manager(world.store, [world.controller])
    manager.prime()
    drain(manager)
    world.schedule()
    manager.poll_changes()
    assert manager.queue.has_work([KEY]), "Scheduled starts a clock: the controller must hear of it"


# -- races with the server ------------------------------------------------------------------------------
def race_before_next_status_write(world: World, server_write: Callable[[], None]) -> None:
    """The server writes between the controller's read and its status write (the controller's write then
    conflicts and is re-applied to the fresh copy)."""
    original = world.store.update_status
    pending = [server_write]

    def racing(obj: Any) -> Any:
        if pending:
            world.store.update_status = original  # type: ignore[method-assign]
            pending.pop()()
        return original(obj)

    world.store.update_status = racing  # type: ignore[method-assign]


def test_a_timeout_does_not_fail_a_workflow_the_server_moved_on_meanwhile(world: World) -> None:
    prepared(world)
    world.schedule()
    world.clock.advance(60)
    race_before_next_status_write(world, lambda: world.start("stream"))
    assert isinstance(world.reconcile().error, Conflict), "retried with back-off, as any conflict"
    wf = world.workflow()
    assert wf.status.state == "Running", "the scheduling deadline no longer applies"
    assert world.reconcile().requeue_after == pytest.approx(30.0), "the action's deadline does"


def test_a_preparation_does_not_overwrite_a_workflow_the_server_scheduled_meanwhile(world: World) -> None:
    prepared(world)

    def new_disk(w: Workflow) -> None:
        w.spec.template_data = {"device_1": "/dev/sdb"}

    retry_on_conflict(world.store, world.workflow(), new_disk)
    race_before_next_status_write(world, world.schedule)
    assert isinstance(world.reconcile().error, Conflict), "retried with back-off, as any conflict"
    wf = world.workflow()
    assert wf.status.state == "Scheduled"
    assert wf.status.actions["stream"].rendered.args == ["/dev/sda"], "what was dispatched stays recorded"


def test_the_preparation_graph_resolves_hardware_and_template_together() -> None:
    from capa_py.ctrlkit import to_mermaid
    from controllers.tinkerbell import preparation_graph

    drawn = to_mermaid(preparation_graph())
    assert "Join" in drawn
    lines = drawn.splitlines()
    join = next(line.split('"')[0].strip().rstrip("[") for line in lines if '"Join"' in line)
    targets = {line.split("-->")[1].strip() for line in lines if line.strip().startswith(f"{join} -->")}
    names = {line.split('"')[1] for line in lines if '"' in line and line.strip().split("[")[0] in targets}
    assert names == {"ResolveHardware", "ResolveTemplate"}


@pytest.mark.parametrize("end", ["Succeeded", "Failed"])
def test_a_workflow_ended_by_the_server_while_the_controller_was_down_is_let_go(
    world: World, end: str
) -> None:
    prepared(world)
    world.schedule()
    world.start("stream")
    world.restart()
    if end == "Failed":
        world.server(lambda w: states.action_failed(w, "stream", world.clock(), "Broken", "exit 1"))
    else:
        world.server(lambda w: states.action_succeeded(w, "stream", world.clock()))
        world.start("reboot")
        world.server(lambda w: states.action_succeeded(w, "reboot", world.clock()))
    assert WORKFLOW_FINALIZER in world.workflow().metadata.finalizers
    run_manager(world)
    wf = world.workflow()
    assert WORKFLOW_FINALIZER not in wf.metadata.finalizers
    ready = get_condition(wf.status, "Ready")
    assert ready is not None
    if end == "Failed":
        assert (ready.status, ready.reason) == ("False", "Broken")
    else:
        assert ready.status == "True"


def test_a_render_failure_is_final_until_the_spec_is_edited(world: World) -> None:
    setup(world, workflow(data={}))
    world.reconcile()
    assert world.workflow().status.state == "Failed"
    world.reconcile()
    assert world.workflow().status.reason == "RenderFailed", "the same spec is not rendered again"

    def fix(w: Workflow) -> None:
        w.spec.template_data = {"device_1": "/dev/sdc"}

    retry_on_conflict(world.store, world.workflow(), fix)
    world.reconcile()
    wf = world.workflow()
    assert (wf.status.state, wf.status.reason) == ("Pending", None)
    assert wf.status.actions["stream"].rendered.args == ["/dev/sdc"]
    assert WORKFLOW_FINALIZER in wf.metadata.finalizers


def test_the_supervision_graph_cancels_then_enforces_deadlines_then_lets_go() -> None:
    from capa_py.ctrlkit import to_mermaid
    from controllers.tinkerbell import supervision_graph

    drawn = to_mermaid(supervision_graph())
    order = [name for name in ("CancelOnDeletion", "EnforceDeadlines", "LetEndedGo") if name in drawn]
    assert order == ["CancelOnDeletion", "EnforceDeadlines", "LetEndedGo"]
    assert drawn.index("CancelOnDeletion") < drawn.index("EnforceDeadlines") < drawn.index("LetEndedGo")


def test_a_workflow_made_for_a_paused_clusters_machine_is_not_prepared_until_it_is_unpaused(
    world: World,
) -> None:
    # As `capa move` leaves a workflow on the target between its create and the write of its status: the
    # cluster paused, the workflow owned by its TinkerbellMachine, no status yet. Preparing it then would
    # dispatch the machine's provisioning again.
    cluster = Cluster.model_validate(
        {"metadata": {"name": "lab", "namespace": "default"}, "spec": {"paused": True}}
    )
    machine = TinkerbellMachine.model_validate(
        {"metadata": {"name": "lab-cp-0", "namespace": "default", "labels": {CLUSTER_NAME_LABEL: "lab"}}}
    )
    applied = apply_objects(world.store, [cluster, machine])
    owned = workflow()
    owned.metadata.owner_references = [
        OwnerReference(
            api_version=TinkerbellMachine.API_VERSION,
            kind="TinkerbellMachine",
            name="lab-cp-0",
            uid=applied[1].object.uid or "",
        )
    ]
    setup(world, owned)
    world.reconcile()
    left = world.workflow()
    assert left.status.state is None, "a paused cluster's workflow is not prepared"
    assert WORKFLOW_FINALIZER not in left.metadata.finalizers

    def unpause(c: Cluster) -> None:
        c.spec.paused = False

    retry_on_conflict(world.store, world.store.get(Cluster, "lab", "default"), unpause)
    world.reconcile()
    assert world.workflow().status.state == "Pending"
