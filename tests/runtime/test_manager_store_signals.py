"""What the manager learns from the store it learns through the protocol: whether a NotFound is about the
object being reconciled (its ``about``, never its message) and whether the store can tell its latest
resourceVersion cheaply (the optional ``change_sequence`` capability, whatever class the store is).

Each test fails on the manager that compared the message text and asked ``isinstance(store, SQLiteStore)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from capa_py.api import Cluster
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.result import Result, no_requeue
from capa_py.runtime.manager import Manager
from capa_py.runtime.queue import ObjectKey
from capa_py.store import SQLiteStore, WatchEvent
from capa_py.store.errors import NotFound, ObjectRef
from capa_py.store.protocol import ObjectStore


class Raises:
    """Reconciles Clusters by raising the NotFound it was given."""

    name = "raises"
    kind = Cluster
    watched_kinds: Sequence[type[KubeObject]] = ()

    def __init__(self, error: NotFound) -> None:
        self.error = error

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        raise self.error


class Quiet(Raises):
    def reconcile(self, key: ObjectKey) -> Result:
        return no_requeue()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "state.db")
    store.create(Cluster.model_validate({"metadata": {"name": "c", "namespace": "default"}}))
    yield store
    store.close()


def _drain(manager: Manager) -> None:
    while manager.process_one(timeout=0.0):
        pass


@pytest.mark.parametrize(
    "error",
    [
        # About a Machine that happens to share the Cluster's name, with a message reading like the key's.
        NotFound("Cluster default/c not found", ObjectRef("Machine", "default", "c")),
        # About nothing the store could name (a create refused for its missing namespace, say).
        NotFound("Cluster default/c not found"),
    ],
    ids=["another-object", "unknown-object"],
)
def test_a_not_found_about_another_object_is_an_error_whatever_its_message(
    store: SQLiteStore, error: NotFound
) -> None:
    manager = Manager(store, [Raises(error)])
    manager.prime()
    _drain(manager)
    assert [(str(key), message) for key, message in manager.errors] == [
        ("Cluster default/c", "Cluster default/c not found")
    ]


def test_a_not_found_about_the_reconciled_object_ends_its_reconcile_whatever_its_message(
    store: SQLiteStore,
) -> None:
    error = NotFound("the object went away", ObjectRef("Cluster", "default", "c"))
    manager = Manager(store, [Raises(error)])
    manager.prime()
    _drain(manager)
    assert list(manager.errors) == []


class Counting:
    """Delegates to a SQLite store and counts the watch reads made through it."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.watches = 0

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        self.watches += 1
        return self.inner.watch(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Sequenced(Counting):
    """A wrapper that is no SQLiteStore but offers the capability."""

    def change_sequence(self) -> str:
        return self.inner.change_sequence()


def _idle_polls(store: ObjectStore, polls: int) -> Manager:
    manager = Manager(store, [Quiet(NotFound("unused"))])
    manager.prime()
    _drain(manager)
    manager.poll_changes()  # the first poll reads the watches once
    for _ in range(polls):
        assert manager.poll_changes() == 0
    return manager


def test_a_store_offering_its_change_sequence_is_not_watched_while_nothing_changes(
    store: SQLiteStore,
) -> None:
    sequenced = Sequenced(store)
    manager = _idle_polls(sequenced, 3)  # type: ignore[arg-type]
    assert sequenced.watches == 1
    store.create(Cluster.model_validate({"metadata": {"name": "d", "namespace": "default"}}))
    assert manager.poll_changes() == 1, "a change moves the sequence: the next poll reads it"
    assert sequenced.watches == 2


def test_a_delegating_wrapper_without_the_capability_is_watched_on_every_poll(store: SQLiteStore) -> None:
    counting = Counting(store)
    _idle_polls(counting, 3)  # type: ignore[arg-type]
    assert counting.watches == 4
