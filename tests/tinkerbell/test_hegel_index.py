"""Hegel's index of source address to Hardware, over a real SQLite store behind a wrapper that counts what
reaches the store (and can make it fail): changes, deletes, address moves and ambiguity are answered as
soon as their event is, and a request lists nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.tinkerbell import Hardware, NetworkInterface
from capa_py.runtime.informer import Informer
from capa_py.runtime.servers import HegelServer
from capa_py.store import SQLiteStore
from capa_py.store.errors import Expired, Unavailable
from capa_py.store.protocol import ObjectList, WatchEvent
from capa_py.tinkerbell.hegel import RunningHegel, start_in_thread
from capa_py.tinkerbell.hegel_index import Ambiguous, HardwareIndex, parse_address
from tests.tinkerbell.test_hegel import call, hardware

T = Any


class CountingStore:
    """Every call goes to the SQLite store underneath; lists and watches are counted; ``failing`` makes
    every read raise :class:`Unavailable`; ``expire_next_watch`` makes the next watch answer ``Expired``."""

    def __init__(self, store: SQLiteStore) -> None:
        self.inner = store
        self.lists = 0
        self.watches = 0
        self.failing = False
        self.expire_next_watch = False

    def _check(self) -> None:
        if self.failing:
            raise Unavailable("test", "the store is failing")

    @property
    def uid(self) -> str:
        return self.inner.uid

    def create(self, obj: T) -> T:
        return self.inner.create(obj)

    def get(self, kind: type[T], name: str, namespace: str | None = None) -> T:
        self._check()
        return self.inner.get(kind, name, namespace)

    def list(self, kind: type[T], *args: Any, **kwargs: Any) -> ObjectList[T]:
        self.lists += 1
        self._check()
        return self.inner.list(kind, *args, **kwargs)

    def update(self, obj: T) -> T:
        return self.inner.update(obj)

    def update_status(self, obj: T) -> T:
        return self.inner.update_status(obj)

    def delete(self, kind: type[T], *args: Any, **kwargs: Any) -> Any:
        return self.inner.delete(kind, *args, **kwargs)

    def watch(self, kind: type[T], *args: Any, **kwargs: Any) -> Iterator[WatchEvent[T]]:
        self.watches += 1
        self._check()
        if self.expire_next_watch:
            self.expire_next_watch = False
            raise Expired("compacted (test)")
        return self.inner.watch(kind, *args, **kwargs)

    def close(self) -> None:
        self.inner.close()


class SequencedStore(CountingStore):
    """Also tells its latest resourceVersion cheaply, as the SQLite store does (counted too)."""

    heads = 0

    def change_sequence(self) -> str:
        self.heads += 1
        self._check()
        return self.inner.change_sequence()


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "state.db") as opened:
        yield opened


def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for an event the index takes from a watch (no duration is asserted)."""
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def status(running: RunningHegel, source: str, path: str = "meta-data/instance-id") -> tuple[int, bytes]:
    code, body, _ = call(f"{running.url}/2009-04-04/{path}", source)
    return code, body


def moved(store: Any, name: str, ip: str) -> None:
    item = store.get(Hardware, name, "default")
    (interface,) = item.spec.network_interfaces.values()
    assert interface.dhcp is not None
    interface.dhcp.ip = ip
    store.update(item)


@pytest.fixture
def served(sqlite: SQLiteStore) -> Iterator[tuple[SequencedStore, RunningHegel]]:
    store = SequencedStore(sqlite)
    running = start_in_thread(store, "127.0.0.1", 0)  # type: ignore[arg-type]
    yield store, running
    running.stop()


