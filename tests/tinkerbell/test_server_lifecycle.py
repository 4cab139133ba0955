"""The workflow server's streams over time: cancellation and its acknowledgement, workflows the
supervisor ends under a running agent, reconnects, two streams with one agent id, health, metrics, TLS."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry

from capa_py.api.tinkerbell import Workflow
from capa_py.tinkerbell.proto import workflow_pb2 as pb
from capa_py.tinkerbell.proto import workflow_pb2_grpc as pb_grpc
from capa_py.tinkerbell.server import SERVICE_NAME, WorkflowService, check_tls
from tests.support.eventually import eventually
from tests.tinkerbell.server_world import WAIT, Agent, World, hardware, template
from tests.webhooks.certificates import write_certificate

MAC = "aa:bb:cc:dd:ee:01"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def world(tmp_path: Path, registry: CollectorRegistry) -> Iterator[World]:
    w = World(tmp_path, registry=registry)
    w.apply(hardware("hw1", MAC), template())
    yield w
    w.close()


def dispatched(world: World, name: str = "wf", agent_id: str = "hw1") -> Agent:
    world.submit(name, "hw1")
    agent = world.connect(agent_id)
    assert agent.started().workflow_id == f"default/{name}"
    world.wait_state(name, "Scheduled")
    return agent


def delete_and_supervise(world: World, name: str = "wf") -> None:
    world.store.delete(Workflow, name, "default")
    world.supervise(name)


def test_a_cancelled_running_workflow_is_stopped_and_the_agents_ack_cancels_it(world: World) -> None:
    agent = dispatched(world)
    world.started("wf", "a")
    delete_and_supervise(world)
    assert world.state("wf") == "Cancelling"
    assert agent.stopped() == "default/wf"
    world.failed("wf", "a", "Canceled", "stopped on request")
    status = world.get("wf").status
    assert status.state == "Canceled"
    assert status.actions["a"].state == "Failed"
    world.supervise("wf")
    with pytest.raises(Exception, match="not found"):
        world.get("wf")  # the controller let it go: the deletion completed


def test_a_cancelled_scheduled_workflow_is_acknowledged_by_a_rejection(world: World) -> None:
    agent = dispatched(world)
    delete_and_supervise(world)
    assert agent.stopped() == "default/wf"
    world.rejected("wf", "Canceled", "nothing was running")
    assert world.state("wf") == "Canceled"


def test_a_workflow_the_supervisor_fails_is_stopped_and_later_events_are_refused(world: World) -> None:
    agent = dispatched(world)
    world.clock.advance(61)  # past the scheduling timeout
    world.supervise("wf")
    assert world.get("wf").status.reason == "SchedulingTimeout"
    assert agent.stopped() == "default/wf"
    with pytest.raises(grpc.RpcError) as raised:
        world.started("wf", "a")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert world.state("wf") == "Failed"


def test_a_cancellation_the_supervisor_gives_up_on_is_stopped_again(world: World) -> None:
    agent = dispatched(world)
    world.started("wf", "a")
    delete_and_supervise(world)
    assert agent.stopped() == "default/wf"
    world.clock.advance(31)  # past the cancel timeout
    world.supervise("wf")
    assert agent.stopped() == "default/wf", "Canceled without the agent's word: told to stop once more"


def test_the_next_workflow_is_sent_once_the_cancelled_one_ends(world: World) -> None:
    agent = dispatched(world)
    world.submit("wf-2", "hw1")
    world.started("wf", "a")
    delete_and_supervise(world)
    assert agent.stopped() == "default/wf"
    assert world.state("wf-2") == "Pending", "nothing new while one is Cancelling"
    world.failed("wf", "a", "Canceled")
    assert agent.started().workflow_id == "default/wf-2"


def test_a_reconnecting_agent_gets_its_scheduled_or_running_workflow_again(world: World) -> None:
    agent = dispatched(world)
    agent.close()
    again = world.connect("hw1")
    assert again.started().workflow_id == "default/wf", "Scheduled: sent again"
    world.started("wf", "a")
    again.close()
    world.server_sees("wf", "Running")
    third = world.connect(MAC.upper())
    resent = third.started()
    assert resent.workflow_id == "default/wf", "Running: sent again"
    assert [a.id for a in resent.actions] == ["a", "b"]
    # The agent tells a double dispatch apart; rejecting the workflow it runs changes nothing.
    with pytest.raises(grpc.RpcError) as raised:
        world.rejected("wf", "AlreadyRunning")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert world.state("wf") == "Running"


def test_a_reconnecting_agent_of_a_cancelling_workflow_is_told_to_stop(world: World) -> None:
    agent = dispatched(world)
    world.started("wf", "a")
    agent.close()
    delete_and_supervise(world)
    world.server_sees("wf", "Cancelling")
    assert world.connect("hw1").stopped() == "default/wf"


@pytest.mark.parametrize("second_id", ["hw1", MAC, "AA-BB-CC-DD-EE-01"])
def test_a_second_stream_for_the_same_hardware_is_refused_and_the_first_keeps_its_workflow(
    world: World, second_id: str
) -> None:
    """Even with the Hardware's own credentials (before: the second stream took the workflow over and
    the first was aborted)."""
    first = dispatched(world)
    error = world.connect(second_id).ended()
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "default/hw1 already has an agent stream" in (error.details() or "")
    world.run_to_success("wf")
    world.submit("wf-2", "hw1")
    assert first.started().workflow_id == "default/wf-2", "the first stream is still served"
    first.close()
    _gone(world)
    assert world.connect(second_id).started().workflow_id == "default/wf-2", "served once the first ended"


def test_health_is_serving_for_the_server_and_the_workflow_service(world: World) -> None:
    checks = health_pb2_grpc.HealthStub(world.channel)
    for service in ("", SERVICE_NAME):
        response = checks.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return value or 0.0


def test_metrics_count_agents_dispatches_events_and_rejections(
    world: World, registry: CollectorRegistry
) -> None:
    agent = dispatched(world)
    assert sample(registry, "tink_server_connected_agents") == 1
    assert sample(registry, "tink_server_dispatches_total") == 1
    world.rejected("wf", "Busy")
    with pytest.raises(grpc.RpcError):
        world.started("wf", "a")
    assert sample(registry, "tink_server_rejections_total") == 1
    assert sample(registry, "tink_server_events_total", type="workflow_rejected", result="ok") == 1
    assert (
        sample(registry, "tink_server_events_total", type="action_started", result="failed_precondition") == 1
    )
    agent.close()
    eventually(
        lambda: sample(registry, "tink_server_connected_agents") == 0,
        "the closed stream no longer counted as a connected agent",
        timeout=WAIT,
        interval=0.02,
    )


def test_tls_serves_a_client_that_trusts_the_certificate(tmp_path: Path) -> None:
    write_certificate(tmp_path / "certs")
    tls = check_tls(tmp_path / "certs" / "tls.crt", tmp_path / "certs" / "tls.key")
    assert tls is not None
    world = World(tmp_path, tls=tls)
    try:
        world.apply(hardware("hw1", MAC), template())
        assert dispatched(world).nothing_queued()
        plain = grpc.insecure_channel(world.server.address)
        plain_stub = pb_grpc.WorkflowServiceStub(plain)
        with pytest.raises(grpc.RpcError, match="UNAVAILABLE"):
            plain_stub.PublishEvent(pb.PublishEventRequest(), timeout=5)
        plain.close()
    finally:
        world.close()


def test_tls_files_that_do_not_load_are_named(tmp_path: Path) -> None:
    write_certificate(tmp_path)
    (tmp_path / "junk").write_text("not a pem")
    with pytest.raises(ValueError, match=r"--tls-cert .*junk: not a PEM certificate"):
        check_tls(tmp_path / "junk", tmp_path / "tls.key")
    with pytest.raises(ValueError, match=r"--tls-key .*junk"):
        check_tls(tmp_path / "tls.crt", tmp_path / "junk")
    with pytest.raises(ValueError, match="go together"):
        check_tls(tmp_path / "tls.crt", None)
    other = tmp_path / "other"
    write_certificate(other)
    with pytest.raises(ValueError, match="does not match"):
        check_tls(tmp_path / "tls.crt", other / "tls.key")


def test_a_stop_acknowledged_for_the_action_not_yet_started_cancels(world: World) -> None:
    agent = dispatched(world)
    world.started("wf", "a")
    world.succeeded("wf", "a")
    delete_and_supervise(world)
    assert agent.stopped() == "default/wf"
    world.failed("wf", "b", "Canceled", "stopped before b")
    status = world.get("wf").status
    assert (status.state, status.reason, status.message) == ("Canceled", "Canceled", "stopped before b")
    assert status.actions["b"].state == "Pending", "b never ran"


def test_an_action_failing_for_another_reason_while_cancelling_still_cancels(world: World) -> None:
    dispatched(world)
    world.started("wf", "a")
    delete_and_supervise(world)
    world.failed("wf", "a", "Crashed")
    assert world.state("wf") == "Canceled"
    with pytest.raises(grpc.RpcError) as raised:
        world.failed("wf", "b", "Canceled")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION, "nothing to acknowledge any more"


def test_hardware_that_makes_a_connected_agent_ambiguous_ends_its_stream(world: World) -> None:
    agent = world.connect("hw1")
    world.apply(hardware("hw1", "aa:bb:cc:dd:ee:07", namespace="lab"))
    error = agent.ended()
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "lab/hw1" in (error.details() or "")


def test_env_values_are_never_logged(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.submit("wf", "hw1")
    sent = world.connect("hw1").started()
    assert sent.actions[0].env["SECRET"] == "s3cr3t-value", "the agent gets the value"
    world.wait_state("wf", "Scheduled")
    world.run_to_success("wf")
    logged = capsys.readouterr().out
    assert "workflow dispatched" in logged, "the server's log lines are captured"
    assert "s3cr3t-value" not in logged


def test_an_agent_whose_hardware_is_deleted_waits_and_is_served_when_it_is_back(world: World) -> None:
    from capa_py.api.tinkerbell import Hardware, LocalObjectReference

    agent = world.connect("hw1")
    world.store.delete(Hardware, "hw1", "default")
    eventually(
        lambda: all(s.hardware is None for s in world.server.dispatcher.sessions()),
        "the agent no longer bound to a deleted hardware",
        timeout=WAIT,
        interval=0.02,
    )
    back = hardware("hw1", MAC)
    # Back with the same credentials (a new token would rightly end the waiting stream).
    back.spec.agent_credentials_ref = LocalObjectReference(name="hw1-agent-credentials")
    world.apply(back)
    world.submit("wf", "hw1")
    assert agent.started().workflow_id == "default/wf"


def _gone(w: World) -> None:
    """Wait until the dispatcher has seen every stream end."""
    eventually(
        lambda: not w.server.dispatcher.sessions(), "every closed stream gone", timeout=WAIT, interval=0.02
    )


def _connected(w: World, hardware_name: str) -> Agent:
    """An agent of ``hardware_name`` whose session the dispatcher has registered."""
    agent = w.connect(hardware_name)
    eventually(w.server.dispatcher.sessions, "the agent connected", timeout=WAIT, interval=0.02)
    return agent


def _assert_told_the_service_stops(agent: Agent, caplog: pytest.LogCaptureFixture) -> None:
    """Told, not cancelled: a stream cancelled by the server's stop is an error gRPC logs as unhandled."""
    ended = agent.ended()
    assert (ended.code(), ended.details()) == (
        grpc.StatusCode.UNAVAILABLE,
        "the workflow service is stopping",
    )
    assert [r.getMessage() for r in caplog.records if r.name.startswith("grpc")] == []


