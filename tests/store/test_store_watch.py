"""Watch streams a kind's changes from a resourceVersion, as the Kubernetes watch API does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.api import Cluster, Secret
from capa_py.store import Expired, SQLiteStore, WatchEvent

# Long enough never to fire on a healthy machine; it only turns a hang into a failure.
SAFETY_TIMEOUT = 30.0


def new_cluster(name: str, namespace: str | None = None, **labels: str) -> Cluster:
    return Cluster.model_validate({"metadata": {"name": name, "namespace": namespace, "labels": labels}})


def checkpoint(store: SQLiteStore) -> str:
    """A resourceVersion to watch from, after an unrelated write.

    A fresh store is at "0", which a watch reads as "list first, then stream"; a write of another kind
    moves it on without adding Cluster events.
    """
    store.create(Secret.model_validate({"metadata": {"generateName": "checkpoint-"}}))
    return store.current_resource_version()


def expired(store: SQLiteStore, resource_version: str) -> bool:
    try:
        next(store.watch(Cluster, resource_version=resource_version, timeout=0), None)
    except Expired:
        return True
    return False


def drain(store: SQLiteStore, resource_version: str | None = None, **kwargs: str) -> list[tuple[str, str]]:
    """(type, name) of every event available now, without waiting for more."""
    events = store.watch(Cluster, resource_version=resource_version, timeout=0, **kwargs)
    return [(event.type, event.object.name) for event in events]


def next_event(events: Iterator[WatchEvent[Cluster]]) -> WatchEvent[Cluster]:
    event = next(events, None)
    assert event is not None, f"no event arrived within {SAFETY_TIMEOUT}s"
    return event


def test_watch_from_a_resource_version_streams_added_modified_deleted_in_order(store: SQLiteStore) -> None:
    start = checkpoint(store)
    created = store.create(new_cluster("demo"))
    created.metadata.labels["step"] = "two"
    modified = store.update(created)
    deleted = store.delete(Cluster, "demo")
    assert deleted is not None

    events = list(store.watch(Cluster, resource_version=start, timeout=0))

    assert [(e.type, e.object.name) for e in events] == [
        ("ADDED", "demo"),
        ("MODIFIED", "demo"),
        ("DELETED", "demo"),
    ]
    assert [e.resource_version for e in events[:2]] == [
        created.metadata.resource_version,
        modified.metadata.resource_version,
    ], "each event carries the resourceVersion of the write"
    if isinstance(store, SQLiteStore):
        assert events[2].resource_version == deleted.metadata.resource_version
    else:
        # The API server answers the delete with a Status, so the deletion's own resourceVersion is known
        # from the watch only.
        assert int(events[2].resource_version) > int(modified.metadata.resource_version or 0)
    assert events[1].object.metadata.labels == {"step": "two"}, "MODIFIED carries the new state"


def test_watch_from_a_resource_version_skips_earlier_writes(store: SQLiteStore) -> None:
    store.create(new_cluster("before"))
    start = store.list(Cluster).resource_version
    store.create(new_cluster("after"))

    assert drain(store, start) == [("ADDED", "after")]


def test_watch_without_resource_version_lists_first_then_streams_changes(store: SQLiteStore) -> None:
    store.create(new_cluster("a"))
    store.create(new_cluster("b"))

    events = store.watch(Cluster, timeout=SAFETY_TIMEOUT)
    try:
        synthetic = [next_event(events), next_event(events)]
        assert [(e.type, e.object.name) for e in synthetic] == [("ADDED", "a"), ("ADDED", "b")], (
            "existing objects must arrive first as ADDED"
        )
        store.create(new_cluster("c"))
        store.delete(Cluster, "a")
        assert (next_event(events).type, "c") == ("ADDED", "c")
        deleted = next_event(events)
        assert (deleted.type, deleted.object.name) == ("DELETED", "a"), "later changes must follow the list"
    finally:
        events.close()


def test_watch_is_scoped_to_a_namespace(store: SQLiteStore) -> None:
    start = checkpoint(store)
    store.create(new_cluster("mine", namespace="team-a"))
    store.create(new_cluster("theirs", namespace="team-b"))

    assert drain(store, start, namespace="team-a") == [("ADDED", "mine")]


def test_label_selector_watch_reports_entering_as_added_and_leaving_as_deleted(store: SQLiteStore) -> None:
    start = checkpoint(store)
    cluster = store.create(new_cluster("demo"))  # does not match yet: no event
    cluster.metadata.labels["app"] = "web"
    cluster = store.update(cluster)  # enters the selection
    cluster.metadata.annotations["touch"] = "1"
    cluster = store.update(cluster)  # stays in it
    cluster.metadata.labels["app"] = "db"
    cluster = store.update(cluster)  # leaves it
    cluster.metadata.annotations["touch"] = "2"
    store.update(cluster)  # still out: no event
    store.delete(Cluster, "demo")  # deleted while out: no event
    store.create(new_cluster("born-matching", app="web"))
    store.delete(Cluster, "born-matching")  # deleted while in: DELETED

    assert drain(store, start, label_selector="app=web") == [
        ("ADDED", "demo"),
        ("MODIFIED", "demo"),
        ("DELETED", "demo"),
        ("ADDED", "born-matching"),
        ("DELETED", "born-matching"),
    ]


def test_label_selector_watch_without_resource_version_lists_only_matching(store: SQLiteStore) -> None:
    store.create(new_cluster("web", app="web"))
    store.create(new_cluster("db", app="db"))

    assert drain(store, label_selector="app=web") == [("ADDED", "web")]


def test_watch_stops_when_the_stop_event_is_set(store: SQLiteStore) -> None:
    stop = threading.Event()
    seen: list[str] = []
    first_seen = threading.Event()

    def consume() -> None:
        for event in store.watch(Cluster, resource_version=start, stop=stop, timeout=SAFETY_TIMEOUT):
            seen.append(event.object.name)
            first_seen.set()

    start = checkpoint(store)
    consumer = threading.Thread(target=consume)
    consumer.start()
    store.create(new_cluster("demo"))
    assert first_seen.wait(SAFETY_TIMEOUT), "the watch never delivered the create"
    stop.set()
    consumer.join(SAFETY_TIMEOUT)
    assert not consumer.is_alive(), "the watch must return once stop is set"
    assert seen == ["demo"]


def test_watch_from_a_compacted_resource_version_raises_expired(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "small.db", retain_events=5) as small:
        cluster = small.create(new_cluster("demo"))
        created_at = cluster.metadata.resource_version
        for step in range(20):
            cluster.metadata.annotations["step"] = str(step)
            cluster = small.update(cluster)

        with pytest.raises(Expired):
            next(small.watch(Cluster, resource_version=created_at, timeout=0))

        recent = int(small.current_resource_version()) - 2
        assert len(list(small.watch(Cluster, resource_version=str(recent), timeout=0))) == 2, (
            "a recent resourceVersion must still be watchable"
        )


def test_a_watch_that_falls_behind_compaction_raises_expired(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "small.db", retain_events=5) as small:
        start = checkpoint(small)
        cluster = small.create(new_cluster("demo"))
        events = small.watch(Cluster, resource_version=start, timeout=0)
        assert next(events).type == "ADDED"
        for step in range(20):
            cluster.metadata.annotations["step"] = str(step)
            cluster = small.update(cluster)

        with pytest.raises(Expired):
            list(events)  # the events it had not read yet are gone: it must not skip them silently


def test_an_idle_watch_is_not_expired_by_compaction_of_other_kinds(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "small.db", retain_events=5) as small:
        start = checkpoint(small)
        first = small.create(new_cluster("first"))
        for _ in range(3):
            checkpoint(small)  # writes the watch reads past without yielding anything
        events = small.watch(Cluster, resource_version=start, timeout=SAFETY_TIMEOUT)
        try:
            assert next_event(events).object.name == "first"
            polled_up_to = small.current_resource_version()
            for _ in range(100):
                if expired(small, first.metadata.resource_version or ""):
                    break
                checkpoint(small)
            assert expired(small, first.metadata.resource_version or ""), "the store never compacted"
            assert not expired(small, polled_up_to), "test setup compacted too far"

            small.create(new_cluster("second"))

            assert next_event(events).object.name == "second", (
                "the watch had read every event up to the compaction point: it must go on"
            )
        finally:
            events.close()
