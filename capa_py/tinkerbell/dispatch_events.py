"""An agent's event as the workflow server reads it: which workflow and action it names (Refused,
INVALID_ARGUMENT, when it is malformed), and the transition it makes (through
:mod:`capa_py.tinkerbell.states`)."""

from __future__ import annotations

from datetime import datetime

import grpc

from capa_py.api.tinkerbell import Workflow
from capa_py.tinkerbell import states
from capa_py.tinkerbell.dispatch_streams import Refused, WorkflowKey
from capa_py.tinkerbell.proto import workflow_pb2 as pb


def event_target(event: pb.Event, kind: str) -> tuple[WorkflowKey, str]:
    """The workflow (namespace, name) and the action id (empty for a rejection) ``event`` names."""
    if not event.workflow_id:
        raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "event.workflow_id: required")
    namespace, sep, name = event.workflow_id.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise Refused(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"event.workflow_id: expected <namespace>/<name>, not {event.workflow_id!r}",
        )
    if not kind:
        raise Refused(
            grpc.StatusCode.INVALID_ARGUMENT,
            "event: one of action_started, action_succeeded, action_failed or workflow_rejected is required",
        )
    action = ""
    if kind != "workflow_rejected":
        action = getattr(event, kind).action_id
        if not action:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"event.{kind}.action_id: required")
    return (namespace, name), action


def apply_event(workflow: Workflow, event: pb.Event, kind: str, action: str, now: datetime) -> None:
    """Move ``workflow`` as the event says; states.TransitionError when it cannot."""
    if kind == "action_started":
        states.action_started(workflow, action, now)
    elif kind == "action_succeeded":
        states.action_succeeded(workflow, action, now)
    elif kind == "action_failed":
        failed = event.action_failed
        reason = failed.failure_reason if failed.HasField("failure_reason") else None
        message = failed.failure_message if failed.HasField("failure_message") else None
        if (
            workflow.status.state == "Cancelling"
            and reason == states.REASON_CANCELED
            and workflow.status.actions[action].state != "Running"
        ):
            # The agent stopped between actions and names the one it did not start: still the
            # acknowledgement of the stop.
            states.cancelled(
                workflow, now, states.REASON_CANCELED, message or "the agent stopped the workflow"
            )
            return
        states.action_failed(workflow, action, now, reason, message)
    else:
        rejection = event.workflow_rejected
        reason = rejection.failure_reason if rejection.HasField("failure_reason") else None
        states.rejected(workflow, now, reason, rejection.failure_message or None)
