"""The Tinkerbell agent's events and their delivery: ``PublishEvent`` retried with back-off until the server
takes the event, refuses it (see ``REFUSED``) or the agent shuts down (the rules are described in
:mod:`capa_py.tinkerbell.agent`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal

import grpc
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential

from capa_py.tinkerbell.agent_channel import AgentConfig
from capa_py.tinkerbell.proto import workflow_pb2, workflow_pb2_grpc

PUBLISH_DEADLINE = 10.0
"""Seconds one ``PublishEvent`` attempt may take before it counts as failed (and is retried)."""

REFUSED = (
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
)
"""Answers to ``PublishEvent`` that mean the server decided against the event: never retried (no retry
could change a NOT_FOUND, FAILED_PRECONDITION or INVALID_ARGUMENT answer, nor the server's verdict on
this agent's credentials)."""

Event = workflow_pb2.Event
Delivery = Literal["delivered", "refused", "abandoned"]


def action_started(workflow_id: str, action_id: str) -> Event:
    return Event(workflow_id=workflow_id, action_started=Event.ActionStarted(action_id=action_id))


def action_succeeded(workflow_id: str, action_id: str) -> Event:
    return Event(workflow_id=workflow_id, action_succeeded=Event.ActionSucceeded(action_id=action_id))


def action_failed(workflow_id: str, action_id: str, reason: str, message: str) -> Event:
    failed = Event.ActionFailed(action_id=action_id, failure_reason=reason, failure_message=message)
    return Event(workflow_id=workflow_id, action_failed=failed)


def workflow_rejected(workflow_id: str, reason: str, message: str) -> Event:
    rejected = Event.WorkflowRejected(failure_reason=reason, failure_message=message)
    return Event(workflow_id=workflow_id, workflow_rejected=rejected)


class EventPublisher:
    """Delivers one agent's events on its channel; stops retrying once ``shutdown`` is set."""

    def __init__(
        self,
        stub: workflow_pb2_grpc.WorkflowServiceStub,
        config: AgentConfig,
        shutdown: threading.Event,
        log: Any,
        metadata: Callable[[], tuple[tuple[str, str], ...]],
    ) -> None:
        self._stub = stub
        self.config = config
        self._shutdown = shutdown
        self._log = log
        self._metadata = metadata

    def publish(self, event: Event) -> Delivery:
        """Publish ``event``, retrying with back-off until delivered, refused, or the agent shuts down."""
        log = self._log.bind(workflow_id=event.workflow_id, event=event.WhichOneof("event"))

        def retryable(exc: BaseException) -> bool:
            return isinstance(exc, grpc.RpcError) and _code(exc) not in REFUSED

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log.warning("event not delivered, retrying", code=status_name(exc), attempt=state.attempt_number)

        retrying = Retrying(
            retry=retry_if_exception(retryable),
            wait=wait_exponential(multiplier=self.config.reconnect_initial, max=self.config.reconnect_max),
            stop=lambda _: self._shutdown.is_set(),
            sleep=self._pause,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            retrying(self._send, event)
        except grpc.RpcError as exc:
            retried = retrying.statistics["attempt_number"] > 1
            if _code(exc) == grpc.StatusCode.FAILED_PRECONDITION and retried:
                # An earlier attempt whose answer was lost landed: the repeat is out of order.
                log.info("event refused on a retry: an earlier attempt was delivered", **_event_fields(event))
                return "delivered"
            if _code(exc) in REFUSED:
                log.warning("event refused: dropped", code=status_name(exc), details=status_details(exc))
                return "refused"
            log.warning("event not delivered before the agent stopped", code=status_name(exc))
            return "abandoned"
        log.info("event delivered", **_event_fields(event))
        return "delivered"

    def _pause(self, seconds: float) -> None:
        self._shutdown.wait(seconds)

    def publish_once(self, event: Event) -> Delivery:
        try:
            self._send(event)
        except grpc.RpcError as exc:
            self._log.warning("event not delivered", workflow_id=event.workflow_id, code=status_name(exc))
            return "refused" if _code(exc) in REFUSED else "abandoned"
        return "delivered"

    def _send(self, event: Event) -> None:
        self._stub.PublishEvent(
            workflow_pb2.PublishEventRequest(event=event),
            timeout=PUBLISH_DEADLINE,
            metadata=self._metadata(),
        )


def _event_fields(event: Event) -> dict[str, str]:
    which = event.WhichOneof("event")
    if which == "action_failed":
        failed = event.action_failed
        return {"action": failed.action_id, "reason": failed.failure_reason}
    if which == "workflow_rejected":
        return {"reason": event.workflow_rejected.failure_reason}
    if which in ("action_started", "action_succeeded"):
        return {"action": getattr(event, which).action_id}
    return {}


def _code(exc: BaseException | None) -> grpc.StatusCode | None:
    code = getattr(exc, "code", None)
    return code() if callable(code) else None


def status_name(exc: BaseException | None) -> str:
    code = _code(exc)
    return code.name if code is not None else type(exc).__name__


def status_details(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    return str(details()) if callable(details) else str(exc)
