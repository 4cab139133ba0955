"""The Tinkerbell workflow controller: prepares Workflows, supervises their timeouts, cancels on deletion.

Preparation (a new workflow, or a ``Pending`` one that has not started): the finalizer goes on first, so
that a deletion is always seen; the Hardware and the Template are resolved (their namespace defaults to
the workflow's; a missing one is ``Prepared=False`` with reason ``HardwareNotFound``/``TemplateNotFound``,
retried when it appears — Hardware and Template events wake the workflows naming them); the template is
rendered (:mod:`capa_py.tinkerbell.prepare`) into ``status.actions``; the workflow is ``Pending`` and
``Prepared=True``. A render error fails it (``RenderFailed``, the Go-style message). A prepared workflow
that has not started is rendered again when its spec, template or hardware changes; a workflow that
failed to render is prepared again when its spec is edited (it never ran).

Supervision (the rules live in :mod:`capa_py.tinkerbell.states`): ``Scheduled`` longer than the scheduling
timeout (from ``status.lastTransitionTime``) fails with ``SchedulingTimeout``; ``Running`` longer than
``spec.timeout`` seconds (from ``status.startedAt``; 0 is none) fails with ``Timeout``; an action running
longer than its ``timeout`` (0 or unset: the controller's default) fails it and the workflow with
``Timeout``; ``Cancelling`` longer than the cancel timeout is forced to ``Canceled`` with reason
``CancelTimeout``. Time comes from an injectable clock; a reconcile asks to be requeued when the nearest
deadline is due, never sleeps.

Both are ctrlkit graphs (:class:`Preparation`, :class:`Supervision`; ``capa ctrlkit graph
controllers.tinkerbell:preparation_graph`` and ``…:supervision_graph`` draw them).

Deletion cancels: ``Pending`` (or unprepared) → ``Canceled`` at once; ``Scheduled``/``Running`` →
``Cancelling`` (the gRPC server tells the agent). The finalizer is removed once the workflow is in an end
state (``Succeeded``, ``Failed``, ``Canceled``), whether deleted or not, so a deleted workflow goes away
when it reaches one. Every transition is also a Kubernetes Event on the workflow (``Prepared``,
``RenderFailed``, ``Canceled``, ...), which outlives the deleted object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from capa_py.api.conditions import READY, set_condition
from capa_py.api.meta import KubeObject, ObjectMeta, utcnow
from capa_py.api.tinkerbell import (
    END_STATES,
    WORKFLOW_FINALIZER,
    ActionStatus,
    Hardware,
    LocalObjectReference,
    Template,
    Workflow,
    WorkflowSpec,
)
from capa_py.ctrlkit.action import Action, Context, wrap_action
from capa_py.ctrlkit.combinators import If, Join, Sequential
from capa_py.ctrlkit.result import Result, exit_workflow, ignore_exit, no_requeue, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import Conflict
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore, WatchEvent
from capa_py.tinkerbell import states
from capa_py.tinkerbell.prepare import RENDER_FAILED, RenderFailed, render_workflow_actions
from controllers.base import add_finalizer, fetch, patch_status, remove_finalizer, settle

PREPARED = "Prepared"
HARDWARE_NOT_FOUND = "HardwareNotFound"
TEMPLATE_NOT_FOUND = "TemplateNotFound"
EVENT_PREPARED = "Prepared"
EVENT_CANCELLING = "Cancelling"
EVENT_CANCELED = "Canceled"

DEFAULT_SCHEDULING_TIMEOUT = 300.0
DEFAULT_CANCEL_TIMEOUT = 300.0
DEFAULT_ACTION_TIMEOUT = 3600.0

Clock = Callable[[], datetime]
_log = get_logger("controller.workflow")

_Ref = TypeVar("_Ref", Hardware, Template)


@dataclass(frozen=True)
class WorkflowTimeouts:
    """The supervisor's limits, in seconds (``capa controller --workflow-*-timeout``)."""

    scheduling: float = DEFAULT_SCHEDULING_TIMEOUT
    """How long a workflow may stay Scheduled before an action starts."""
    cancel: float = DEFAULT_CANCEL_TIMEOUT
    """How long a workflow may stay Cancelling before it is forced to Canceled."""
    action: float = DEFAULT_ACTION_TIMEOUT
    """How long an action without a timeout of its own may run."""


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _ref_namespace(ref: LocalObjectReference, workflow: Workflow) -> str:
    return ref.namespace or workflow.metadata.namespace or "default"


