"""The workflow server's event path over a real SQLite store: a PublishEvent for a workflow the server
knows reads nothing from the store (its one round trip is the status write, made before the reply), a
state the server has not seen yet costs a conflict and one read, never a lost write; and the
authenticator reads the cached Hardware and Secrets without copying them."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from capa_py.api.meta import Condition, KubeObject
from capa_py.api.tinkerbell import Hardware, Workflow
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store.protocol import WatchEvent
from capa_py.store.sqlite import SQLiteStore
from capa_py.tinkerbell.backoff import Backoff
from capa_py.tinkerbell.dispatch import Dispatcher, Refused
from capa_py.tinkerbell.proto import workflow_pb2 as pb
from controllers.tinkerbell import WorkflowController
from tests.tinkerbell.server_world import World, hardware, template, workflow


class Reads:
    """Counts the Workflow gets one SQLite store answers, on other threads than the test's."""

    def __init__(self, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.workflow_gets = 0
        self.updates = 0
        test_thread = threading.current_thread()
        get, update_status = store.get, store.update_status

        def counted_get(kind: type[Any], name: str, namespace: str | None = None) -> Any:
            if kind is Workflow and threading.current_thread() is not test_thread:
                self.workflow_gets += 1
            return get(kind, name, namespace)

        def counted_update(obj: Any) -> Any:
            if threading.current_thread() is not test_thread:
                self.updates += 1
            return update_status(obj)

        monkeypatch.setattr(store, "get", counted_get)
        monkeypatch.setattr(store, "update_status", counted_update)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, backoff=Backoff(10, 35))
    w.apply(hardware("hw1", "aa:bb:cc:dd:ee:01"), template())
    yield w
    w.close()


