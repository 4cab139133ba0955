"""PublishEvent over a real server and store: every event's effect, every refused event's status code
(with nothing changed), and the rejection back-off growing and capped on a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from capa_py.tinkerbell.backoff import Backoff
from capa_py.tinkerbell.proto import workflow_pb2 as pb
from tests.tinkerbell.server_world import World, hardware, template


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, backoff=Backoff(10, 35))
    w.apply(hardware("hw1", "aa:bb:cc:dd:ee:01"), template())
    yield w
    w.close()


def dispatched(world: World, name: str = "wf") -> None:
    world.submit(name, "hw1")
    agent = world.connect("hw1")
    assert agent.started().workflow_id == f"default/{name}"
    world.wait_state(name, "Scheduled")


def test_action_started_makes_the_workflow_and_the_action_running(world: World) -> None:
    dispatched(world)
    world.clock.advance(5)
    world.started("wf", "a")
    status = world.get("wf").status
    assert status.state == "Running"
    assert status.current_action == "a"
    assert status.actions["a"].state == "Running"
    assert status.actions["a"].started_at == world.clock.now
    assert status.started_at == world.clock.now


def test_the_last_action_succeeding_makes_the_workflow_succeeded(world: World) -> None:
    dispatched(world)
    world.started("wf", "a")
    world.succeeded("wf", "a")
    assert world.get("wf").status.actions["a"].state == "Succeeded"
    assert world.state("wf") == "Running", "one more action to go"
    world.started("wf", "b")
    world.succeeded("wf", "b")
    assert world.state("wf") == "Succeeded"


def test_an_action_failing_fails_the_workflow_with_its_reason_and_message(world: World) -> None:
    dispatched(world)
    world.started("wf", "a")
    world.failed("wf", "a", "ImagePullFailed", "no such image")
    status = world.get("wf").status
    assert (status.state, status.reason, status.message) == ("Failed", "ImagePullFailed", "no such image")
    assert (status.actions["a"].state, status.actions["a"].reason) == ("Failed", "ImagePullFailed")


def test_a_rejection_puts_the_workflow_back_to_pending_with_the_agents_reason(world: World) -> None:
    dispatched(world)
    world.rejected("wf", "Busy", "running default/other")
    status = world.get("wf").status
    assert (status.state, status.reason, status.message) == ("Pending", "Busy", "running default/other")


def refused(world: World, event: pb.Event) -> grpc.RpcError:
    before = world.get("wf").model_dump()
    with pytest.raises(grpc.RpcError) as raised:
        world.publish(event, token=world.tokens["hw1"])  # hw1's agent, whatever the event names
    assert world.get("wf").model_dump() == before, "a refused event changes nothing"
    return raised.value


def started(action: str) -> pb.Event.ActionStarted:
    return pb.Event.ActionStarted(action_id=action)


@pytest.mark.parametrize(
    ("event", "code", "says"),
    [
        (pb.Event(workflow_id="default/nope", action_started=started("a")), "NOT_FOUND", "default/nope"),
        (pb.Event(workflow_id="lab/wf", action_started=started("a")), "NOT_FOUND", "lab/wf"),
        (pb.Event(workflow_id="default/wf", action_started=started("zz")), "NOT_FOUND", "'zz'"),
        (
            pb.Event(workflow_id="default/wf", action_failed=pb.Event.ActionFailed(action_id="zz")),
            "NOT_FOUND",
            "'zz'",
        ),
        (pb.Event(workflow_id="default/wf", action_started=started("b")), "FAILED_PRECONDITION", "'b'"),
        (
            pb.Event(workflow_id="default/wf", action_succeeded=pb.Event.ActionSucceeded(action_id="a")),
            "FAILED_PRECONDITION",
            "not allowed in state Scheduled",
        ),
        (pb.Event(workflow_id="default/wf"), "INVALID_ARGUMENT", "event: one of"),
        (pb.Event(action_started=started("a")), "INVALID_ARGUMENT", "event.workflow_id: required"),
        (pb.Event(workflow_id="wf", action_started=started("a")), "INVALID_ARGUMENT", "<namespace>/<name>"),
        (
            pb.Event(workflow_id="default/wf", action_started=started("")),
            "INVALID_ARGUMENT",
            "event.action_started.action_id",
        ),
    ],
)
def test_a_bad_event_gets_its_status_code_and_changes_nothing(
    world: World, event: pb.Event, code: str, says: str
) -> None:
    dispatched(world)
    error = refused(world, event)
    assert error.code() == getattr(grpc.StatusCode, code)
    assert says in (error.details() or "")


def test_a_request_without_an_event_is_invalid(world: World) -> None:
    dispatched(world)
    with pytest.raises(grpc.RpcError) as raised:
        world.stub.PublishEvent(pb.PublishEventRequest())
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_events_out_of_order_or_after_the_end_are_failed_preconditions(world: World) -> None:
    world.submit("wf", "hw1")  # Pending, never dispatched
    assert refused(world, pb.Event(workflow_id="default/wf", action_started=started("a"))).code() == (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    rejection = pb.Event(workflow_id="default/wf", workflow_rejected=pb.Event.WorkflowRejected())
    assert refused(world, rejection).code() == grpc.StatusCode.FAILED_PRECONDITION
    agent = world.connect("hw1")
    agent.started()
    world.wait_state("wf", "Scheduled")
    world.run_to_success("wf")
    for event in (
        pb.Event(workflow_id="default/wf", action_started=started("a")),
        pb.Event(workflow_id="default/wf", action_failed=pb.Event.ActionFailed(action_id="b")),
        rejection,
    ):
        assert refused(world, event).code() == grpc.StatusCode.FAILED_PRECONDITION


def test_a_rejected_workflow_is_held_back_by_a_growing_capped_back_off(world: World) -> None:
    world.submit("wf", "hw1")
    agent = world.connect("hw1")
    delays = []
    for _ in range(4):
        assert agent.started().workflow_id == "default/wf"
        world.wait_state("wf", "Scheduled")
        rejected_at = world.clock.now
        world.rejected("wf", "Busy")
        until = world.server.dispatcher.held_back_until(("default", "wf"))
        assert until is not None
        delays.append((until - rejected_at).total_seconds())
        # Just before the back-off ends it is not offered; once the clock passes it, it is.
        world.clock.advance(delays[-1] - 1)
        world.server.dispatcher.wake()
        world.server.dispatcher.evaluate(("default", "hw1"))
        assert world.state("wf") == "Pending"
        assert agent.nothing_queued()
        world.clock.advance(1)
        world.server.dispatcher.wake()
    assert delays == [10, 20, 35, 35], "base * 2**(n-1), capped at the maximum"
    assert agent.started().workflow_id == "default/wf"


def test_a_held_back_workflow_lets_the_next_one_go_first(world: World) -> None:
    world.submit("wf", "hw1")
    agent = world.connect("hw1")
    agent.started()
    world.wait_state("wf", "Scheduled")
    world.submit("wf-next", "hw1")
    world.rejected("wf", "Busy")
    assert agent.started().workflow_id == "default/wf-next"


def test_with_the_wall_clock_a_rejected_workflow_is_offered_again_when_its_back_off_ends(
    world: World,
) -> None:
    """The production path: no one wakes the timer, the back-off (a twentieth of a second) just ends."""
    from capa_py.tinkerbell.proto import workflow_pb2_grpc as pb_grpc
    from capa_py.tinkerbell.server import start_in_thread
    from tests.tinkerbell.server_world import Agent, bearer

    world.submit("wf", "hw1")
    server = start_in_thread(world.store, "127.0.0.1", 0, backoff=Backoff(0.05, 0.1))
    channel = grpc.insecure_channel(server.address)
    try:
        stub = pb_grpc.WorkflowServiceStub(channel)
        token = world.tokens["hw1"]
        agent = Agent(stub, "hw1", token)
        for _ in range(3):
            assert agent.started().workflow_id == "default/wf"
            world.wait_state("wf", "Scheduled")
            stub.PublishEvent(
                pb.PublishEventRequest(
                    event=pb.Event(workflow_id="default/wf", workflow_rejected=pb.Event.WorkflowRejected())
                ),
                metadata=bearer(token),
            )
        assert agent.started().workflow_id == "default/wf"
        agent.close()
    finally:
        channel.close()
        server.stop()
