"""The workflow server over a real SQLite store, with the generated client: what is dispatched to whom,
in which order, and the rendered actions a StartWorkflow carries."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.tinkerbell.server_world import World, hardware, template

MAC = "aa:bb:cc:dd:ee:01"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    w.apply(hardware("hw1", MAC), template())
    yield w
    w.close()


def test_a_prepared_workflow_is_sent_with_its_rendered_actions_and_becomes_scheduled(world: World) -> None:
    world.submit("wf", "hw1")
    agent = world.connect("hw1")
    sent = agent.started()
    assert sent.workflow_id == "default/wf"
    assert [a.id for a in sent.actions] == ["a", "b"]
    first, second = sent.actions
    assert (first.name, first.image, first.cmd) == ("a", "quay.io/tinkerbell/a:v1", "/bin/sh")
    assert list(first.args) == ["-c", "echo hello a"], "args are the rendered ones"
    assert dict(first.env) == {"SECRET": "s3cr3t-value", "ACTION": "a"}, (
        "the template's env under the action's"
    )
    assert list(first.volumes) == ["/tmp:/tmp", "/dev:/dev"]
    assert first.HasField("ns")
    assert first.ns.network == "host"
    assert not first.ns.HasField("pid")
    assert not second.HasField("cmd"), "an action without a command has no cmd"
    assert not second.HasField("ns")
    assert world.wait_state("wf", "Scheduled").status.state == "Scheduled"


def test_workflows_are_dispatched_in_creation_order_one_at_a_time(world: World) -> None:
    world.submit("wf-z", "hw1")
    # Creation timestamps have whole seconds: the next one must be a later second to tell the order.
    time.sleep(1.05 - (time.time() % 1.0))
    world.submit("wf-a", "hw1")
    world.submit("wf-b", "hw1")
    agent = world.connect("hw1")
    assert agent.started().workflow_id == "default/wf-z", "the oldest first, although its name sorts last"
    world.wait_state("wf-z", "Scheduled")
    world.started("wf-z", "a")
    assert (world.state("wf-a"), world.state("wf-b")) == ("Pending", "Pending"), "one at a time per agent"
    world.succeeded("wf-z", "a")
    world.run_to_success("wf-z", ("b",))
    assert world.state("wf-z") == "Succeeded"
    assert agent.started().workflow_id == "default/wf-a", "same second: the name decides"
    assert world.state("wf-b") == "Pending"
    world.run_to_success("wf-a")
    assert agent.started().workflow_id == "default/wf-b"


def test_a_workflow_applied_while_the_agent_waits_is_sent_at_once(world: World) -> None:
    agent = world.connect("hw1")
    world.submit("wf", "hw1")
    assert agent.started().workflow_id == "default/wf"


@pytest.mark.parametrize("agent_id", ["AA:BB:CC:DD:EE:01", "aa-bb-cc-dd-ee-01", "aabb.ccdd.ee01", "HW1"])
def test_an_agent_is_known_by_its_hardware_name_or_any_mac_in_any_notation(
    world: World, agent_id: str
) -> None:
    world.submit("wf", "hw1")
    assert world.connect(agent_id).started().workflow_id == "default/wf"


def test_an_agent_whose_hardware_does_not_exist_yet_is_served_once_it_appears(world: World) -> None:
    ref, token = world.credentials_secret("late")
    agent = world.connect("11:22:33:44:55:66", token=token)
    late = hardware("late", "11:22:33:44:55:66")
    late.spec.agent_credentials_ref = ref
    world.apply(late)
    world.submit("wf", "late")
    assert agent.started().workflow_id == "default/wf"


def test_an_unprepared_workflow_or_another_hardwares_is_not_sent(world: World) -> None:
    world.apply(hardware("hw2", "aa:bb:cc:dd:ee:02"))
    world.submit("other", "hw2")
    from tests.tinkerbell.server_world import workflow

    world.apply(workflow("raw", "hw1"))  # never prepared: no rendered actions, no Prepared condition
    agent = world.connect("hw1")
    world.submit("mine", "hw1")
    assert agent.started().workflow_id == "default/mine"
    assert world.state("other") == "Pending"
    assert world.get("raw").status.state is None


def test_an_id_matching_hardware_in_two_namespaces_is_refused_naming_both(world: World) -> None:
    world.apply(hardware("hw1", "aa:bb:cc:dd:ee:09", namespace="lab"))
    error = world.connect("hw1", token=world.tokens["default/hw1"]).ended()
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "default/hw1" in (error.details() or "")
    assert "lab/hw1" in (error.details() or "")


def test_an_empty_agent_id_is_invalid(world: World) -> None:
    assert world.connect("").ended().code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_workflow_another_server_scheduled_meanwhile_is_not_scheduled_again(tmp_path: Path) -> None:
    """Two servers on one store: the one whose view is stale conflicts on its write, re-reads and finds
    the workflow Scheduled, so it never moves it to Scheduled a second time."""
    from prometheus_client import CollectorRegistry

    from capa_py.store.sqlite import SQLiteStore
    from capa_py.tinkerbell import states

    registry = CollectorRegistry()
    w = World(tmp_path, registry=registry)
    try:
        w.apply(hardware("hw1", MAC), template())
        w.submit("wf", "hw1")
        w.server_sees("wf", "Pending")
        # The other server's write, through a store handle of its own.
        with SQLiteStore(tmp_path / "state.db") as other:
            pending = other.get(type(w.get("wf")), "wf", "default")
            states.scheduled(pending, w.clock.now)
            scheduled = other.update_status(pending)
        agent = w.connect("hw1")
        assert agent.started().workflow_id == "default/wf", "the agent gets its Scheduled workflow"
        assert w.get("wf").metadata.resource_version == scheduled.metadata.resource_version, "not rewritten"
        assert registry.get_sample_value("tink_server_dispatches_total") == 0
    finally:
        w.close()


def test_many_agents_at_once_each_get_their_own_workflows_once_and_in_order(tmp_path: Path) -> None:
    import threading

    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    w = World(tmp_path, registry=registry)
    agents, per_agent = 6, 4
    try:
        w.apply(template(), *(hardware(f"m{i}", f"02:00:00:00:00:{i:02x}") for i in range(agents)))
        for number in range(per_agent):
            for i in range(agents):
                w.submit(f"m{i}-{number}", f"m{i}")
        received: dict[int, list[str]] = {i: [] for i in range(agents)}
        streams = [w.connect(f"m{i}") for i in range(agents)]

        def run(i: int) -> None:
            for _ in range(per_agent):
                sent = streams[i].started()
                received[i].append(sent.workflow_id)
                name = sent.workflow_id.split("/")[1]
                for action in sent.actions:
                    w.started(name, action.id)
                    w.succeeded(name, action.id)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(agents)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for i in range(agents):
            assert received[i] == [f"default/m{i}-{n}" for n in range(per_agent)], f"agent m{i}"
            assert streams[i].nothing_queued(), f"agent m{i} got more than its workflows"
        assert registry.get_sample_value("tink_server_dispatches_total") == agents * per_agent
        assert {wf.status.state for wf in w.store.list(type(w.get("m0-0")))} == {"Succeeded"}
    finally:
        w.close()