def supervision_view(workflow: Workflow) -> object:
    """What of a workflow the supervisor reacts to when someone else (the gRPC server) writes its status:
    the state, current action and action states of a supervised workflow (Scheduled, Running,
    Cancelling); nothing otherwise, so the controller's own preparation does not wake it again, while a
    workflow entering or leaving supervision does."""
    if workflow.status.state not in ("Scheduled", "Running", "Cancelling"):
        return None
    return (
        workflow.status.state,
        workflow.status.current_action,
        tuple((name, action.state) for name, action in workflow.ordered_actions()),
    )


@dataclass(frozen=True)
class Deadline:
    """A supervised limit: when it trips and what it does to the workflow then."""

    at: datetime
    reason: str
    message: str
    cancel: bool = False
    """Force Canceled (a cancellation that took too long) rather than Failed."""


def deadlines(workflow: Workflow, timeouts: WorkflowTimeouts) -> list[Deadline]:
    """The limits the workflow's state is under now (none in Pending or an end state)."""
    status = workflow.status
    found: list[Deadline] = []
    since = status.last_transition_time or workflow.metadata.creation_timestamp
    if status.state == "Scheduled" and since is not None:
        found.append(
            Deadline(
                since + timedelta(seconds=timeouts.scheduling),
                states.REASON_SCHEDULING_TIMEOUT,
                f"no action started within {_seconds(timeouts.scheduling)} of the workflow being scheduled",
            )
        )
    elif status.state == "Running":
        if workflow.spec.timeout > 0 and status.started_at is not None:
            found.append(
                Deadline(
                    status.started_at + timedelta(seconds=workflow.spec.timeout),
                    states.REASON_TIMEOUT,
                    f"the workflow did not finish within its timeout of {workflow.spec.timeout}s",
                )
            )
        current = states.running_action(workflow)
        action_started = current[1].started_at if current is not None else None
        if current is not None and action_started is not None:
            name, action = current
            limit = float(action.rendered.timeout or timeouts.action)
            found.append(
                Deadline(
                    action_started + timedelta(seconds=limit),
                    states.REASON_TIMEOUT,
                    f"action {name!r} did not finish within its timeout of {_seconds(limit)}",
                )
            )
    elif status.state == "Cancelling":
        start = status.last_transition_time or workflow.metadata.deletion_timestamp
        if start is not None:
            found.append(
                Deadline(
                    start + timedelta(seconds=timeouts.cancel),
                    states.REASON_CANCEL_TIMEOUT,
                    f"the agent did not confirm the cancellation within {_seconds(timeouts.cancel)}; "
                    "the workflow was marked Canceled without it",
                    cancel=True,
                )
            )
    return found


