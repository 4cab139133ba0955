"""Several processes share one SQLite store file: writes are serialised, none is lost, watches see them all.

Every worker is a real process (``spawn`` start method, so nothing is inherited) that opens its own
:class:`SQLiteStore` on the same file, as separate ``capa`` commands and controllers do.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from multiprocessing.context import SpawnContext
from pathlib import Path
from typing import Any

import pytest

from capa_py.api import Cluster
from capa_py.store import Conflict, SQLiteStore, retry_on_conflict

pytestmark = pytest.mark.slow

SAFETY_TIMEOUT = 60.0


@pytest.fixture
def spawn() -> SpawnContext:
    return multiprocessing.get_context("spawn")


def run_workers(spawn: SpawnContext, target: Any, args_per_worker: list[tuple[Any, ...]]) -> None:
    workers = [spawn.Process(target=target, args=args) for args in args_per_worker]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(SAFETY_TIMEOUT)
    stuck = [w.pid for w in workers if w.is_alive()]
    for worker in workers:
        if worker.is_alive():
            worker.kill()
            worker.join()
    assert not stuck, f"workers {stuck} did not finish within {SAFETY_TIMEOUT}s"
    failed = {w.pid: w.exitcode for w in workers if w.exitcode != 0}
    assert not failed, f"workers exited with errors (pid: exit code): {failed}"


# -- the workers (module-level so that spawned processes can import them) ------------------------------


def write_then_update(path: str, name: str) -> None:
    with SQLiteStore(path) as store:
        created = store.create(Cluster.model_validate({"metadata": {"name": name}}))
        created.metadata.labels["written-by"] = "child"
        store.update(created)


def race_update(path: str, resource_version: str, label: str, barrier: Any, outcomes: Any) -> None:
    with SQLiteStore(path) as store:
        stale = store.get(Cluster, "contended")
        stale.metadata.resource_version = resource_version
        stale.metadata.labels["winner"] = label
        barrier.wait(SAFETY_TIMEOUT)
        try:
            store.update(stale)
        except Conflict:
            outcomes.put((label, "conflict"))
        else:
            outcomes.put((label, "won"))


def increment_counter(path: str, times: int, barrier: Any) -> None:
    def bump(cluster: Cluster) -> None:
        annotations = cluster.metadata.annotations
        annotations["counter"] = str(int(annotations.get("counter", "0")) + 1)

    with SQLiteStore(path) as store:
        barrier.wait(SAFETY_TIMEOUT)
        for _ in range(times):
            current = store.get(Cluster, "counter")
            retry_on_conflict(store, current, bump, attempts=10_000)


def open_fresh_stores(paths: list[str], barrier: Any) -> None:
    """Open each new store at the same moment as the other workers (a round per path)."""
    for path in paths:
        barrier.wait(SAFETY_TIMEOUT)
        SQLiteStore(path).close()


# -- the tests -----------------------------------------------------------------------------------------


def test_the_store_runs_in_wal_mode(store: SQLiteStore, store_path: Path) -> None:
    store.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    probe = sqlite3.connect(store_path)
    try:
        mode = probe.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        probe.close()
    assert mode == "wal", f"the store file must be in WAL mode so readers never block writers, got {mode}"


def test_a_watch_in_one_process_sees_writes_made_by_another(
    store: SQLiteStore, store_path: Path, spawn: SpawnContext
) -> None:
    store.create(Cluster.model_validate({"metadata": {"name": "parent"}}))
    start = store.current_resource_version()

    run_workers(spawn, write_then_update, [(str(store_path), "from-child")])

    seen = [
        (event.type, event.object.name, event.object.metadata.labels.get("written-by"))
        for event in store.watch(Cluster, resource_version=start, timeout=0)
    ]
    assert seen == [("ADDED", "from-child", None), ("MODIFIED", "from-child", "child")], (
        "the parent's watch must stream the child's create and update, in order"
    )


def test_a_live_watch_receives_writes_from_another_process(
    store: SQLiteStore, store_path: Path, spawn: SpawnContext
) -> None:
    store.create(Cluster.model_validate({"metadata": {"name": "parent"}}))
    events = store.watch(Cluster, resource_version=store.current_resource_version(), timeout=SAFETY_TIMEOUT)
    try:
        child = spawn.Process(target=write_then_update, args=(str(store_path), "live"))
        child.start()
        try:
            received = [next(events, None), next(events, None)]
        finally:
            child.join(SAFETY_TIMEOUT)
        assert None not in received, f"the watch timed out waiting for the child's writes: {received}"
        assert [(e.type, e.object.name) for e in received if e] == [("ADDED", "live"), ("MODIFIED", "live")]
        assert child.exitcode == 0
    finally:
        events.close()


def test_two_processes_updating_from_the_same_version_one_wins_one_conflicts(
    store: SQLiteStore, store_path: Path, spawn: SpawnContext
) -> None:
    base = store.create(Cluster.model_validate({"metadata": {"name": "contended"}}))
    barrier = spawn.Barrier(2)
    outcomes = spawn.Queue()

    run_workers(
        spawn,
        race_update,
        [(str(store_path), base.metadata.resource_version, label, barrier, outcomes) for label in ("a", "b")],
    )

    results = dict(outcomes.get(timeout=SAFETY_TIMEOUT) for _ in range(2))
    assert sorted(results.values()) == ["conflict", "won"], f"expected one winner and one Conflict: {results}"
    winner = next(label for label, outcome in results.items() if outcome == "won")
    stored = store.get(Cluster, "contended")
    assert stored.metadata.labels["winner"] == winner, "the stored object must be the winner's write"
    assert int(stored.metadata.resource_version or 0) == int(base.metadata.resource_version or 0) + 1, (
        "exactly one write must have happened"
    )


def test_concurrent_read_modify_write_loops_lose_no_increment(
    store: SQLiteStore, store_path: Path, spawn: SpawnContext
) -> None:
    processes, increments = 4, 25
    store.create(Cluster.model_validate({"metadata": {"name": "counter"}}))
    barrier = spawn.Barrier(processes)

    run_workers(spawn, increment_counter, [(str(store_path), increments, barrier)] * processes)

    counter = store.get(Cluster, "counter").metadata.annotations.get("counter")
    assert counter == str(processes * increments), (
        f"{processes} processes x {increments} increments must give {processes * increments}, got {counter}"
    )


def test_processes_creating_the_same_new_store_at_once_all_open_it(
    tmp_path: Path, spawn: SpawnContext
) -> None:
    # Two `capa apply` on a state file that does not exist yet: each creates it and switches it to WAL.
    # SQLite refuses a journal-mode switch it cannot make at once ("database is locked") without waiting
    # for the busy timeout; before the switch was retried, about one open in twenty failed here.
    processes, rounds = 4, 40
    paths = [str(tmp_path / f"round-{n}" / "state.db") for n in range(rounds)]
    barrier = spawn.Barrier(processes)

    run_workers(spawn, open_fresh_stores, [(paths, barrier)] * processes)

    for path in paths:
        with SQLiteStore(path, create=False) as store:
            assert list(store.list(Cluster)) == []
