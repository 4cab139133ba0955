"""A real workflow server on 127.0.0.1:0 over a real SQLite store, workflows prepared by the real workflow
controller, and agents speaking through the generated client stub.

As in normal use, every Hardware the world applies gets agent credentials (a token in a Secret its
``spec.agentCredentialsRef`` names), and the world's agents and events present the token of the Hardware
they speak for; ``token=`` overrides that (None: no credentials)."""

from __future__ import annotations

import queue
import secrets
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from capa_py.api.core import Secret
from capa_py.api.meta import ObjectMeta
from capa_py.api.tinkerbell import (
    DHCP,
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
from capa_py.operations import apply_objects
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import NotFound
from capa_py.store.sqlite import SQLiteStore
from capa_py.tinkerbell.agentauth import TOKEN_KEY, Credentials, issue_token
from capa_py.tinkerbell.backoff import Backoff
from capa_py.tinkerbell.dispatch import hardware_of, normalise_agent_id
from capa_py.tinkerbell.proto import workflow_pb2 as pb
from capa_py.tinkerbell.proto import workflow_pb2_grpc as pb_grpc
from capa_py.tinkerbell.server import RunningWorkflowServer, TLSFiles, start_in_thread
from controllers.tinkerbell import WorkflowController, WorkflowTimeouts
from tests.support.eventually import eventually

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
WAIT = 15.0
"""How long a test waits for something that should happen at once (a liveness bound, never a timing)."""


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def hardware(name: str, mac: str, namespace: str = "default") -> Hardware:
    return Hardware(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=HardwareSpec(
            network_interfaces={mac: NetworkInterface(dhcp=DHCP(ip="10.0.0.5", netmask="255.255.255.0"))}
        ),
    )


def template(name: str = "tpl", actions: tuple[str, ...] = ("a", "b")) -> Template:
    return Template(
        metadata=ObjectMeta(name=name, namespace="default"),
        spec=TemplateSpec(
            actions=[
                Action(
                    name=action,
                    image=f"quay.io/tinkerbell/{action}:v1",
                    command="/bin/sh" if action == actions[0] else None,
                    args=["-c", f"echo {{{{ .greeting }}}} {action}"],
                    env={"ACTION": action},
                    volumes=["/dev:/dev"],
                    network_namespace="host" if action == actions[0] else None,
                )
                for action in actions
            ],
            env={"SECRET": "s3cr3t-value", "ACTION": "template"},
            volumes=["/tmp:/tmp"],
        ),
    )


def workflow(
    name: str, hardware_name: str, template_name: str = "tpl", namespace: str = "default"
) -> Workflow:
    return Workflow(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=WorkflowSpec(
            hardware_ref=LocalObjectReference(name=hardware_name),
            template_ref=LocalObjectReference(name=template_name, namespace="default"),
            template_data={"greeting": "hello"},
        ),
    )


AUTO: Any = object()
"""``token=AUTO``: the token of the Hardware the call speaks for."""


def bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    return () if token is None else (("authorization", f"Bearer {token}"),)


class Agent:
    """An agent's command stream, read in a thread into a queue."""

    def __init__(self, stub: pb_grpc.WorkflowServiceStub, agent_id: str, token: str | None = None) -> None:
        self.agent_id = agent_id
        self.messages: queue.Queue[pb.GetWorkflowsResponse | grpc.RpcError | None] = queue.Queue()
        self.call: Any = stub.GetWorkflows(pb.GetWorkflowsRequest(agent_id=agent_id), metadata=bearer(token))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for message in self.call:
                self.messages.put(message)
            self.messages.put(None)
        except grpc.RpcError as exc:
            self.messages.put(exc)

    def next(self) -> pb.GetWorkflowsResponse:
        item = self.messages.get(timeout=WAIT)
        assert isinstance(item, pb.GetWorkflowsResponse), (
            f"expected a command, the stream ended with {item!r}"
        )
        return item

    def started(self) -> pb.Workflow:
        message = self.next()
        assert message.WhichOneof("cmd") == "start_workflow", f"expected StartWorkflow, got {message}"
        return message.start_workflow.workflow

    def stopped(self) -> str:
        message = self.next()
        assert message.WhichOneof("cmd") == "stop_workflow", f"expected StopWorkflow, got {message}"
        return message.stop_workflow.workflow_id

    def ended(self) -> grpc.RpcError:
        item = self.messages.get(timeout=WAIT)
        assert isinstance(item, grpc.RpcError), f"expected the stream to end with an error, got {item!r}"
        return item

    def nothing_queued(self) -> bool:
        return self.messages.empty()

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(WAIT)


class World:
    def __init__(
        self,
        path: Path,
        backoff: Backoff | None = None,
        tls: TLSFiles | None = None,
        registry: CollectorRegistry | None = None,
        allow_unauthenticated: bool = False,
        credentials: bool = True,
    ) -> None:
        self.issue_credentials = credentials
        self.tokens: dict[str, str] = {}
        """Tokens issued, by every id of their Hardware (name, MACs) and by ``namespace/name``."""
        self.store = SQLiteStore(path / "state.db")
        self.clock = FakeClock()
        self.controller = WorkflowController(
            self.store, EventRecorder(self.store), WorkflowTimeouts(scheduling=60, cancel=30), self.clock
        )
        self.server: RunningWorkflowServer = start_in_thread(
            self.store,
            "127.0.0.1",
            0,
            tls=tls,
            backoff=backoff or Backoff(10, 300),
            clock=self.clock,
            registry=registry,
            allow_unauthenticated_agents=allow_unauthenticated,
        )
        self.channel = self._channel(tls)
        self.stub = pb_grpc.WorkflowServiceStub(self.channel)
        self.agents: list[Agent] = []

    def _channel(self, tls: TLSFiles | None) -> grpc.Channel:
        target = self.server.address
        if tls is None:
            return grpc.insecure_channel(target)
        return grpc.secure_channel(target, grpc.ssl_channel_credentials(tls.cert.read_bytes()))

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        self.channel.close()
        self.server.stop()
        self.store.close()

    # -- objects ------------------------------------------------------------------------------------
    def apply(self, *objects: Any) -> None:
        apply_objects(self.store, list(objects))
        for obj in objects:
            if not isinstance(obj, Hardware):
                continue
            namespace = obj.metadata.namespace or "default"
            if obj.spec.agent_credentials_ref is not None:
                secret = self.store.get(Secret, obj.spec.agent_credentials_ref.name, namespace)
                self._remember_token(obj, secret.value(TOKEN_KEY).decode())
            elif self.issue_credentials:
                self.issue(obj.metadata.name, namespace)

    def credentials_secret(self, name: str, namespace: str = "default") -> tuple[LocalObjectReference, str]:
        """A credentials Secret made before its Hardware exists: its reference and token."""
        token = secrets.token_urlsafe(16)
        self.apply(
            Secret(
                metadata=ObjectMeta(name=f"{name}-creds", namespace=namespace),
                string_data={TOKEN_KEY: token},
            )
        )
        eventually(
            lambda: self.server.dispatcher.reads.get(Secret, f"{name}-creds", namespace),
            "the server sees the Secret",
            timeout=WAIT,
            interval=0.01,
            ignoring=(NotFound,),
        )
        return LocalObjectReference(name=f"{name}-creds"), token

    def _remember_token(self, hardware: Hardware, token: str) -> None:
        for agent_id in (hardware.metadata.name, *hardware.spec.network_interfaces):
            self.tokens[normalise_agent_id(agent_id)] = token
        self.tokens[f"{hardware.metadata.namespace or 'default'}/{hardware.metadata.name}"] = token

    def issue(self, name: str, namespace: str = "default") -> str:
        """A new token for the Hardware (the old one stops working), remembered for its ids."""
        hardware = self.store.get(Hardware, name, namespace)
        _, token = issue_token(self.store, hardware)
        self._remember_token(hardware, token)
        # The server reads Hardware and Secrets from its watches: wait until they show the new token.
        auth = self.server.dispatcher.auth
        eventually(
            lambda: auth.check(Credentials(token=token), (namespace, name)) is None,
            f"the server sees the token of {namespace}/{name}",
            timeout=WAIT,
            interval=0.01,
        )
        return token

    def prepare(self, name: str, namespace: str = "default") -> Workflow:
        self.controller.reconcile(ObjectKey("Workflow", namespace, name))
        prepared = self.get(name, namespace)
        # Pending, or already Scheduled: an agent stream waiting for this Hardware may be handed the workflow
        # between the reconcile and this read.
        assert prepared.status.state in ("Pending", "Scheduled"), prepared.status
        return prepared

    def submit(self, name: str, hardware_name: str, namespace: str = "default") -> Workflow:
        self.apply(workflow(name, hardware_name, namespace=namespace))
        return self.prepare(name, namespace)

    def get(self, name: str, namespace: str = "default") -> Workflow:
        return self.store.get(Workflow, name, namespace)

    def state(self, name: str) -> str | None:
        return self.get(name).status.state

    def supervise(self, name: str) -> None:
        self.controller.reconcile(ObjectKey("Workflow", "default", name))

    def wait_state(self, name: str, state: str) -> Workflow:
        def reached() -> Workflow | None:
            current = self.get(name)
            return current if current.status.state == state else None

        return eventually(
            reached,
            f"{name} reaches {state}",
            timeout=WAIT,
            interval=0.02,
            detail=lambda: f"{name} is {self.state(name)}",
        )

    def server_sees(self, name: str, state: str) -> None:
        """Wait until the server's watch has delivered the workflow's state."""
        eventually(
            lambda: self.server.dispatcher.known_state(("default", name)) == state,
            f"the server sees {name} {state}",
            timeout=WAIT,
            interval=0.02,
        )

    # -- agents -------------------------------------------------------------------------------------
    def connect(self, agent_id: str, token: str | None = AUTO) -> Agent:
        if token is AUTO:
            token = self.tokens.get(normalise_agent_id(agent_id))
        agent = Agent(self.stub, agent_id, token)
        self.agents.append(agent)
        return agent

    def token_for_workflow(self, workflow_id: str) -> str | None:
        namespace, _, name = workflow_id.partition("/")
        try:
            found = self.store.get(Workflow, name, namespace)
        except NotFound:  # an event about a workflow that is gone: no Hardware to speak for
            return None
        return self.tokens.get("/".join(hardware_of(found)))

    def publish(self, event: pb.Event, token: str | None = AUTO) -> pb.PublishEventResponse:
        if token is AUTO:
            token = self.token_for_workflow(event.workflow_id)
        response: pb.PublishEventResponse = self.stub.PublishEvent(
            pb.PublishEventRequest(event=event), metadata=bearer(token)
        )
        return response

    def started(self, workflow_name: str, action: str) -> None:
        self.publish(
            pb.Event(
                workflow_id=f"default/{workflow_name}",
                action_started=pb.Event.ActionStarted(action_id=action),
            )
        )

    def succeeded(self, workflow_name: str, action: str) -> None:
        self.publish(
            pb.Event(
                workflow_id=f"default/{workflow_name}",
                action_succeeded=pb.Event.ActionSucceeded(action_id=action),
            )
        )

    def failed(
        self, workflow_name: str, action: str, reason: str | None = None, message: str | None = None
    ) -> None:
        self.publish(
            pb.Event(
                workflow_id=f"default/{workflow_name}",
                action_failed=pb.Event.ActionFailed(
                    action_id=action, failure_reason=reason, failure_message=message
                ),
            )
        )

    def rejected(self, workflow_name: str, reason: str | None = None, message: str = "") -> None:
        self.publish(
            pb.Event(
                workflow_id=f"default/{workflow_name}",
                workflow_rejected=pb.Event.WorkflowRejected(failure_reason=reason, failure_message=message),
            )
        )

    def run_to_success(self, workflow_name: str, actions: tuple[str, ...] = ("a", "b")) -> None:
        for action in actions:
            self.started(workflow_name, action)
            self.succeeded(workflow_name, action)
