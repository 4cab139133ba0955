"""A wait learns of its targets from the manager's watch: store reads follow changes, not the clock.

A real SQLite store that counts what it reads and parses; a do-nothing controller, so that the only
changes are the ones the test writes (through a second store on the same file, as another process would).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from capa_py.api.aws import AWSCluster, AWSClusterSpec
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.ctrlkit.result import Result, no_requeue
from capa_py.runtime.queue import ObjectKey
from capa_py.store.protocol import ObjectList, T, WatchEvent
from capa_py.store.sqlite import SQLiteStore
from controllers.run import converge


class CountingStore(SQLiteStore):
    """Counts the reads a waiting caller makes and the objects it gets parsed."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gets = 0
        self.lists = 0
        self.parsed = 0

    def get(self, kind: type[T], name: str, namespace: str | None = None) -> T:
        self.gets += 1
        self.parsed += 1
        return super().get(kind, name, namespace)

    def list(self, kind: type[T], *args: Any, **kwargs: Any) -> ObjectList[T]:
        self.lists += 1
        found = super().list(kind, *args, **kwargs)
        self.parsed += len(found)
        return found

    def watch(self, kind: type[T], *args: Any, **kwargs: Any) -> Iterator[WatchEvent[T]]:
        for event in super().watch(kind, *args, **kwargs):
            self.parsed += 1
            yield event

    def reads(self) -> int:
        return self.gets + self.lists


class IdleController:
    """Reconciles AWSClusters by doing nothing: they stay pending."""

    name = "idle"
    kind = AWSCluster
    watched_kinds: tuple[type[KubeObject], ...] = ()

    def __init__(self) -> None:
        self.reconciled: list[ObjectKey] = []

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        self.reconciled.append(key)
        return no_requeue()


def _pending(name: str) -> AWSCluster:
    spec = AWSClusterSpec.model_validate(
        {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}}
    )
    return AWSCluster(metadata=ObjectMeta(name=name, namespace="default"), spec=spec)


def _wait(path: Path, seconds: float, writes: int = 0) -> tuple[CountingStore, int]:
    """Wait ``seconds`` for two pending AWSClusters; ``writes`` status changes to one of them are made
    by another writer while waiting. Returns the counting store and how many writes were made."""
    store = CountingStore(path)
    other = SQLiteStore(path)
    targets = [store.get(AWSCluster, name, "default") for name in ("one", "two")]
    store.gets = store.lists = store.parsed = 0
    made = 0
    lock = threading.Lock()

    def write(_: list[KubeObject | None]) -> None:
        nonlocal made
        with lock:
            if made >= writes:
                return
            made += 1
        current = other.get(AWSCluster, "one", "default")
        current.status.network.vpc_id = f"vpc-{made}"
        other.update_status(current)

    result = converge(store, [IdleController()], targets, timeout=seconds, on_tick=write)  # type: ignore[list-item]
    assert result.timed_out, "pending targets ended the wait; the test is void"
    assert not result.converged
    assert result.reconciled_keys == {ObjectKey("AWSCluster", "default", n) for n in ("one", "two")}
    other.close()
    store.close()
    return store, made


def _seed(path: Path) -> None:
    with SQLiteStore(path) as store:
        for name in ("one", "two"):
            store.create(_pending(name))


def test_a_longer_wait_without_changes_reads_no_more(tmp_path: Path) -> None:
    short, long = tmp_path / "short.db", tmp_path / "long.db"
    _seed(short)
    _seed(long)
    brief, _ = _wait(short, 0.6)
    longer, _ = _wait(long, 2.6)
    assert brief.reads() > 0, "the wait read nothing at all; the comparison is void"
    assert (longer.reads(), longer.parsed) == (brief.reads(), brief.parsed), (
        f"a wait four times as long read {longer.reads()} times and parsed {longer.parsed} objects, "
        f"against {brief.reads()} and {brief.parsed}: reads follow the clock"
    )


def test_each_change_to_a_target_is_parsed_once(tmp_path: Path) -> None:
    quiet, busy = tmp_path / "quiet.db", tmp_path / "busy.db"
    _seed(quiet)
    _seed(busy)
    baseline, _ = _wait(quiet, 2.5)
    changed, made = _wait(busy, 2.5, writes=8)
    assert made == 8, "the writes were not all made; the test is void"
    assert changed.reads() == baseline.reads(), "a change to a target was read again from the store"
    assert changed.parsed == baseline.parsed + made, (
        f"{made} changes cost {changed.parsed - baseline.parsed} parses (one each expected)"
    )
