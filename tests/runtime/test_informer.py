"""Informers on the SQLite store: list then watch, relist after Expired, scoping, the cache's reads."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from capa_py.api import Cluster, Secret
from capa_py.api.meta import KubeObject
from capa_py.runtime.informer import CachedStore, Informer, informers_for
from capa_py.store import NotFound, SQLiteStore, WatchEvent, retry_on_conflict
from tests.support.eventually import eventually

SAFETY_TIMEOUT = 30.0
"""Only turns a hang into a failure; nothing waits for it on a healthy machine."""


def cluster(name: str, namespace: str = "default", **labels: str) -> Cluster:
    return Cluster.model_validate({"metadata": {"name": name, "namespace": namespace, "labels": labels}})


class Recorder:
    """Collects (type, name) of every event and wakes a waiter when a wanted set has arrived."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self._cond = threading.Condition()

    def __call__(self, event: WatchEvent[KubeObject]) -> None:
        with self._cond:
            self.events.append((event.type, event.object.name))
            self._cond.notify_all()

    def wait_for(self, *wanted: tuple[str, str]) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: all(w in self.events for w in wanted), SAFETY_TIMEOUT)


class Running:
    """Starts informers and, at teardown (before the store closes), stops them and waits for them."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.started: list[Informer] = []

    def __call__(self, *informers: Informer) -> None:
        for informer in informers:
            informer.start(self.stop)
            self.started.append(informer)

    def close(self) -> None:
        self.stop.set()
        for informer in self.started:
            informer.join(SAFETY_TIMEOUT)
            assert informer._thread is not None
            assert not informer._thread.is_alive(), "an informer must end once stopped"


@pytest.fixture
def run() -> Iterator[Running]:
    running = Running()
    yield running
    running.close()


def test_informer_lists_then_watches_and_caches(store: SQLiteStore, run: Running) -> None:
    store.create(cluster("a"))
    informer = Informer(store, Cluster)
    seen = Recorder()
    informer.add_handler(seen)
    assert not informer.has_synced()
    run(informer)
    assert informer.wait_for_sync(SAFETY_TIMEOUT)
    assert seen.wait_for(("ADDED", "a"))

    b = store.create(cluster("b"))
    b.metadata.annotations["x"] = "1"
    store.update(b)
    store.delete(Cluster, "a", "default")
    assert seen.wait_for(("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a"))
    assert [c.name for c in informer.list()] == ["b"]
    assert informer.get("b", "default").metadata.annotations == {"x": "1"}
    with pytest.raises(NotFound):
        informer.get("a", "default")


def test_relist_after_expired_emits_the_differences(tmp_path: Path, run: Running) -> None:
    with SQLiteStore(tmp_path / "small.db", retain_events=5, poll_interval=0.01) as small:
        small.create(cluster("gone"))
        kept = small.create(cluster("kept"))
        small.create(cluster("same"))
        informer = Informer(small, Cluster)
        informer.relist()  # the cache as of now; the watch has not started
        seen = Recorder()
        informer.add_handler(seen)

        # While nobody watches: a create, a delete, and enough updates to compact the events away.
        small.create(cluster("new"))
        small.delete(Cluster, "gone", "default")
        for step in range(12):
            kept.metadata.annotations["step"] = str(step)
            kept = small.update(kept)

        run(informer)
        assert seen.wait_for(("ADDED", "new"), ("DELETED", "gone"), ("MODIFIED", "kept"))
        assert informer.relists == 1, "the watch must have expired and the informer listed again"
        assert ("MODIFIED", "same") not in seen.events, "an unchanged object is not an event"
        assert sorted(c.name for c in informer.list()) == ["kept", "new", "same"]
        assert informer.get("kept", "default").metadata.annotations == {"step": "11"}

        # After the relist it watches again from the new list.
        small.create(cluster("later"))
        assert seen.wait_for(("ADDED", "later"))
        run.close()  # before the store closes


def test_namespace_and_label_scoping(store: SQLiteStore, run: Running) -> None:
    store.create(cluster("in", "team-a", **{"cluster.x-k8s.io/watch-filter": "one"}))
    store.create(cluster("unlabelled", "team-a"))
    store.create(cluster("elsewhere", "team-b", **{"cluster.x-k8s.io/watch-filter": "one"}))
    store.create(Secret.model_validate({"metadata": {"name": "s", "namespace": "team-a"}}))
    informers = informers_for(
        store, [Cluster, Secret], "team-a", "cluster.x-k8s.io/watch-filter=one", unfiltered=[Secret]
    )
    cache = CachedStore(store, informers)
    for informer in informers:
        run(informer)
    assert all(i.wait_for_sync(SAFETY_TIMEOUT) for i in informers)
    assert cache.has_synced()
    assert [c.name for c in cache.list(Cluster)] == ["in"]
    with pytest.raises(NotFound):
        cache.get(Cluster, "unlabelled", "team-a")
    assert cache.get(Secret, "s", "team-a").name == "s", "Secrets are not filtered by label"


def test_cache_reads_its_own_writes_before_the_watch_delivers_them(store: SQLiteStore) -> None:
    informer = Informer(store, Cluster)
    informer.relist()  # synced, but no watch running: only the cache's own bookkeeping can update it
    cache = CachedStore(store, [informer])
    created = cache.create(cluster("mine"))
    assert cache.get(Cluster, "mine").metadata.resource_version == created.metadata.resource_version
    edited = cache.get(Cluster, "mine")
    edited.metadata.labels["edited"] = "yes"
    cache.update(edited)
    assert cache.get(Cluster, "mine").metadata.labels == {"edited": "yes"}

    # A late watch event carrying an older state does not roll the cache back.
    informer.apply(WatchEvent("MODIFIED", created, created.metadata.resource_version or ""))
    assert cache.get(Cluster, "mine").metadata.labels == {"edited": "yes"}

    cache.delete(Cluster, "mine", "default")
    with pytest.raises(NotFound):
        cache.get(Cluster, "mine")
    # The creation event, arriving after the deletion, does not bring it back.
    informer.apply(WatchEvent("ADDED", created, created.metadata.resource_version or ""))
    with pytest.raises(NotFound):
        cache.get(Cluster, "mine")


def test_removing_the_last_finalizer_of_a_deleted_object_leaves_it_out_of_the_cache(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.create(
        Cluster.model_validate({"metadata": {"name": "c", "namespace": "default", "finalizers": ["f"]}})
    )
    informer = Informer(store, Cluster)
    informer.relist()  # no watch running: the test delivers the DELETED event itself
    cache = CachedStore(store, [informer])
    cache.delete(Cluster, "c", "default")
    marked = cache.get(Cluster, "c")
    marked.metadata.finalizers = []
    real_update = store.update

    def update_seen_by_the_watch_first(obj: Cluster) -> Cluster:
        # The watch's DELETED event reaches the informer before the write's response reaches the cache.
        final = real_update(obj)
        informer.apply(WatchEvent("DELETED", final, final.metadata.resource_version or ""))
        return final

    monkeypatch.setattr(store, "update", update_seen_by_the_watch_first)
    cache.update(marked)

    with pytest.raises(NotFound):
        cache.get(Cluster, "c")
    assert cache.list(Cluster, namespace="default") == []


def test_a_conflicting_write_brings_the_cache_up_to_date_for_the_retry(store: SQLiteStore) -> None:
    store.create(cluster("c"))
    informer = Informer(store, Cluster)
    informer.relist()  # no watch running: the cache only learns what this process does
    cache = CachedStore(store, [informer])
    other = store.get(Cluster, "c")
    other.metadata.labels["other"] = "writer"
    current = store.update(other)  # another process writes; the cache does not know yet

    def label(obj: Cluster) -> None:
        obj.metadata.labels["mine"] = "yes"

    written = retry_on_conflict(cache, cache.get(Cluster, "c"), label)

    assert written.metadata.labels == {"other": "writer", "mine": "yes"}
    assert int(written.metadata.resource_version or 0) > int(current.metadata.resource_version or 0)
    assert cache.get(Cluster, "c").metadata.labels == {"other": "writer", "mine": "yes"}


def test_cache_returns_copies(store: SQLiteStore) -> None:
    store.create(cluster("c"))
    informer = Informer(store, Cluster)
    informer.relist()
    cache = CachedStore(store, [informer])
    cache.get(Cluster, "c").metadata.labels["changed"] = "locally"
    assert cache.get(Cluster, "c").metadata.labels == {}


class EndingWatches:
    """The store, but every watch ends after a short while (as an API server's watch timeout ends it)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.watches: list[str | None] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def watch(
        self,
        kind: type[KubeObject],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent[KubeObject]]:
        self.watches.append(resource_version)
        return self.store.watch(kind, namespace, resource_version, label_selector, 0.05, stop)


def test_a_watch_that_ends_is_resumed_from_the_last_event(store: SQLiteStore, run: Running) -> None:
    ending = EndingWatches(store)
    informer = Informer(ending, Cluster)  # type: ignore[arg-type]
    seen = Recorder()
    informer.add_handler(seen)
    run(informer)
    assert informer.wait_for_sync(SAFETY_TIMEOUT)
    first = store.create(cluster("first"))
    assert seen.wait_for(("ADDED", "first"))
    # Wait until a watch has ended and another started after the event: it resumes from that event.
    assert wait_until(lambda: first.metadata.resource_version in ending.watches)
    store.create(cluster("second"))
    assert seen.wait_for(("ADDED", "second"))
    assert informer.relists == 0, "resuming a watch is not listing again"
    assert seen.events.count(("ADDED", "first")) == 1, "no event is delivered twice"


def wait_until(predicate: Callable[[], bool]) -> bool:
    return eventually(predicate, timeout=SAFETY_TIMEOUT, interval=0.01)
