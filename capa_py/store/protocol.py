"""The object store protocol every controller uses, whatever holds the objects.

It keeps the Kubernetes API's semantics so that code written against the embedded SQLite store behaves the
same against a real API server:

* ``metadata.resourceVersion`` changes on every write; a write carrying a stale one raises ``Conflict``
  (a write without one is unconditional, as a Kubernetes update without a resourceVersion is);
* ``metadata.generation`` starts at 1 and increments when anything but metadata and status changes;
* ``update`` never changes status and ``update_status`` never changes anything else;
* deleting an object with finalizers only sets ``deletionTimestamp``; it disappears when the last
  finalizer is removed, and then its dependents (objects whose owner references name it) are deleted too
  (background propagation);
* ``watch`` streams ADDED/MODIFIED/DELETED events from a resourceVersion, including writes made by other
  processes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar, cast

from capa_py.api.meta import KubeObject
from capa_py.store.sqlite_notify import ChangeSignal

T = TypeVar("T", bound=KubeObject)
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Propagation = Literal["Background", "Orphan"]


class ObjectList(list[T], Generic[T]):
    """The items of a list call and the resourceVersion to watch from afterwards."""

    def __init__(self, items: list[T], resource_version: str) -> None:
        super().__init__(items)
        self.resource_version = resource_version


@dataclass(frozen=True)
class WatchEvent(Generic[T]):
    type: EventType
    object: T
    resource_version: str


class ObjectStore(Protocol):
    @property
    def uid(self) -> str:
        """The store's identity, stable for its lifetime (across processes and reopenings); every AWS
        resource created for its objects carries it in the ``capa-py.io/store`` tag."""
        ...

    def create(self, obj: T) -> T: ...

    def get(self, kind: type[T], name: str, namespace: str | None = None) -> T: ...

    def list(
        self,
        kind: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList[T]: ...

    def update(self, obj: T) -> T: ...

    def update_status(self, obj: T) -> T: ...

    def delete(
        self,
        kind: type[T],
        name: str,
        namespace: str | None = None,
        propagation: Propagation = "Background",
        resource_version: str | None = None,
    ) -> T | None: ...

    def watch(
        self,
        kind: type[T],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent[T]]: ...

    def close(self) -> None: ...


class ChangeSequence(Protocol):
    """An optional capability: a store that can tell its latest resourceVersion cheaply (the embedded SQLite
    store reads it from one row) implements ``change_sequence``; a poller then reads nothing per kind while
    it stays the same. A store offers it by defining the method on its class: a wrapper delegating
    everything else does not pass it on unless it defines it too (it may change what its watches show)."""

    def change_sequence(self) -> str: ...


class ChangeNotification(Protocol):
    """An optional capability: a store that signals its changes (the embedded SQLite store: its commits, in
    this process and others) implements ``change_signal``; a poller waits on it instead of polling."""

    def change_signal(self) -> ChangeSignal: ...


class Transactions(Protocol):
    """An optional capability: a store whose writes in a block can be one transaction, all stored or none
    (the embedded SQLite store). Offered, like :class:`ChangeSequence`, by defining ``atomic`` on the
    store's class."""

    def atomic(self) -> AbstractContextManager[None]: ...


def atomic_of(store: object) -> Callable[[], AbstractContextManager[None]] | None:
    """The store's :class:`Transactions` block, or None when its class does not offer one."""
    if not callable(getattr(type(store), "atomic", None)):
        return None
    return cast(Transactions, store).atomic


def change_sequence_of(store: object) -> Callable[[], str] | None:
    """The store's :class:`ChangeSequence` read, or None when its class does not offer one."""
    if not callable(getattr(type(store), "change_sequence", None)):
        return None
    return cast(ChangeSequence, store).change_sequence


def change_signal_of(store: object) -> ChangeSignal | None:
    """The store's :class:`ChangeNotification` signal, or None when its class does not offer one."""
    if not callable(getattr(type(store), "change_signal", None)):
        return None
    return cast(ChangeNotification, store).change_signal()