def test_an_event_for_a_known_workflow_reads_nothing_and_is_stored_before_the_reply(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.submit("wf", "hw1")
    agent = world.connect("hw1")
    assert agent.started().workflow_id == "default/wf"
    world.server_sees("wf", "Scheduled")
    reads = Reads(world.store, monkeypatch)
    world.started("wf", "a")
    assert world.get("wf").status.actions["a"].state == "Running"  # stored when the reply came
    world.succeeded("wf", "a")
    assert world.get("wf").status.actions["a"].state == "Succeeded"
    world.started("wf", "b")
    world.succeeded("wf", "b")
    assert world.get("wf").status.state == "Succeeded"
    assert reads.workflow_gets == 0
    assert reads.updates == 4  # one status write per event


class Box:
    def __init__(self) -> None:
        self.sent: queue.Queue[pb.GetWorkflowsResponse] = queue.Queue()

    def send(self, response: pb.GetWorkflowsResponse) -> None:
        self.sent.put(response)

    def abort(self, code: grpc.StatusCode, message: str) -> None:
        raise AssertionError(f"stream aborted: {code} {message}")


def fed(dispatcher: Dispatcher, store: SQLiteStore, kind: type[KubeObject], index: int) -> None:
    """What the dispatcher's informer of ``kind`` would deliver, delivered by hand (its watch is not
    running: the server sees exactly what the test feeds it)."""
    for obj in store.list(kind):
        dispatcher._informers[index].apply(WatchEvent("ADDED", obj, obj.metadata.resource_version or "0"))


@pytest.fixture
def unwatched(tmp_path: Path) -> Iterator[tuple[SQLiteStore, Dispatcher, Box]]:
    """A dispatcher whose watches never run, one workflow of hw1 dispatched to its agent."""
    with SQLiteStore(tmp_path / "state.db") as store:
        store.create(hardware("hw1", "aa:bb:cc:dd:ee:01"))
        store.create(template())
        store.create(workflow("wf", "hw1"))
        WorkflowController(store, EventRecorder(store)).reconcile(ObjectKey("Workflow", "default", "wf"))
        dispatcher = Dispatcher(store, allow_unauthenticated_agents=True)
        fed(dispatcher, store, Hardware, 0)
        fed(dispatcher, store, Workflow, 1)
        box = Box()
        dispatcher.connect("hw1", box)
        assert box.sent.get_nowait().start_workflow.workflow.workflow_id == "default/wf"
        assert store.get(Workflow, "wf", "default").status.state == "Scheduled"
        yield store, dispatcher, box


def event(kind: str, action: str) -> pb.Event:
    if kind == "started":
        return pb.Event(workflow_id="default/wf", action_started=pb.Event.ActionStarted(action_id=action))
    return pb.Event(workflow_id="default/wf", action_succeeded=pb.Event.ActionSucceeded(action_id=action))


def test_a_write_the_server_has_not_seen_costs_a_retry_and_is_kept(
    unwatched: tuple[SQLiteStore, Dispatcher, Box], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, dispatcher, _ = unwatched
    other = store.get(Workflow, "wf", "default")
    other.status.conditions.append(Condition(type="Audited", status="True", reason="ByAnotherWriter"))
    store.update_status(other)  # the server's known state is one version behind now
    gets: list[str] = []
    get = store.get

    def counted(kind: type[Any], name: str, namespace: str | None = None) -> Any:
        gets.append(kind.KIND)
        return get(kind, name, namespace)

    monkeypatch.setattr(store, "get", counted)
    dispatcher.publish(event("started", "a"))
    stored = store.get(Workflow, "wf", "default")
    assert stored.status.actions["a"].state == "Running"
    assert any(c.type == "Audited" for c in stored.status.conditions), "the other writer's change was lost"
    assert gets == ["Workflow", "Workflow"]  # the conflict's read (and the test's own)
    gets.clear()
    dispatcher.publish(event("succeeded", "a"))  # known again: no read
    assert gets == []
    assert store.get(Workflow, "wf", "default").status.actions["a"].state == "Succeeded"


def test_a_known_workflow_deleted_from_the_store_is_not_found(
    unwatched: tuple[SQLiteStore, Dispatcher, Box],
) -> None:
    store, dispatcher, _ = unwatched
    wf = store.get(Workflow, "wf", "default")
    wf.metadata.finalizers = []
    store.update(wf)
    store.delete(Workflow, "wf", "default")
    with pytest.raises(Refused) as refused:
        dispatcher.publish(event("started", "a"))
    assert refused.value.code == grpc.StatusCode.NOT_FOUND
    assert dispatcher.known_state(("default", "wf")) is None


def test_the_authenticator_reads_the_cached_hardware_itself(
    unwatched: tuple[SQLiteStore, Dispatcher, Box],
) -> None:
    _, dispatcher, _ = unwatched
    cached = dispatcher._informers[0].peek("hw1", "default")
    assert dispatcher.auth.store.get(Hardware, "hw1", "default") is cached
    # Readers that may change what they read still get copies.
    assert dispatcher.reads.get(Hardware, "hw1", "default") is not cached


def test_an_event_leaves_the_state_it_started_from_unchanged(
    unwatched: tuple[SQLiteStore, Dispatcher, Box],
) -> None:
    # The transition works on a copy of what it may change only (the status and each action's status);
    # the known state others may be reading at the same moment is never changed in place.
    store, dispatcher, _ = unwatched
    before = dispatcher._known(("default", "wf"))
    assert before is not None
    dispatcher.publish(event("started", "a"))
    assert before.status.state == "Scheduled", "the known state was changed in place"
    assert before.status.actions["a"].state == "Pending", "the known action status was changed in place"
    assert before.status.actions["a"].started_at is None
    assert store.get(Workflow, "wf", "default").status.actions["a"].state == "Running"


def test_the_watch_event_of_the_servers_own_write_is_passed_over(
    unwatched: tuple[SQLiteStore, Dispatcher, Box], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, dispatcher, _ = unwatched
    decisions: list[Any] = []
    decide = dispatcher._dispatch

    def counted(session: Any, hardware: Any) -> None:
        decisions.append(hardware)
        decide(session, hardware)

    monkeypatch.setattr(dispatcher, "_dispatch", counted)
    dispatcher.publish(event("started", "a"))
    assert len(decisions) == 1, "the event's writer decides once, after its write"
    fed(dispatcher, store, Workflow, 1)  # the watch brings the server's own write back
    assert len(decisions) == 1, "the server's own write was looked at again"
    other = store.get(Workflow, "wf", "default")
    other.status.conditions.append(Condition(type="Audited", status="True", reason="ByAnotherWriter"))
    store.update_status(other)
    fed(dispatcher, store, Workflow, 1)  # another writer's change is acted on
    assert len(decisions) == 2, "another writer's change was passed over"
    known = dispatcher._known(("default", "wf"))
    assert known is not None
    assert any(c.type == "Audited" for c in known.status.conditions)