def test_requests_list_nothing_and_see_every_change_at_once(
    served: tuple[SequencedStore, RunningHegel],
) -> None:
    store, running = served
    store.create(hardware("a", "127.0.0.2"))
    store.create(hardware("b", "127.0.0.3"))
    assert status(running, "127.0.0.2") == (200, b"a")
    lists = store.lists
    assert lists == 1  # the index's own list at start, before any request

    # An address change: the old address stops answering, the new one answers, with no list.
    moved(store, "a", "127.0.0.4")
    assert status(running, "127.0.0.2")[0] == 404
    assert status(running, "127.0.0.4") == (200, b"a")
    # An address moving from one Hardware to another.
    moved(store, "b", "127.0.0.2")
    assert status(running, "127.0.0.2") == (200, b"b")
    assert status(running, "127.0.0.3")[0] == 404
    # A delete.
    store.delete(Hardware, "b", "default")
    assert status(running, "127.0.0.2")[0] == 404
    for _ in range(20):
        assert status(running, "127.0.0.4") == (200, b"a")
    assert store.lists == lists, "a request listed the Hardware"


def test_an_address_claimed_twice_answers_nobody_until_one_claim_goes(
    served: tuple[SequencedStore, RunningHegel],
) -> None:
    store, running = served
    store.create(hardware("first", "127.0.0.5"))
    assert status(running, "127.0.0.5") == (200, b"first")
    store.create(hardware("second", "127.0.0.5"))
    assert status(running, "127.0.0.5")[0] == 404
    moved(store, "second", "127.0.0.6")
    assert status(running, "127.0.0.5") == (200, b"first")
    assert status(running, "127.0.0.6") == (200, b"second")
    moved(store, "first", "127.0.0.6")
    assert status(running, "127.0.0.6")[0] == 404
    store.delete(Hardware, "second", "default")
    assert status(running, "127.0.0.6") == (200, b"first")
    assert store.lists == 1