class Preparation:
    """One preparation of one workflow, as ctrlkit actions: finalizer, references, render, record."""

    def __init__(self, controller: WorkflowController, workflow: Workflow, now: datetime) -> None:
        self.controller = controller
        self.store = controller.store
        self.workflow = workflow
        self.now = now
        self.hardware: Hardware | None = None
        self.template: Template | None = None
        self.missing: list[tuple[str, str]] = []

    def add_finalizer(self, ctx: Context) -> Result | None:
        self.workflow = add_finalizer(self.store, self.workflow, WORKFLOW_FINALIZER)
        return None

    def resolve_hardware(self, ctx: Context) -> Result | None:
        self.hardware = self._resolve(
            Hardware, self.workflow.spec.hardware_ref, "hardwareRef", HARDWARE_NOT_FOUND
        )
        return None

    def resolve_template(self, ctx: Context) -> Result | None:
        self.template = self._resolve(
            Template, self.workflow.spec.template_ref, "templateRef", TEMPLATE_NOT_FOUND
        )
        return None

    def _resolve(self, kind: type[_Ref], ref: LocalObjectReference, field: str, reason: str) -> _Ref | None:
        """The object ``spec.<field>`` names, or None with ``reason`` recorded as missing."""
        namespace = _ref_namespace(ref, self.workflow)
        found = get_or_none(self.store, kind, ref.name, namespace)
        if found is None:
            what = f"{kind.KIND.lower()} {namespace}/{ref.name} (spec.{field}) does not exist"
            self.missing.append((reason, what))
        return found

    def wait_for_references(self, ctx: Context) -> Result | None:
        if not self.missing:
            return None
        reason = self.missing[0][0]
        message = "; ".join(m for _, m in self.missing)

        def waiting(w: Workflow) -> None:
            _still_preparable(w)
            w.status.observed_generation = w.metadata.generation
            set_condition(w.status, PREPARED, False, reason, message, "Warning")
            set_condition(w.status, READY, False, reason, message, "Warning")

        before = self.workflow
        self.workflow = patch_status(self.store, self.workflow, waiting)
        if self.workflow is not before:
            self.controller.recorder.warning(self.workflow, reason, message)
        # Not a failure: the Hardware or Template event wakes the workflow when it appears.
        return exit_workflow(reason)

    def render(self, ctx: Context) -> Result | None:
        assert self.hardware is not None
        assert self.template is not None
        workflow = self.workflow
        try:
            actions = render_workflow_actions(self.template, self.hardware, workflow.spec.template_data)
        except RenderFailed as exc:
            message = str(exc)

            def render_failed(w: Workflow) -> None:
                _still_preparable(w)
                w.status.actions = {}
                w.status.current_action = None
                w.status.observed_generation = w.metadata.generation
                states.set_state(w, "Failed", self.now, RENDER_FAILED, message)
                set_condition(w.status, PREPARED, False, RENDER_FAILED, message, "Error")
                set_condition(w.status, READY, False, RENDER_FAILED, message, "Error")

            self.workflow = patch_status(self.store, workflow, render_failed)
            self.controller.recorder.warning(self.workflow, RENDER_FAILED, message)
            _log.info("workflow render failed", workflow=workflow.ref(), field=exc.field)
            return exit_workflow(RENDER_FAILED)
        rendered = {
            action.name: ActionStatus(rendered=action, index=index) for index, action in enumerate(actions)
        }
        first = workflow.status.state is None
        template_name = self.template.name
        hardware_name = self.hardware.name

        def prepared(w: Workflow) -> None:
            _still_preparable(w)
            w.status.actions = {name: status.model_copy(deep=True) for name, status in rendered.items()}
            w.status.current_action = None
            w.status.observed_generation = w.metadata.generation
            states.set_state(w, "Pending", self.now)
            set_condition(w.status, PREPARED, True)
            set_condition(w.status, READY, True)

        before = self.workflow
        self.workflow = patch_status(self.store, workflow, prepared)
        if self.workflow is not before:
            verb = "rendered" if first else "rendered again"
            self.controller.recorder.normal(
                self.workflow,
                EVENT_PREPARED,
                f"{verb} {len(actions)} actions from template {template_name} for hardware {hardware_name}",
            )
            _log.info("workflow prepared", workflow=workflow.ref(), actions=len(actions), again=not first)
        return None

    def workflow_graph(self) -> Action:
        return Sequential(
            wrap_action("AddFinalizer", self.add_finalizer),
            Join(
                wrap_action("ResolveHardware", self.resolve_hardware),
                wrap_action("ResolveTemplate", self.resolve_template),
            ),
            wrap_action("WaitForReferences", self.wait_for_references),
            wrap_action("RenderActions", self.render),
        )

    def run(self) -> Result:
        return ignore_exit(self.workflow_graph().run(Context()))


