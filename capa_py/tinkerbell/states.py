"""The Workflow state machine: every transition, in one place, for whoever drives it.

The workflow controller prepares, supervises and cancels; the gRPC server reports what the agent does.
Both change a Workflow only through these functions, which mutate the model in place (the caller writes
it) and raise :class:`TransitionError` for an event the state does not allow.

Workflow states (as the execution design): a prepared workflow is ``Pending``; dispatching it to an agent
makes it ``Scheduled`` (:func:`scheduled`), and the agent rejecting it puts it back to ``Pending``
(:func:`rejected`); the first action starting makes it ``Running`` (:func:`action_started`); the last action
succeeding makes it ``Succeeded`` (:func:`action_succeeded`), any action failing makes it ``Failed``
(:func:`action_failed`, the action's reason propagated). Deleting it (:func:`cancel_requested`) cancels a
``Pending`` or unprepared one at once (``Canceled``) and asks a ``Scheduled`` or ``Running`` one to stop
(``Cancelling``); while ``Cancelling`` no action starts, and the agent stopping (:func:`cancelled`, or a
failed or the last action, or a rejection) makes it ``Canceled``. The supervisor fails a workflow
(:func:`failed`, the running action failing with it) or forces ``Canceled`` (:func:`cancelled` with a
reason) when a timeout trips.

Action states: ``Pending`` → ``Running`` → ``Succeeded`` | ``Failed``; a running action of a canceled
workflow is ``Canceled``. Actions start in order: only the first not yet succeeded may start.

Every state change sets ``status.lastTransitionTime``; ``status.currentAction`` names the action running
(or the last one that ran).

The transitions assign fields of the status and of its actions' statuses, never change a list or a
rendered action in place: :func:`for_transition` copies only what they may change, so a caller holding a
shared workflow (the server's known state) need not deep-copy it.
"""

from __future__ import annotations

from datetime import datetime

from capa_py.api.tinkerbell import END_STATES, ActionState, ActionStatus, Workflow, WorkflowState

REASON_UNKNOWN = "Unknown"
REASON_TIMEOUT = "Timeout"
REASON_SCHEDULING_TIMEOUT = "SchedulingTimeout"
REASON_CANCEL_TIMEOUT = "CancelTimeout"
REASON_CANCELED = "Canceled"


def for_transition(workflow: Workflow) -> Workflow:
    """A copy of ``workflow`` the transitions may change without changing ``workflow``: the status and each
    action's status are new objects; the spec, metadata, conditions and rendered actions (which no
    transition changes) are shared."""
    status = workflow.status
    copied = status.model_copy(
        update={
            "actions": {name: action.model_copy() for name, action in status.actions.items()},
            "conditions": list(status.conditions),
        }
    )
    return workflow.model_copy(update={"status": copied})


class TransitionError(ValueError):
    """The event is not allowed in the workflow's (or action's) current state."""


def set_state(
    workflow: Workflow,
    state: WorkflowState,
    now: datetime,
    reason: str | None = None,
    message: str | None = None,
) -> None:
    """Move the workflow to ``state``; the transition time moves only when the state changes."""
    status = workflow.status
    if status.state != state:
        status.last_transition_time = now
    status.state = state
    status.reason = reason
    status.message = message


def _require(workflow: Workflow, allowed: set[str | None], event: str) -> None:
    if workflow.status.state not in allowed:
        raise TransitionError(
            f"workflow {workflow.ref()}: {event} is not allowed in state {workflow.status.state or 'unset'}"
        )


def _action(workflow: Workflow, name: str) -> ActionStatus:
    action = workflow.status.actions.get(name)
    if action is None:
        raise TransitionError(f"workflow {workflow.ref()} has no action {name!r}")
    return action


def running_action(workflow: Workflow) -> tuple[str, ActionStatus] | None:
    """The action running now, if any."""
    return next(((n, a) for n, a in workflow.ordered_actions() if a.state == "Running"), None)


def next_action(workflow: Workflow) -> str | None:
    """The action to run next: the first one not yet succeeded (None when all have)."""
    return next((n for n, a in workflow.ordered_actions() if a.state != "Succeeded"), None)


def scheduled(workflow: Workflow, now: datetime) -> None:
    """The workflow was dispatched to its agent."""
    _require(workflow, {"Pending"}, "scheduling")
    if not workflow.status.actions:
        raise TransitionError(f"workflow {workflow.ref()} has no rendered actions to schedule")
    set_state(workflow, "Scheduled", now)


def rejected(
    workflow: Workflow, now: datetime, reason: str | None = None, message: str | None = None
) -> None:
    """The agent refused the workflow (it runs another): back to Pending, or Canceled when cancelling."""
    _require(workflow, {"Scheduled", "Cancelling"}, "a rejection")
    if workflow.status.state == "Cancelling":
        set_state(
            workflow,
            "Canceled",
            now,
            REASON_CANCELED,
            "the agent rejected the workflow while it was cancelling",
        )
        return
    set_state(workflow, "Pending", now, reason, message)