def test_stopping_the_server_ends_open_streams(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    w = World(tmp_path)
    try:
        w.apply(hardware("hw1", MAC), template())
        agent = _connected(w, "hw1")
        with caplog.at_level(logging.ERROR, logger="grpc"):
            w.server.stop()
        _assert_told_the_service_stops(agent, caplog)
    finally:
        w.close()


def test_a_stream_still_connecting_when_the_server_stops_is_told_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop's sweep once missed a stream whose session the dispatcher had registered but whose coroutine
    had not yet resumed (the test above failed so under load): the agent's stream was cancelled instead.
    Here the dispatcher's connect is held until the sweep has begun, so that window is always open."""
    sweeping, release = threading.Event(), threading.Event()
    original_end = WorkflowService.end_streams

    async def end_streams(self: WorkflowService, timeout: float) -> None:
        sweeping.set()
        await original_end(self, timeout)

    monkeypatch.setattr(WorkflowService, "end_streams", end_streams)
    w = World(tmp_path)
    try:
        w.apply(hardware("hw1", MAC), template())
        connect = w.server.dispatcher.connect

        def held_connect(*args: Any) -> Any:
            session = connect(*args)
            release.wait(WAIT)
            return session

        monkeypatch.setattr(w.server.dispatcher, "connect", held_connect)
        agent = _connected(w, "hw1")
        stopper = threading.Thread(target=w.server.stop)
        with caplog.at_level(logging.ERROR, logger="grpc"):
            stopper.start()
            assert sweeping.wait(WAIT), "the server never began to stop"
            release.set()
            stopper.join(WAIT)
        assert not stopper.is_alive()
        _assert_told_the_service_stops(agent, caplog)
    finally:
        release.set()
        w.close()
