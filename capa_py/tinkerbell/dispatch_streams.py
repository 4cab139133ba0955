"""Agents' command streams as the workflow server sees them: who a stream is, where its commands go, and
how a refusal is told (the rules are described in :mod:`capa_py.tinkerbell.dispatch`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import grpc

from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Workflow
from capa_py.api.tinkerbell_checks import normalise_mac
from capa_py.tinkerbell.agentauth import NONE, Credentials
from capa_py.tinkerbell.proto import workflow_pb2 as pb

HardwareKey = tuple[str, str]
WorkflowKey = tuple[str, str]


def workflow_id(key: WorkflowKey) -> str:
    """The wire id of a workflow: ``<namespace>/<name>``."""
    return f"{key[0]}/{key[1]}"


def key_of(obj: KubeObject) -> tuple[str, str]:
    return (obj.metadata.namespace or "default", obj.metadata.name)


def hardware_of(workflow: Workflow) -> HardwareKey:
    ref = workflow.spec.hardware_ref
    return (ref.namespace or workflow.metadata.namespace or "default", ref.name)


def normalise_agent_id(agent_id: str) -> str:
    """A MAC in lowercase colon form, anything else lowercased (Hardware names are lowercase)."""
    text = agent_id.strip()
    return normalise_mac(text) or text.lower()


class Refused(Exception):
    """An RPC refused with a gRPC status code; nothing was changed."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


class Outbox(Protocol):
    """Where a session's commands go (the agent's stream)."""

    def send(self, response: pb.GetWorkflowsResponse) -> None: ...

    def abort(self, code: grpc.StatusCode, message: str) -> None: ...


class Metrics(Protocol):
    def agents(self, count: int) -> None: ...

    def dispatched(self) -> None: ...

    def stopped(self) -> None: ...

    def event(self, kind: str, result: str) -> None: ...

    def rejected(self) -> None: ...


class NoMetrics:
    def agents(self, count: int) -> None:
        pass

    def dispatched(self) -> None:
        pass

    def stopped(self) -> None:
        pass

    def event(self, kind: str, result: str) -> None:
        pass

    def rejected(self) -> None:
        pass


@dataclass(eq=False)
class Session:
    """One agent's command stream."""

    agent_id: str
    outbox: Outbox
    credentials: Credentials = NONE
    key: str = ""
    hardware: HardwareKey | None = None
    started: set[WorkflowKey] = field(default_factory=set)
    """Workflows sent as StartWorkflow on this stream whose end this stream has not reported."""
    stopped: set[WorkflowKey] = field(default_factory=set)
    """Workflows sent as StopWorkflow on this stream."""

    def __post_init__(self) -> None:
        self.key = normalise_agent_id(self.agent_id)

    def forget(self) -> None:
        self.started.clear()
        self.stopped.clear()
