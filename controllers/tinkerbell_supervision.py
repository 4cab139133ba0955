"""The supervision of a Tinkerbell Workflow: a deletion cancels it, a passed deadline fails it (or forces
Canceled), an ended workflow is let go (the rules are described in :mod:`controllers.tinkerbell`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from capa_py.api.conditions import READY, set_condition
from capa_py.api.tinkerbell import END_STATES, WORKFLOW_FINALIZER, Workflow
from capa_py.ctrlkit.action import Action, Context, wrap_action
from capa_py.ctrlkit.combinators import If, Sequential
from capa_py.ctrlkit.result import Result, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.store.errors import Conflict
from capa_py.store.protocol import ObjectStore
from capa_py.tinkerbell import states
from controllers.base import patch_status, remove_finalizer

EVENT_CANCELLING = "Cancelling"
EVENT_CANCELED = "Canceled"

DEFAULT_SCHEDULING_TIMEOUT = 300.0
DEFAULT_CANCEL_TIMEOUT = 300.0
DEFAULT_ACTION_TIMEOUT = 3600.0

_log = get_logger("controller.workflow")


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


class SupervisingController(Protocol):
    """What a supervision uses of the workflow controller."""

    store: ObjectStore
    timeouts: WorkflowTimeouts

    @property
    def recorder(self) -> EventRecorder: ...


class Supervision:
    """One supervision pass, as ctrlkit actions: a deletion cancels, a passed deadline fails (or forces
    Canceled), and an ended workflow is let go."""

    def __init__(self, controller: SupervisingController, workflow: Workflow, now: datetime) -> None:
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