def action_started(workflow: Workflow, name: str, now: datetime) -> None:
    """The agent started action ``name``: it must be the next one; the workflow is Running from then."""
    _require(workflow, {"Scheduled", "Running"}, f"starting action {name!r}")
    action = _action(workflow, name)
    expected = next_action(workflow)
    if action.state != "Pending" or name != expected:
        raise TransitionError(
            f"workflow {workflow.ref()}: action {name!r} cannot start (it is {action.state}; "
            f"the next action is {expected!r})"
        )
    action.state = "Running"
    action.started_at = now
    action.reason = action.message = None
    if workflow.status.started_at is None:
        workflow.status.started_at = now
    workflow.status.current_action = name
    set_state(workflow, "Running", now)


def action_succeeded(workflow: Workflow, name: str, now: datetime) -> None:
    """Action ``name`` finished well; the last one succeeding ends the workflow (Succeeded, or Canceled
    when a cancellation was asked for meanwhile)."""
    _require(workflow, {"Running", "Cancelling"}, f"action {name!r} succeeding")
    action = _action(workflow, name)
    if action.state != "Running":
        raise TransitionError(f"workflow {workflow.ref()}: action {name!r} is {action.state}, not Running")
    action.state = "Succeeded"
    workflow.status.current_action = name
    if next_action(workflow) is not None:
        # More to run; a cancelling workflow stays so until the agent says it stopped (or time runs out).
        return
    if workflow.status.state == "Cancelling":
        set_state(workflow, "Canceled", now, REASON_CANCELED, "canceled by deletion after the last action")
    else:
        set_state(workflow, "Succeeded", now)


def action_failed(
    workflow: Workflow, name: str, now: datetime, reason: str | None = None, message: str | None = None
) -> None:
    """Action ``name`` failed: the workflow fails with its reason (Canceled when it was cancelling)."""
    _require(workflow, {"Running", "Cancelling"}, f"action {name!r} failing")
    action = _action(workflow, name)
    if action.state != "Running":
        raise TransitionError(f"workflow {workflow.ref()}: action {name!r} is {action.state}, not Running")
    action.state = "Failed"
    action.reason = reason or REASON_UNKNOWN
    action.message = message
    workflow.status.current_action = name
    if workflow.status.state == "Cancelling":
        set_state(workflow, "Canceled", now, REASON_CANCELED, f"action {name!r} stopped: {action.reason}")
        return
    set_state(workflow, "Failed", now, action.reason, message)


def failed(workflow: Workflow, now: datetime, reason: str, message: str) -> None:
    """Fail the workflow (the supervisor's timeouts); a running action fails with it."""
    if workflow.status.state in END_STATES:
        raise TransitionError(f"workflow {workflow.ref()} already ended ({workflow.status.state})")
    _end_running_action(workflow, "Failed", reason, message)
    set_state(workflow, "Failed", now, reason, message)


def cancel_requested(workflow: Workflow, now: datetime) -> None:
    """The workflow was deleted: Pending (or unprepared) → Canceled, Scheduled/Running → Cancelling; an
    ended or already cancelling workflow is left as it is."""
    state = workflow.status.state
    if state in END_STATES or state == "Cancelling":
        return
    if state in ("Scheduled", "Running"):
        set_state(
            workflow, "Cancelling", now, REASON_CANCELED, "the workflow was deleted; asking the agent to stop"
        )
        return
    set_state(workflow, "Canceled", now, REASON_CANCELED, "the workflow was deleted before it was scheduled")


def cancelled(
    workflow: Workflow,
    now: datetime,
    reason: str = REASON_CANCELED,
    message: str = "the agent stopped the workflow",
) -> None:
    """A cancelling workflow stopped (the agent confirmed, or the supervisor gave up waiting — with a
    failure reason): Canceled, and its running action Canceled."""
    _require(workflow, {"Cancelling"}, "completing a cancellation")
    _end_running_action(workflow, "Canceled", reason, message)
    set_state(workflow, "Canceled", now, reason, message)


def _end_running_action(workflow: Workflow, state: ActionState, reason: str, message: str) -> None:
    """The running action, if any, ends with the workflow (and stays its current action)."""
    current = running_action(workflow)
    if current is not None:
        name, action = current
        action.state = state
        action.reason = reason
        action.message = message
        workflow.status.current_action = name


__all__ = [
    "REASON_CANCELED",
    "REASON_CANCEL_TIMEOUT",
    "REASON_SCHEDULING_TIMEOUT",
    "REASON_TIMEOUT",
    "REASON_UNKNOWN",
    "TransitionError",
    "action_failed",
    "action_started",
    "action_succeeded",
    "cancel_requested",
    "cancelled",
    "failed",
    "next_action",
    "rejected",
    "running_action",
    "scheduled",
    "set_state",
]
