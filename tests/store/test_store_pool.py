"""The store's threads share a small pool of connections to its file: however many threads read and write,
no more than ``POOL_SIZE`` connections are opened, nothing is lost, and a transaction keeps its connection
for its nested writes while other threads wait for theirs."""

from __future__ import annotations

import threading
from pathlib import Path

from capa_py.api import Cluster
from capa_py.store import SQLiteStore
from capa_py.store.sqlite_connections import POOL_SIZE

THREADS = 24
WRITES = 10


def _cluster(name: str) -> Cluster:
    return Cluster.model_validate({"metadata": {"name": name}})


def test_many_threads_share_a_few_connections_and_every_write_lands(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    with SQLiteStore(tmp_path / "state.db") as store:
        start = threading.Barrier(THREADS)

        def work(i: int) -> None:
            try:
                start.wait(30)
                for n in range(WRITES):
                    store.create(_cluster(f"t{i}-{n}"))
                    store.list(Cluster)
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert errors == []
        assert len(store.list(Cluster)) == THREADS * WRITES
        assert 1 <= len(store._connections) <= POOL_SIZE


def test_an_atomic_block_keeps_its_connection_while_the_pool_is_busy(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "state.db") as store:
        store.create(_cluster("seed"))
        held = threading.Event()
        release = threading.Event()
        done: list[str] = []

        def hold_one() -> None:
            with store._lease():
                held.set()
                release.wait(30)

        holders = [threading.Thread(target=hold_one) for _ in range(POOL_SIZE - 1)]
        for holder in holders:
            held.clear()
            holder.start()
            assert held.wait(30)
        # One connection left: this thread's atomic block takes it and keeps it for each of its writes.
        with store.atomic():
            for n in range(3):
                store.create(_cluster(f"atomic-{n}"))
            reader = threading.Thread(target=lambda: done.append(str(len(store.list(Cluster)))))
            reader.start()
            reader.join(0.5)
            assert reader.is_alive(), "the pool is exhausted: another thread waits for a connection"
        reader.join(30)
        assert done == ["4"], "the waiting reader ran once the block returned its connection"
        release.set()
        for holder in holders:
            holder.join(30)
        assert len(store._connections) == POOL_SIZE
