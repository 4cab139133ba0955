"""The Tinkerbell agent: runs the workflows the workflow server dispatches to this machine.

The agent is a client of the v2 ``WorkflowService`` (``workflow.proto``). It opens ``GetWorkflows`` with
its id (a Hardware's name or one of its MACs) and follows the commands on that stream:

* ``StartWorkflow``: runs the actions in order through a runtime (:mod:`capa_py.tinkerbell.runtimes`),
  publishing ``ActionStarted`` before and ``ActionSucceeded`` or ``ActionFailed`` after each; the first
  failure ends the workflow. Wire ids: a workflow is ``<namespace>/<name>``, an action is its name.
* A ``StartWorkflow`` for another workflow while one runs is answered ``WorkflowRejected`` with reason
  ``AlreadyRunning``. The same workflow id again while it runs is the server re-dispatching after a
  reconnect, not a second workflow: it keeps running, is neither rejected nor restarted.
* A ``StartWorkflow`` for a workflow this agent has finished but whose last event is still being retried
  (the server has not seen the end yet) is not run again: the retried event ends it on the server. Once the
  last event was delivered (or the server refused it), the same id is a new workflow (the object was
  deleted and created again) and runs.
* ``StopWorkflow`` for the running workflow stops the running action (SIGTERM, SIGKILL after the grace
  period) and acknowledges as the protobuf defines: ``ActionFailed`` reason ``Canceled`` for that action,
  or ``WorkflowRejected`` reason ``Canceled`` when no action was running. For any other workflow it is
  logged and ignored.
* Timeouts: the protobuf carries none, so every action gets ``action_timeout`` (default one hour, the
  controller's default); an action running longer is stopped and fails with reason ``Timeout``.
* When the agent itself is shut down (SIGTERM) while an action runs, the action is stopped and reported
  ``ActionFailed`` reason ``AgentStopped`` (one attempt: the agent does not linger to deliver it).

The stream is reopened with exponential back-off (``reconnect_initial`` doubling to ``reconnect_max``)
when the server is unreachable or the stream breaks; a running action keeps running meanwhile. Events
that fail to publish are retried with the same back-off until delivered; an answer of ``NOT_FOUND``,
``FAILED_PRECONDITION`` or ``INVALID_ARGUMENT`` means the server decided against the event: it is logged
and dropped, and a workflow whose event was refused is abandoned (its remaining actions are not run). A
``FAILED_PRECONDITION`` on a retry is the exception: an earlier attempt whose answer was lost landed (the
server refuses the repeat as out of order), so the event counts as delivered.

Identity (:mod:`capa_py.tinkerbell.agentauth`): every call carries ``authorization: Bearer TOKEN`` when the
agent has a token (``token``, or ``token_file``, read again for each call so a rotated token is picked
up), and the channel presents ``tls_cert``/``tls_key`` as its client certificate when given (mutual TLS).
A stream refused ``UNAUTHENTICATED``, ``PERMISSION_DENIED`` or ``ALREADY_EXISTS`` is retried with the same
back-off; an event refused ``UNAUTHENTICATED`` or ``PERMISSION_DENIED`` is not (see ``REFUSED``).

Logs carry workflow ids, action names, images, exit codes and reasons; never env values, arguments or the
token.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import grpc

from capa_py.logging import get_logger
from capa_py.tinkerbell.agent_channel import (
    DEFAULT_ACTION_TIMEOUT,
    DEFAULT_RECONNECT_INITIAL,
    DEFAULT_RECONNECT_MAX,
    DEFAULT_SERVER,
    KEEPALIVE_MS,
    KEEPALIVE_TIMEOUT_MS,
    AgentConfig,
    call_metadata,
    open_channel,
)
from capa_py.tinkerbell.agent_events import (
    PUBLISH_DEADLINE,
    REFUSED,
    Delivery,
    Event,
    EventPublisher,
    action_failed,
    action_started,
    action_succeeded,
    status_details,
    status_name,
    workflow_rejected,
)
from capa_py.tinkerbell.proto import workflow_pb2, workflow_pb2_grpc
from capa_py.tinkerbell.runtimes import Action, Outcome, Runtime

_log = get_logger("tinkerbell.agent")


@dataclass(frozen=True)
class Finished:
    """How the last workflow the agent ran ended: ``succeeded`` when every action succeeded and the server
    took the last event."""

    workflow_id: str
    succeeded: bool


@dataclass
class _Execution:
    """One workflow this agent runs or ran."""

    workflow_id: str
    actions: list[Action]
    stop: threading.Event = field(default_factory=threading.Event)
    stop_cause: Literal["canceled", "shutdown"] | None = None


class Agent:
    """Runs the workflows a ``WorkflowService`` dispatches to ``config.agent_id`` (module docstring).

    :meth:`run` blocks until :meth:`shutdown` is called (or, with ``config.once``, until one workflow has
    ended and its last event is settled). It is safe to call :meth:`shutdown` from any thread.
    """

    def __init__(self, config: AgentConfig, runtime: Runtime) -> None:
        self.config = config
        self.runtime = runtime
        self._shutdown = threading.Event()
        self._lock = threading.Lock()
        self._current: _Execution | None = None
        self._settling: dict[str, _Execution] = {}
        """Finished workflows whose last event is still being delivered, by id."""
        self._call: grpc.RpcContext | None = None
        self._once_done = threading.Event()
        self._workers: list[threading.Thread] = []
        self.last_finished: Finished | None = None
        """The last workflow that ended on this agent (None before the first)."""
        self._log = _log.bind(agent_id=config.agent_id, server=config.server)
        self._channel = open_channel(config)
        self._stub = workflow_pb2_grpc.WorkflowServiceStub(self._channel)
        self._events = EventPublisher(self._stub, config, self._shutdown, self._log, self._metadata)

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata proving this agent's Hardware (none without a token)."""
        return call_metadata(self.config, self._log)

    # --- the command stream ---------------------------------------------------------------------

    def run(self) -> None:
        """Follow the command stream, reconnecting with back-off, until shut down (or ``once`` is done)."""
        delay = self.config.reconnect_initial
        try:
            while not self._done():
                request = workflow_pb2.GetWorkflowsRequest(agent_id=self.config.agent_id)
                call = self._stub.GetWorkflows(request, metadata=self._metadata())
                with self._lock:
                    self._call = call
                if self._done():  # shut down while opening: the cancel may have missed this call
                    call.cancel()
                self._log.info("command stream opened")
                try:
                    for command in call:
                        delay = self.config.reconnect_initial
                        self._follow(command)
                except grpc.RpcError as exc:
                    if self._done():
                        break
                    self._log.warning(
                        "command stream broke",
                        code=status_name(exc),
                        retry_in=delay,
                        details=status_details(exc),
                    )
                else:
                    self._log.warning("command stream ended by the server", retry_in=delay)
                finally:
                    with self._lock:
                        self._call = None
                if self._shutdown.wait(delay) or self._once_done.is_set():
                    break
                delay = min(delay * 2, self.config.reconnect_max)
        finally:
            self._shutdown.set()
            self._stop_current("shutdown")
            for worker in list(self._workers):
                worker.join()
            self._channel.close()
            self._log.info("agent stopped")

    @property
    def delivering(self) -> frozenset[str]:
        """Ids of finished workflows whose last event is still being delivered (not run again if
        dispatched meanwhile)."""
        with self._lock:
            return frozenset(self._settling)

    def shutdown(self) -> None:
        """Stop the running action (reported ``AgentStopped``) and make :meth:`run` return."""
        self._shutdown.set()
        self._stop_current("shutdown")
        self._cancel_stream()

    def _done(self) -> bool:
        return self._shutdown.is_set() or self._once_done.is_set()

    def _cancel_stream(self) -> None:
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()

    def _follow(self, command: workflow_pb2.GetWorkflowsResponse) -> None:
        which = command.WhichOneof("cmd")
        if which == "start_workflow":
            self._start(command.start_workflow.workflow)
        elif which == "stop_workflow":
            self._stop_requested(command.stop_workflow.workflow_id)
        else:
            self._log.warning("ignoring an empty command")

    def _start(self, workflow: workflow_pb2.Workflow) -> None:
        workflow_id = workflow.workflow_id
        log = self._log.bind(workflow_id=workflow_id)
        with self._lock:
            current = self._current
            if current is not None and current.workflow_id == workflow_id:
                log.info("workflow dispatched again while it runs: it keeps running")
                return
            if current is not None:
                log.warning("rejecting a workflow: another one runs", running=current.workflow_id)
                message = f"the agent is running workflow {current.workflow_id}"
                self._spawn(self._publish, workflow_rejected(workflow_id, "AlreadyRunning", message))
                return
            if workflow_id in self._settling:
                log.info("finished workflow dispatched again: its last event is still being delivered")
                return
            actions = [Action.from_proto(a) for a in workflow.actions]
            execution = _Execution(workflow_id, actions)
            self._current = execution
            log.info("workflow started", actions=[a.name for a in actions])
            self._spawn(self._execute, execution)

    def _stop_requested(self, workflow_id: str) -> None:
        with self._lock:
            current = self._current
        if current is None or current.workflow_id != workflow_id:
            self._log.info("ignoring StopWorkflow: the workflow is not running", workflow_id=workflow_id)
            return
        self._log.info("stopping the workflow on request", workflow_id=workflow_id)
        self._stop_current("canceled")

    def _stop_current(self, cause: Literal["canceled", "shutdown"]) -> None:
        with self._lock:
            current = self._current
            if current is None:
                return
            if current.stop_cause is None:
                current.stop_cause = cause
        current.stop.set()

    def _spawn(self, target: Callable[..., object], *args: object) -> None:
        worker = threading.Thread(target=target, args=args, name="tink-agent-worker", daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()]
        self._workers.append(worker)
        worker.start()

    # --- running a workflow ----------------------------------------------------------------------

    def _execute(self, execution: _Execution) -> None:
        workflow_id = execution.workflow_id
        log = self._log.bind(workflow_id=workflow_id)
        last: Event | None = None
        try:
            for action in execution.actions:
                if execution.stop.is_set():
                    if execution.stop_cause == "canceled":
                        last = workflow_rejected(workflow_id, "Canceled", "stopped before the next action")
                    return
                if self._publish(action_started(workflow_id, action.id)) != "delivered":
                    log.warning("abandoning the workflow: ActionStarted not accepted", action=action.name)
                    return
                outcome = self._run_action(action, execution)
                log.info("action ended", action=action.name, outcome=outcome.state, reason=outcome.reason)
                if outcome.state == "succeeded":
                    event = action_succeeded(workflow_id, action.id)
                    if action is execution.actions[-1]:
                        last = event
                        return
                    if self._publish(event) != "delivered":
                        log.warning("abandoning the workflow: an ActionSucceeded was not accepted")
                        return
                    continue
                last = self._failure(workflow_id, action, outcome, execution)
                return
            if not execution.actions:
                log.warning("the workflow has no actions: nothing to run")
        finally:
            with self._lock:
                if last is not None:
                    self._settling[workflow_id] = execution
                if self._current is execution:
                    self._current = None
            delivery = self._settle(execution, last) if last is not None else "abandoned"
            succeeded = last is not None and last.HasField("action_succeeded") and delivery == "delivered"
            self.last_finished = Finished(workflow_id, succeeded)
            log.info("workflow ended", succeeded=succeeded)
            if self.config.once:
                self._once_done.set()
                self._cancel_stream()

    def _run_action(self, action: Action, execution: _Execution) -> Outcome:
        try:
            return self.runtime.run(action, execution.stop, self.config.action_timeout)
        except Exception as exc:  # a runtime's own defect must still end the action with an event
            self._log.exception("the runtime failed", workflow_id=execution.workflow_id, action=action.name)
            return Outcome.failed("RuntimeFailed", f"the agent's runtime failed: {type(exc).__name__}")

    def _failure(self, workflow_id: str, action: Action, outcome: Outcome, execution: _Execution) -> Event:
        if outcome.state == "stopped" and execution.stop_cause == "canceled":
            return action_failed(workflow_id, action.id, "Canceled", "the workflow was stopped on request")
        if outcome.state == "stopped":
            return action_failed(workflow_id, action.id, "AgentStopped", "the agent was shut down")
        return action_failed(workflow_id, action.id, outcome.reason or "Failed", outcome.message or "")

    def _settle(self, execution: _Execution, last: Event) -> Delivery:
        """Deliver the workflow's last event (once only when shutting down), then forget it is pending."""
        shutting_down = execution.stop_cause == "shutdown"
        delivery = self._publish_once(last) if shutting_down else self._publish(last)
        with self._lock:
            self._settling.pop(execution.workflow_id, None)
        return delivery

    def _publish(self, event: Event) -> Delivery:
        """Publish ``event``, retrying with back-off until delivered, refused, or the agent shuts down."""
        return self._events.publish(event)

    def _publish_once(self, event: Event) -> Delivery:
        return self._events.publish_once(event)


__all__ = [
    "DEFAULT_ACTION_TIMEOUT",
    "DEFAULT_RECONNECT_INITIAL",
    "DEFAULT_RECONNECT_MAX",
    "DEFAULT_SERVER",
    "KEEPALIVE_MS",
    "KEEPALIVE_TIMEOUT_MS",
    "PUBLISH_DEADLINE",
    "REFUSED",
    "Agent",
    "AgentConfig",
    "Finished",
    "action_failed",
    "action_started",
    "action_succeeded",
    "workflow_rejected",
]
