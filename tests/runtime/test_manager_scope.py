"""The manager's scope and listener, and its idle poll, on a real SQLite store with test controllers.

* a scope keeps objects outside it out of the queue, whether listed, changed or mapped from another event;
* a listener hears every listed object, every event in scope and every finished reconcile;
* an idle poll reads no watch while the store's resourceVersion stays the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from capa_py.api import Cluster, Machine
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.result import Result, no_requeue
from capa_py.runtime.manager import Manager
from capa_py.runtime.queue import ObjectKey
from capa_py.store import SQLiteStore, WatchEvent
from capa_py.store.protocol import T


def cluster(name: str) -> Cluster:
    return Cluster.model_validate({"metadata": {"name": name, "namespace": "default"}})


def machine(name: str, cluster_name: str) -> Machine:
    return Machine.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "clusterName": cluster_name,
                "infrastructureRef": {"apiVersion": "v1", "kind": "None", "name": name},
            },
        }
    )


class ClusterRecorder:
    """Reconciles Clusters by recording them; a Machine's event wakes its Cluster."""

    name = "cluster-recorder"
    kind = Cluster
    watched_kinds: Sequence[type[KubeObject]] = (Machine,)

    def __init__(self) -> None:
        self.reconciled: list[str] = []

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        obj = event.object
        return [ObjectKey("Cluster", "default", obj.spec.cluster_name)] if isinstance(obj, Machine) else []

    def reconcile(self, key: ObjectKey) -> Result:
        self.reconciled.append(key.name)
        return no_requeue()


class Listener:
    """Remembers what the manager told it."""

    def __init__(self) -> None:
        self.lists: dict[str, list[str]] = {}
        self.events: list[tuple[str, str]] = []
        self.reconciles: list[str] = []

    def listed(self, kind: str, objects: Sequence[KubeObject]) -> None:
        self.lists[kind] = sorted(o.name for o in objects)

    def dispatched(self, event: WatchEvent[KubeObject]) -> None:
        self.events.append((event.type, event.object.name))

    def reconciled(self, key: ObjectKey) -> None:
        self.reconciles.append(key.name)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "state.db")
    for name in ("inside", "outside"):
        store.create(cluster(name))
    yield store
    store.close()


def _drain(manager: Manager) -> None:
    while manager.process_one(timeout=0.0):
        pass


def test_objects_outside_the_scope_are_never_queued(store: SQLiteStore) -> None:
    recorder = ClusterRecorder()
    heard = Listener()
    manager = Manager(store, [recorder], scope=lambda key: key.name.startswith("inside"), listener=heard)
    manager.prime()
    _drain(manager)
    assert recorder.reconciled == ["inside"]
    assert heard.lists == {"Cluster": ["inside", "outside"], "Machine": []}, (
        "a listener hears every listed object"
    )
    assert heard.reconciles == ["inside"]

    # A change to the outside cluster, and a machine outside the scope naming the inside cluster: neither
    # is dispatched, so neither wakes anything. A machine in scope naming the outside cluster wakes nothing
    # outside.
    outside = store.get(Cluster, "outside", "default")
    outside.metadata.labels["changed"] = "yes"
    store.update(outside)
    store.create(machine("stray", "inside"))
    store.create(machine("inside-m", "outside"))
    assert manager.poll_changes() == 3
    _drain(manager)
    assert recorder.reconciled == ["inside"], "an event outside the scope woke a reconcile"
    assert heard.events == [("ADDED", "inside-m")], "only events in scope reach the listener"
    assert manager.reconciled_keys == {ObjectKey("Cluster", "default", "inside")}

    inside = store.get(Cluster, "inside", "default")
    inside.metadata.labels["changed"] = "yes"
    store.update(inside)
    manager.poll_changes()
    _drain(manager)
    assert recorder.reconciled == ["inside", "inside"]
    assert heard.reconciles == ["inside", "inside"]


def test_without_a_scope_every_object_is_reconciled(store: SQLiteStore) -> None:
    recorder = ClusterRecorder()
    manager = Manager(store, [recorder])
    manager.prime()
    _drain(manager)
    assert sorted(recorder.reconciled) == ["inside", "outside"]


class WatchCounting(SQLiteStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.watches = 0

    def watch(self, kind: type[T], *args: Any, **kwargs: Any) -> Iterator[WatchEvent[T]]:
        self.watches += 1
        return super().watch(kind, *args, **kwargs)


def test_an_idle_poll_reads_no_watch_until_the_store_changes(tmp_path: Path) -> None:
    store = WatchCounting(tmp_path / "state.db")
    store.create(cluster("one"))
    manager = Manager(store, [ClusterRecorder()])
    manager.prime()
    manager.poll_changes()
    first = store.watches
    assert first == 2, "the first poll reads each watched kind once"
    for _ in range(20):
        assert manager.poll_changes() == 0
    assert store.watches == first, "polls with nothing changed read the watches again"

    store.create(machine("m", "one"))
    assert manager.poll_changes() == 1, "a change after idle polls was not seen"
    assert store.watches == first + 2
    store.close()
