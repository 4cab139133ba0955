"""Which Hardware a workflow-server client is, proven rather than claimed: real grpcio clients over
loopback, with a Hardware's token (``authorization: Bearer``), with a client certificate (mutual TLS), with
another Hardware's credentials and with none.

Each of these failed before agents had to prove their Hardware: any client naming a Hardware (or a MAC)
got its workflow, env values included; a second stream took the workflow over; anyone could publish any
workflow's events; and TLS authenticated the server only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from capa_py.api.tinkerbell import Hardware
from capa_py.tinkerbell.proto import workflow_pb2 as pb
from capa_py.tinkerbell.proto import workflow_pb2_grpc as pb_grpc
from capa_py.tinkerbell.server import TLSFiles
from tests.tinkerbell.pki import CA, Issued
from tests.tinkerbell.server_world import Agent, World, bearer, hardware, template

MAC = "aa:bb:cc:dd:ee:01"
MAC2 = "aa:bb:cc:dd:ee:02"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    w.apply(hardware("hw1", MAC), hardware("hw2", MAC2), template())
    yield w
    w.close()


def started(action: str = "a") -> pb.Event:
    return pb.Event(workflow_id="default/wf", action_started=pb.Event.ActionStarted(action_id=action))


def publish_refused(world: World, event: pb.Event, token: str | None) -> grpc.RpcError:
    before = world.get("wf").model_dump()
    with pytest.raises(grpc.RpcError) as raised:
        world.publish(event, token=token)
    assert world.get("wf").model_dump() == before, "a refused event changes nothing"
    return raised.value


@pytest.mark.parametrize("agent_id", ["hw1", MAC, "AA-BB-CC-DD-EE-01"])
def test_a_client_claiming_a_hardware_without_credentials_is_refused_and_gets_nothing(
    world: World, agent_id: str
) -> None:
    world.submit("wf", "hw1")
    error = world.connect(agent_id, token=None).ended()
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "Bearer" in (error.details() or "")
    assert world.state("wf") == "Pending", "nothing was dispatched"


@pytest.mark.parametrize("agent_id", ["hw1", MAC])
def test_a_client_with_another_hardwares_token_or_a_wrong_one_is_denied(world: World, agent_id: str) -> None:
    world.submit("wf", "hw1")
    for token in (world.tokens["hw2"], "not-the-token", world.tokens["hw1"] + "x"):
        error = world.connect(agent_id, token=token).ended()
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error.details() == "the credentials do not prove hardware default/hw1"
        assert token not in (error.details() or "")
    assert world.state("wf") == "Pending", "nothing was dispatched"
    assert world.connect(agent_id).started().workflow_id == "default/wf", "its own token is served"


def test_an_authorization_header_that_is_no_bearer_token_is_unauthenticated(world: World) -> None:
    world.submit("wf", "hw1")
    call = world.stub.GetWorkflows(
        pb.GetWorkflowsRequest(agent_id="hw1"), metadata=(("authorization", f"Basic {world.tokens['hw1']}"),)
    )
    with pytest.raises(grpc.RpcError) as raised:
        next(iter(call))
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert world.state("wf") == "Pending"


def test_an_impostor_stream_does_not_take_the_workflow_from_the_real_agent(world: World) -> None:
    world.submit("wf", "hw1")
    real = world.connect("hw1")
    assert real.started().workflow_id == "default/wf"
    assert world.connect("hw1", token=None).ended().code() == grpc.StatusCode.UNAUTHENTICATED
    assert world.connect(MAC, token=world.tokens["hw2"]).ended().code() == grpc.StatusCode.PERMISSION_DENIED
    assert world.connect(MAC).ended().code() == grpc.StatusCode.ALREADY_EXISTS, "even with the right token"
    world.run_to_success("wf")
    assert world.state("wf") == "Succeeded"
    world.submit("wf-2", "hw1")
    assert real.started().workflow_id == "default/wf-2", "the real agent's stream was never ended"


def test_events_without_credentials_or_with_another_hardwares_are_refused(world: World) -> None:
    world.submit("wf", "hw1")
    assert world.connect("hw1").started().workflow_id == "default/wf"
    world.wait_state("wf", "Scheduled")
    assert publish_refused(world, started(), None).code() == grpc.StatusCode.UNAUTHENTICATED
    assert publish_refused(world, started(), world.tokens["hw2"]).code() == grpc.StatusCode.PERMISSION_DENIED
    succeeded = pb.Event(workflow_id="default/wf", action_succeeded=pb.Event.ActionSucceeded(action_id="b"))
    assert publish_refused(world, succeeded, None).code() == grpc.StatusCode.UNAUTHENTICATED
    world.run_to_success("wf")  # with hw1's token
    assert world.state("wf") == "Succeeded"


def test_a_rotated_token_ends_the_stream_that_presented_the_old_one(world: World) -> None:
    world.submit("wf", "hw1")
    agent = world.connect("hw1")
    assert agent.started().workflow_id == "default/wf"
    old = world.tokens["hw1"]
    new = world.issue("hw1")
    assert publish_refused(world, started(), old).code() == grpc.StatusCode.PERMISSION_DENIED
    world.started("wf", "a")  # the new token; the server looks at the agent's stream again
    assert agent.ended().code() == grpc.StatusCode.PERMISSION_DENIED
    again = world.connect("hw1", token=new)
    assert again.started().workflow_id == "default/wf", "Running: sent again to the new token"


def test_a_stream_whose_hardware_loses_its_credentials_is_ended(world: World) -> None:
    world.submit("wf", "hw1")
    agent = world.connect("hw1")
    assert agent.started().workflow_id == "default/wf"
    machine = world.store.get(Hardware, "hw1", "default")
    machine.spec.agent_credentials_ref = None
    world.store.update(machine)
    assert agent.ended().code() == grpc.StatusCode.PERMISSION_DENIED


def test_unauthenticated_agents_are_allowed_only_when_asked_and_only_for_hardware_without_credentials(
    tmp_path: Path,
) -> None:
    w = World(tmp_path, allow_unauthenticated=True, credentials=False)
    try:
        w.apply(hardware("open", MAC), template())
        w.submit("wf", "open")
        assert w.connect("open", token=None).started().workflow_id == "default/wf"
        w.run_to_success("wf")  # events without credentials too
        assert w.state("wf") == "Succeeded"
        w.apply(hardware("locked", MAC2))
        w.issue("locked")
        error = w.connect("locked", token=None).ended()
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "requires agent credentials" in (error.details() or "")
        assert w.connect("locked", token=w.tokens["locked"]).nothing_queued()
    finally:
        w.close()


# -- mutual TLS -----------------------------------------------------------------------------------------
@pytest.fixture
def pki(tmp_path: Path) -> CA:
    return CA(tmp_path / "pki")


@pytest.fixture
def mtls_world(tmp_path: Path, pki: CA) -> Iterator[World]:
    server = pki.issue("server", "tink-server", server=True)
    w = World(tmp_path, tls=TLSFiles(server.cert, server.key, pki.cert), credentials=False)
    w.apply(hardware("hw1", MAC), hardware("hw2", MAC2), template())
    yield w
    w.close()


class Client:
    def __init__(self, world: World, root: bytes, identity: Issued | None) -> None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=root,
            private_key=identity.key_pem if identity else None,
            certificate_chain=identity.cert_pem if identity else None,
        )
        self.channel = grpc.secure_channel(world.server.address, credentials)
        self.stub = pb_grpc.WorkflowServiceStub(self.channel)
        self.agents: list[Agent] = []

    def connect(self, agent_id: str, token: str | None = None) -> Agent:
        agent = Agent(self.stub, agent_id, token)
        self.agents.append(agent)
        return agent

    def publish(self, event: pb.Event) -> None:
        self.stub.PublishEvent(pb.PublishEventRequest(event=event))

    def close(self) -> None:
        for agent in self.agents:
            agent.close()
        self.channel.close()


@pytest.fixture
def clients(mtls_world: World, pki: CA) -> Iterator[list[Client]]:
    made: list[Client] = []
    yield made
    for client in made:
        client.close()


def test_a_client_certificate_naming_the_hardware_proves_it(
    mtls_world: World, pki: CA, clients: list[Client]
) -> None:
    mtls_world.submit("wf", "hw1")
    by_cn = Client(mtls_world, pki.cert.read_bytes(), pki.issue("hw1", "hw1.default"))
    clients.append(by_cn)
    assert by_cn.connect(MAC).started().workflow_id == "default/wf"
    for action in ("a", "b"):
        by_cn.publish(started(action))
        by_cn.publish(
            pb.Event(workflow_id="default/wf", action_succeeded=pb.Event.ActionSucceeded(action_id=action))
        )
    assert mtls_world.state("wf") == "Succeeded"
    by_cn.close()
    mtls_world.submit("wf2", "hw2")
    by_san = Client(mtls_world, pki.cert.read_bytes(), pki.issue("hw2", "machine", dns=("hw2.default",)))
    clients.append(by_san)
    assert by_san.connect("hw2").started().workflow_id == "default/wf2", "a DNS SAN names it too"


def test_a_client_certificate_of_another_hardware_is_denied(
    mtls_world: World, pki: CA, clients: list[Client]
) -> None:
    mtls_world.submit("wf", "hw1")
    real = Client(mtls_world, pki.cert.read_bytes(), pki.issue("hw1", "hw1.default"))
    other = Client(mtls_world, pki.cert.read_bytes(), pki.issue("hw2", "hw2.default"))
    clients.extend([real, other])
    assert other.connect("hw1").ended().code() == grpc.StatusCode.PERMISSION_DENIED
    assert real.connect("hw1").started().workflow_id == "default/wf"
    mtls_world.wait_state("wf", "Scheduled")
    with pytest.raises(grpc.RpcError) as raised:
        other.publish(started())
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert mtls_world.state("wf") == "Scheduled"


def test_a_client_without_a_certificate_or_with_another_cas_cannot_connect(
    mtls_world: World, pki: CA, clients: list[Client], tmp_path: Path
) -> None:
    mtls_world.submit("wf", "hw1")
    stranger = CA(tmp_path / "other-pki", "other-ca").issue("hw1", "hw1.default")
    for identity in (None, stranger):
        client = Client(mtls_world, pki.cert.read_bytes(), identity)
        clients.append(client)
        assert client.connect("hw1").ended().code() == grpc.StatusCode.UNAVAILABLE, "the handshake fails"
    assert mtls_world.state("wf") == "Pending"


def test_a_certificate_and_a_token_must_both_prove_the_hardware(
    mtls_world: World, pki: CA, clients: list[Client]
) -> None:
    mtls_world.submit("wf", "hw1")
    token = mtls_world.issue("hw2")
    client = Client(mtls_world, pki.cert.read_bytes(), pki.issue("hw1", "hw1.default"))
    clients.append(client)
    assert client.connect("hw1", token=token).ended().code() == grpc.StatusCode.PERMISSION_DENIED
    assert client.connect("hw1", token=mtls_world.issue("hw1")).started().workflow_id == "default/wf"


def test_bearer_metadata_reaches_the_server_on_a_plaintext_channel_too(world: World) -> None:
    """The agent's token is call metadata, not channel credentials: gRPC sends it without TLS as well."""
    world.submit("wf", "hw1")
    call = world.stub.GetWorkflows(
        pb.GetWorkflowsRequest(agent_id="hw1"), metadata=bearer(world.tokens["hw1"])
    )
    try:
        first = next(iter(call))
        assert first.start_workflow.workflow.workflow_id == "default/wf"
    finally:
        call.cancel()