@dataclass
class WorkflowController:
    """Reconciles Workflows (see the module docstring)."""

    store: ObjectStore
    events: EventRecorder | None = None
    timeouts: WorkflowTimeouts = field(default_factory=WorkflowTimeouts)
    clock: Clock = utcnow

    name = "workflow"
    kind = Workflow
    # Its own kind too: the gRPC server's status writes (Scheduled, Running, an action starting) start
    # the clocks the supervisor keeps.
    watched_kinds = (Hardware, Template, Workflow)
    status_kinds = (Workflow,)

    def __post_init__(self) -> None:
        if self.events is None:
            self.events = EventRecorder(self.store)
        self.views = {"Workflow": supervision_view}

    @property
    def recorder(self) -> EventRecorder:
        assert self.events is not None
        return self.events

    # -- events -------------------------------------------------------------------------------------
    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        obj: KubeObject = event.object
        if isinstance(obj, Workflow):
            return (
                []
                if event.type == "DELETED"
                else [ObjectKey("Workflow", obj.metadata.namespace or "", obj.name)]
            )
        if isinstance(obj, Hardware | Template):
            return list(self._referrers(obj))
        return []

    def _referrers(self, obj: Hardware | Template) -> Iterable[ObjectKey]:
        """The workflows naming ``obj`` that are not running yet (only those read it)."""
        for workflow in self.store.list(Workflow):
            ref = workflow.spec.hardware_ref if isinstance(obj, Hardware) else workflow.spec.template_ref
            if ref.name != obj.name or _ref_namespace(ref, workflow) != (obj.metadata.namespace or "default"):
                continue
            if workflow.status.state in (None, "Pending"):
                yield ObjectKey("Workflow", workflow.metadata.namespace or "", workflow.name)

    # -- reconcile ----------------------------------------------------------------------------------
    def reconcile(self, key: ObjectKey) -> Result:
        workflow = fetch(self.store, Workflow, key)
        if workflow is None:
            return no_requeue()
        now = self.clock()
        if workflow.being_deleted and WORKFLOW_FINALIZER not in workflow.metadata.finalizers:
            return no_requeue()  # nothing of ours holds it: it is going
        if not workflow.being_deleted and preparable(workflow):
            preparation = Preparation(self, workflow, now)
            result = preparation.run()
            settle(self, key, preparation.workflow)
            if preparation.workflow.status.state in END_STATES:
                remove_finalizer(self.store, preparation.workflow, WORKFLOW_FINALIZER)
            return result
        supervision = Supervision(self, workflow, now)
        result = supervision.run()
        settle(self, key, supervision.workflow)
        return result


class Supervision:
    """One supervision pass, as ctrlkit actions: a deletion cancels, a passed deadline fails (or forces
    Canceled), and an ended workflow is let go."""

    def __init__(self, controller: WorkflowController, workflow: Workflow, now: datetime) -> None:
        self.controller = controller
        self.store = controller.store
        self.workflow = workflow
        self.now = now

    def deleted(self, ctx: Context) -> bool:
        return self.workflow.being_deleted

    def cancel_on_deletion(self, ctx: Context) -> Result | None:
        workflow = self.workflow
        if workflow.status.state in END_STATES or workflow.status.state == "Cancelling":
            return None
        before_state = workflow.status.state or "not yet prepared"
        now = self.now

        def cancel(w: Workflow) -> None:
            states.cancel_requested(w, now)
            reason = w.status.reason or states.REASON_CANCELED
            set_condition(w.status, READY, False, reason, w.status.message, "Info")

        self.workflow = patch_status(self.store, workflow, cancel)
        if self.workflow.status.state == "Cancelling":
            self.controller.recorder.normal(
                self.workflow, EVENT_CANCELLING, f"deleted while {before_state}; asking the agent to stop"
            )
        _log.info("workflow cancelled", workflow=workflow.ref(), state=self.workflow.status.state)
        return None

    def enforce_deadlines(self, ctx: Context) -> Result | None:
        workflow = self.workflow
        limits = deadlines(workflow, self.controller.timeouts)
        if not limits:
            return None
        due = min(limits, key=lambda d: d.at)
        if due.at > self.now:
            return requeue_after(max((due.at - self.now).total_seconds(), 0.001))
        expected = workflow.status.state
        now = self.now

        def trip(w: Workflow) -> None:
            if w.status.state != expected:
                # The server moved it meanwhile (an action started): the deadline is stale.
                raise Conflict(f"{w.ref()} became {w.status.state} while timing out")
            if due.cancel:
                states.cancelled(w, now, due.reason, due.message)
            else:
                states.failed(w, now, due.reason, due.message)
            set_condition(w.status, READY, False, due.reason, due.message, "Error")

        self.workflow = patch_status(self.store, workflow, trip)
        self.controller.recorder.warning(self.workflow, due.reason, due.message)
        _log.info(
            "workflow timed out", workflow=workflow.ref(), reason=due.reason, state=self.workflow.status.state
        )
        return None

    def let_ended_go(self, ctx: Context) -> Result | None:
        """An end state reached (here, or by the server): Ready says how it ended, a deleted workflow's last
        word is an Event (it outlives the object), and the finalizer goes."""
        workflow = self.workflow
        status = workflow.status
        if status.state not in END_STATES:
            return None
        workflow = patch_status(self.store, workflow, _ready_from_state)
        if workflow.being_deleted and status.state == "Canceled":
            quiet = status.reason in (None, states.REASON_CANCELED)
            summary = "Canceled" if quiet else f"Canceled ({status.reason})"
            self.controller.recorder.event(
                workflow,
                "Normal" if quiet else "Warning",
                EVENT_CANCELED,
                f"{summary}: {status.message}" if status.message else summary,
            )
        self.workflow = remove_finalizer(self.store, workflow, WORKFLOW_FINALIZER)
        return None

    def workflow_graph(self) -> Action:
        return Sequential(
            If(self.deleted, wrap_action("CancelOnDeletion", self.cancel_on_deletion)),
            wrap_action("EnforceDeadlines", self.enforce_deadlines),
            wrap_action("LetEndedGo", self.let_ended_go),
        )

    def run(self) -> Result:
        return self.workflow_graph().run(Context())