def test_the_index_of_a_store_without_a_cheap_head_follows_its_watch(sqlite: SQLiteStore) -> None:
    """No catch-up per request: a change answers once the watch has delivered it."""
    store = CountingStore(sqlite)
    store.create(hardware("a", "127.0.0.2"))
    running = start_in_thread(store, "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        assert status(running, "127.0.0.2") == (200, b"a")
        moved(store, "a", "127.0.0.3")
        until(lambda: status(running, "127.0.0.3") == (200, b"a"), "the move")
        assert status(running, "127.0.0.2")[0] == 404
        store.delete(Hardware, "a", "default")
        until(lambda: status(running, "127.0.0.3")[0] == 404, "the delete")
        assert store.lists == 1
    finally:
        running.stop()


def test_an_expired_watch_lists_again_and_misses_nothing(sqlite: SQLiteStore) -> None:
    store = CountingStore(sqlite)
    index = HardwareIndex(retry_delay=0.05)
    stop = threading.Event()
    store.expire_next_watch = True
    store.create(hardware("a", "127.0.0.2"))
    index.start(store, stop)  # type: ignore[arg-type]
    try:
        until(lambda: store.lists == 2, "the list after Expired")
        store.create(hardware("b", "127.0.0.3"))
        until(lambda: len(index) == 2, "b")
        match = index.lookup(parse_address("127.0.0.3"))  # type: ignore[arg-type]
        assert match is not None
        assert match.hardware.name == "b"
    finally:
        stop.set()
        index.join()


def test_a_store_failing_after_start_is_503_until_it_can_be_read_again(
    served: tuple[SequencedStore, RunningHegel],
) -> None:
    store, running = served
    store.create(hardware("a", "127.0.0.2"))
    assert status(running, "127.0.0.2") == (200, b"a")
    store.failing = True
    assert status(running, "127.0.0.2")[0] == 503
    store.failing = False
    until(lambda: status(running, "127.0.0.2") == (200, b"a"), "recovery")


def test_the_index_as_a_handler_of_an_informer(sqlite: SQLiteStore) -> None:
    """``capa controller``'s way: the informer's list is the only one, requests read none."""
    store = SequencedStore(sqlite)
    store.create(hardware("a", "127.0.0.2", hostname="node-a"))
    informer = Informer(store, Hardware)  # type: ignore[arg-type]
    index = HardwareIndex()
    index.attach(informer, store)  # type: ignore[arg-type]
    stop = threading.Event()
    informer.start(stop)
    running = start_in_thread(store, "127.0.0.1", 0, index=index)  # type: ignore[arg-type]
    try:
        assert status(running, "127.0.0.2", "meta-data/hostname") == (200, b"node-a")
        moved(store, "a", "127.0.0.3")
        assert status(running, "127.0.0.3") == (200, b"a")  # caught up at once (the store's head moved)
        assert status(running, "127.0.0.2")[0] == 404
        store.create(hardware("b", "127.0.0.3"))
        assert status(running, "127.0.0.3")[0] == 404
        store.delete(Hardware, "a", "default")
        assert status(running, "127.0.0.3") == (200, b"b")
        until(lambda: len(informer) == 1, "the informer's delete")
        assert store.lists == 1  # the informer's
        assert len(index) == 1
    finally:
        running.stop()
        stop.set()
        informer.join()


def test_an_informer_scoped_to_a_namespace_is_refused(sqlite: SQLiteStore) -> None:
    with pytest.raises(ValueError, match="every Hardware"):
        HardwareIndex().attach(Informer(sqlite, Hardware, namespace="lab"))


def event(kind: str, item: Hardware, version: int) -> WatchEvent[Hardware]:
    item = item.model_copy(deep=True)
    item.metadata.resource_version = str(version)
    return WatchEvent(kind, item, str(version))  # type: ignore[arg-type]


def test_events_older_than_what_the_index_holds_change_nothing() -> None:
    index = HardwareIndex()
    address = parse_address("10.0.0.1")
    assert address is not None
    first = hardware("a", "10.0.0.1")
    index.replace([], "1")
    index.apply(event("ADDED", first, 5))
    index.apply(event("DELETED", first, 7))
    index.apply(event("MODIFIED", first, 6))  # from a slower feed: older than the deletion
    assert index.lookup(address) is None
    index.apply(event("ADDED", first, 9))  # created again
    assert index.lookup(address) is not None
    # A list older than an event the index took does not undo it.
    index.replace([], "8")
    assert index.lookup(address) is not None
    index.replace([], "10")
    assert index.lookup(address) is None


def test_an_interface_of_two_addresses_and_ambiguity_per_address() -> None:
    index = HardwareIndex()
    two = hardware("two", "10.0.0.1", hostname="nic-a")
    two.spec.network_interfaces["02:00:00:00:01:0b"] = NetworkInterface.model_validate(
        {"dhcp": {"ip": "10.0.0.2", "netmask": "255.0.0.0", "hostname": "nic-b"}}
    )
    other = hardware("other", "10.0.0.2")
    index.replace([two, other], "3")
    first, second = parse_address("10.0.0.1"), parse_address("10.0.0.2")
    assert first is not None
    assert second is not None
    match = index.lookup(first)
    assert match is not None
    assert (match.hardware.name, match.hostname) == ("two", "nic-a")
    with pytest.raises(Ambiguous, match="default/other, default/two"):
        index.lookup(second)


def test_the_controllers_hegel_server_keeps_its_index_by_the_process_informer(sqlite: SQLiteStore) -> None:
    """The runnable ``capa controller --hegel-port`` starts, given the process's Hardware informer: no
    list of its own, every change answered."""
    store = SequencedStore(sqlite)
    store.create(hardware("a", "127.0.0.2"))
    informer = Informer(store, Hardware)  # type: ignore[arg-type]
    lines: list[str] = []
    server = HegelServer(store, "127.0.0.1", 0, (), lines.append, informer)  # type: ignore[arg-type]
    stop = threading.Event()
    server.start(stop)  # before the informer, as the process starts its servers before its caches
    informer.start(stop)
    try:
        assert server.running is not None
        assert lines == [f"hegel: {server.running.url}"]
        assert status(server.running, "127.0.0.2") == (200, b"a")
        store.delete(Hardware, "a", "default")
        assert status(server.running, "127.0.0.2")[0] == 404
        assert store.lists == 1
    finally:
        server.stop(1.0)
        stop.set()
        informer.join()