def test_a_cluster_file_allows_unauthenticated_agents_only_when_it_says_so() -> None:
    """The lab example says so; the management cluster's controller Deployment then gets the flag
    ``capa controller`` takes, and nothing otherwise."""
    import typer
    import yaml

    from capa_app.cli.main import app
    from capa_py.api.clusterconfig import TinkerbellComponentsSpec
    from capa_py.manifests.components import controller_args

    lab = Path(__file__).resolve().parents[2] / "examples" / "clusters" / "lab.yaml"
    [config] = [d for d in yaml.safe_load_all(lab.read_text()) if d and d["kind"] == "ClusterConfig"]
    spec = TinkerbellComponentsSpec.model_validate(config["spec"]["tinkerbell"])
    assert spec.allow_unauthenticated_agents is True
    flag = "--tink-server-allow-unauthenticated-agents"
    assert flag in controller_args(["tinkerbell"], spec)
    assert flag not in controller_args(["tinkerbell"], TinkerbellComponentsSpec())
    root: Any = typer.main.get_command(app)
    controller = root.commands["controller"]
    assert any(flag in option.opts for option in controller.params), "capa controller takes the flag"


def test_the_agent_proves_its_hardware_with_its_client_certificate(
    mtls_world: World, pki: CA, tmp_path: Path
) -> None:
    """``capa tink agent --tls-ca --tls-cert --tls-key`` as configured: the real agent, real processes."""
    import threading

    from capa_py.api.meta import ObjectMeta
    from capa_py.api.tinkerbell import Action, Template, TemplateSpec
    from capa_py.tinkerbell.agent import Agent as RealAgent
    from capa_py.tinkerbell.agent import AgentConfig
    from capa_py.tinkerbell.runtimes import ProcessRuntime

    ran = tmp_path / "ran"
    mtls_world.apply(
        Template(
            metadata=ObjectMeta(name="tpl", namespace="default"),
            spec=TemplateSpec(
                actions=[Action(name="a", image="i", command="/bin/sh", args=["-c", f"touch {ran}"])]
            ),
        )
    )
    mtls_world.submit("wf", "hw1")
    identity = pki.issue("hw1", "hw1.default")
    config = AgentConfig(
        MAC,
        mtls_world.server.address,
        tls_ca=pki.cert.read_bytes(),
        tls_cert=identity.cert_pem,
        tls_key=identity.key_pem,
        reconnect_initial=0.05,
        reconnect_max=0.5,
        once=True,
    )
    agent = RealAgent(config, ProcessRuntime(stop_grace=2.0))
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        assert mtls_world.wait_state("wf", "Succeeded").status.state == "Succeeded"
        assert ran.exists()
    finally:
        agent.shutdown()
        thread.join(30)