def _ready_from_state(workflow: Workflow) -> None:
    """``Ready`` of an ended workflow: True when it succeeded, else False with its reason."""
    status = workflow.status
    if status.state == "Succeeded":
        set_condition(status, READY, True)
    elif status.state in END_STATES:
        reason = status.reason or states.REASON_UNKNOWN
        set_condition(
            status, READY, False, reason, status.message, "Info" if status.state == "Canceled" else "Error"
        )


def preparable(workflow: Workflow) -> bool:
    """Whether the workflow is (re)prepared: it is new, ``Pending`` and not started, or failed to render
    a spec it no longer has (its spec was edited since: it never ran, so the new spec is rendered)."""
    status = workflow.status
    if status.state is None or (status.state == "Pending" and not workflow.started):
        return True
    return (
        status.state == "Failed"
        and status.reason == RENDER_FAILED
        and status.observed_generation != workflow.metadata.generation
    )


def _still_preparable(workflow: Workflow) -> None:
    """A preparation's write applies only to a workflow nobody has scheduled meanwhile (a write re-applied
    after a conflict sees the fresh copy): Conflict otherwise, and the next reconcile looks again."""
    if not preparable(workflow):
        raise Conflict(f"{workflow.ref()} became {workflow.status.state} while being prepared")


def _drawable(phase: type[Preparation] | type[Supervision]) -> Action:
    """A phase's ctrlkit graph built as a reconcile builds it, over an example workflow and a store that
    is never touched."""
    from typing import cast

    nowhere = cast(ObjectStore, None)
    workflow = Workflow(
        metadata=ObjectMeta(name="example"),
        spec=WorkflowSpec(
            hardware_ref=LocalObjectReference(name="example"),
            template_ref=LocalObjectReference(name="example"),
        ),
    )
    controller = WorkflowController(nowhere, EventRecorder(nowhere))
    return phase(controller, workflow, utcnow()).workflow_graph()


def preparation_graph() -> Action:
    """The preparation's ctrlkit graph (``capa ctrlkit graph controllers.tinkerbell:preparation_graph``)."""
    return _drawable(Preparation)


def supervision_graph() -> Action:
    """The supervision's ctrlkit graph (``capa ctrlkit graph controllers.tinkerbell:supervision_graph``)."""
    return _drawable(Supervision)


def tinkerbell_controllers(
    store: ObjectStore,
    events: EventRecorder | None = None,
    timeouts: WorkflowTimeouts | None = None,
    clock: Clock = utcnow,
) -> list[WorkflowController]:
    """The Tinkerbell controllers ``capa controller`` and ``capa apply`` run."""
    return [WorkflowController(store, events, timeouts or WorkflowTimeouts(), clock)]


__all__ = [
    "DEFAULT_ACTION_TIMEOUT",
    "DEFAULT_CANCEL_TIMEOUT",
    "DEFAULT_SCHEDULING_TIMEOUT",
    "HARDWARE_NOT_FOUND",
    "PREPARED",
    "TEMPLATE_NOT_FOUND",
    "Deadline",
    "Preparation",
    "Supervision",
    "WorkflowController",
    "WorkflowTimeouts",
    "deadlines",
    "preparation_graph",
    "supervision_graph",
    "supervision_view",
    "tinkerbell_controllers",
]
