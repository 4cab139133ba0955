"""A scripted ``WorkflowService`` on a real grpcio server on loopback, for testing the agent alone.

The test drives it: :meth:`ScriptedService.send` puts a command on the agent's open ``GetWorkflows``
stream, every ``PublishEvent`` is recorded, :attr:`ScriptedService.answers` scripts error answers to the
next publishes and :meth:`ScriptedService.hold` makes a chosen event's publish wait until released.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from capa_py.tinkerbell.proto import workflow_pb2, workflow_pb2_grpc
from tests.support.eventually import eventually

SAFETY_TIMEOUT = 30.0
"""Seconds a test waits for something that should happen at once, before failing instead of hanging."""

Event = workflow_pb2.Event


def described(event: Event) -> tuple[str, ...]:
    """An event as a short tuple: ``(workflow, kind, action-or-reason, ...)``."""
    which = event.WhichOneof("event")
    if which == "action_started":
        return (event.workflow_id, "started", event.action_started.action_id)
    if which == "action_succeeded":
        return (event.workflow_id, "succeeded", event.action_succeeded.action_id)
    if which == "action_failed":
        failed = event.action_failed
        return (event.workflow_id, "failed", failed.action_id, failed.failure_reason, failed.failure_message)
    rejected = event.workflow_rejected
    return (event.workflow_id, "rejected", rejected.failure_reason)


def action(
    name: str, *args: str, cmd: str | None = None, env: dict[str, str] | None = None, image: str = "busybox"
) -> workflow_pb2.Workflow.Action:
    """An action whose id is its name (as the server sends them)."""
    built = workflow_pb2.Workflow.Action(id=name, name=name, image=image, args=list(args), env=env or {})
    if cmd is not None:
        built.cmd = cmd
    return built


def start(workflow_id: str, *actions: workflow_pb2.Workflow.Action) -> workflow_pb2.GetWorkflowsResponse:
    workflow = workflow_pb2.Workflow(workflow_id=workflow_id, actions=list(actions))
    return workflow_pb2.GetWorkflowsResponse(
        start_workflow=workflow_pb2.GetWorkflowsResponse.StartWorkflow(workflow=workflow)
    )


def stop(workflow_id: str) -> workflow_pb2.GetWorkflowsResponse:
    return workflow_pb2.GetWorkflowsResponse(
        stop_workflow=workflow_pb2.GetWorkflowsResponse.StopWorkflow(workflow_id=workflow_id)
    )


def _authorization(context: Any) -> str:
    return next((str(v) for k, v in context.invocation_metadata() if k == "authorization"), "")


@dataclass
class ScriptedService(workflow_pb2_grpc.WorkflowServiceServicer):
    """Records what the agent does and sends what the test says."""

    changed: threading.Condition = field(default_factory=threading.Condition)
    streams: list[str] = field(default_factory=list)
    """The agent id of every GetWorkflows stream opened, in order."""
    events: list[Event] = field(default_factory=list)
    """Every event accepted, in order."""
    attempts: int = 0
    """PublishEvent calls received, accepted or not."""
    authorizations: list[tuple[str, str]] = field(default_factory=list)
    """``(call, authorization metadata or "")`` of every call received, in order."""
    answers: list[grpc.StatusCode] = field(default_factory=list)
    """Error answers for the next PublishEvent calls, first one first."""
    lost_answers: list[grpc.StatusCode] = field(default_factory=list)
    """Error answers for the next PublishEvent calls whose events are nevertheless accepted."""
    refuse: Callable[[Event], grpc.StatusCode | None] = lambda _: None
    """An error answer for an event (checked after ``answers``), or None to accept it."""
    _queues: list[queue.Queue[workflow_pb2.GetWorkflowsResponse | None]] = field(default_factory=list)
    _holds: list[tuple[tuple[str, ...], threading.Event]] = field(default_factory=list)

    def GetWorkflows(
        self, request: workflow_pb2.GetWorkflowsRequest, context: Any
    ) -> Iterator[workflow_pb2.GetWorkflowsResponse]:
        commands: queue.Queue[workflow_pb2.GetWorkflowsResponse | None] = queue.Queue()
        with self.changed:
            self.authorizations.append(("GetWorkflows", _authorization(context)))
            self.streams.append(request.agent_id)
            self._queues.append(commands)
            self.changed.notify_all()
        while context.is_active():
            try:
                command = commands.get(timeout=0.05)
            except queue.Empty:
                continue
            if command is None:
                return
            yield command

    def PublishEvent(
        self, request: workflow_pb2.PublishEventRequest, context: Any
    ) -> workflow_pb2.PublishEventResponse:
        event = request.event
        with self.changed:
            self.attempts += 1
            self.authorizations.append(("PublishEvent", _authorization(context)))
            self.changed.notify_all()
        for prefix, released in list(self._holds):
            if described(event)[: len(prefix)] == prefix:
                released.wait(SAFETY_TIMEOUT)
        with self.changed:
            if self.lost_answers:
                # The event lands, but the agent hears an error (the answer lost on the way back).
                code: grpc.StatusCode | None = self.lost_answers.pop(0)
                self.events.append(event)
            else:
                code = self.answers.pop(0) if self.answers else self.refuse(event)
                if code is None:
                    self.events.append(event)
            self.changed.notify_all()
        if code is not None:
            context.abort(code, "scripted answer")
        return workflow_pb2.PublishEventResponse()

    def send(self, command: workflow_pb2.GetWorkflowsResponse) -> None:
        """Send ``command`` on the most recently opened stream."""
        with self.changed:
            assert self._queues, "no agent has opened a stream"
            self._queues[-1].put(command)

    def end_streams(self) -> None:
        with self.changed:
            for commands in self._queues:
                commands.put(None)

    def hold(self, *prefix: str) -> threading.Event:
        """Make publishes of events whose :func:`described` tuple starts with ``prefix`` wait until the
        returned event is set."""
        released = threading.Event()
        self._holds.append((prefix, released))
        return released

    def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(predicate, SAFETY_TIMEOUT):
                raise AssertionError(f"timed out waiting for {what}; events: {self.described()}")

    def wait_for_events(self, count: int) -> list[tuple[str, ...]]:
        self.wait_until(lambda: len(self.events) >= count, f"{count} events")
        return self.described()

    def wait_for_stream(self, count: int = 1) -> None:
        self.wait_until(lambda: len(self.streams) >= count, f"{count} GetWorkflows streams")

    def described(self) -> list[tuple[str, ...]]:
        return [described(e) for e in self.events]


class ScriptedServer:
    """A grpcio server serving a :class:`ScriptedService` on 127.0.0.1 (a free port unless given)."""

    def __init__(
        self,
        service: ScriptedService,
        port: int = 0,
        credentials: grpc.ServerCredentials | None = None,
    ) -> None:
        self.service = service
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        workflow_pb2_grpc.add_WorkflowServiceServicer_to_server(service, self.server)
        address = f"127.0.0.1:{port}"
        if credentials is None:
            self.port = self.server.add_insecure_port(address)
        else:
            self.port = self.server.add_secure_port(address, credentials)
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.service.end_streams()
        self.server.stop(grace=None).wait(SAFETY_TIMEOUT)


def poll_until(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` until it holds (for state nothing notifies about)."""
    eventually(predicate, what, timeout=SAFETY_TIMEOUT, interval=0.02)


def wait_for_file(path: Path, content: str | None = None) -> str:
    """Poll until ``path`` exists with a complete last line (and is ``content`` when given)."""

    def complete() -> str:
        text = path.read_text() if path.exists() else ""
        return text if text.endswith("\n") and (content is None or text == content) else ""

    return eventually(complete, f"{path} (content {content!r})", timeout=SAFETY_TIMEOUT, interval=0.02)


def wait_all(threads: Sequence[threading.Thread]) -> None:
    for thread in threads:
        thread.join(SAFETY_TIMEOUT)
        assert not thread.is_alive(), f"{thread.name} did not end"
