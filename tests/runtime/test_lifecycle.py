"""The runtime Process: runnables that need no leader election start at once and stop last, in reverse;
those that need it start only once the process holds the store lease (a real one, on a SQLite store) and
stop first, with the grace period; a runnable that cannot start stops those started before it."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.api.coordination import Lease
from capa_py.runtime.leader import STORE_LEASE_NAME, STORE_LEASE_NAMESPACE, LeaderElector, LeaseTiming
from capa_py.runtime.lifecycle import Election, Process
from capa_py.runtime.runnable import Runnable, StartFailed
from capa_py.store import SQLiteStore
from tests.support.eventually import eventually

QUICK = LeaseTiming(duration=2, renew_period=0.05, renew_deadline=0.5, retry_period=0.05)
BOUND = 30.0  # a safety bound on waits for background threads, never the expected duration


class Recorded(Runnable):
    """Writes what happens to it into a shared journal."""

    def __init__(
        self, name: str, journal: list[str], leader: bool, fails: bool = False, finishes: bool = True
    ) -> None:
        self.name = name
        self.journal = journal
        self.leader = leader
        self.fails = fails
        self.finishes = finishes
        self.started = threading.Event()

    def needs_leader_election(self) -> bool:
        return self.leader

    def start(self, stop: threading.Event) -> None:
        if self.fails:
            raise StartFailed(f"{self.name} cannot start")
        self.journal.append(f"start {self.name}")
        self.started.set()

    def stop(self, grace: float) -> bool:
        self.journal.append(f"stop {self.name} ({grace:g}s)")
        return self.finishes

    def halt(self) -> None:
        self.journal.append(f"halt {self.name}")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "state.db") as opened:
        yield opened


def _run_in_thread(process: Process) -> tuple[threading.Thread, list[bool]]:
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(process.run()), daemon=True)
    thread.start()
    return thread, outcome


def test_leader_elected_runnables_wait_for_the_lease_and_the_rest_do_not(store: SQLiteStore) -> None:
    journal: list[str] = []
    said: list[str] = []
    holder = LeaderElector(store, "another", timing=QUICK)
    holder.acquire()
    serving = Recorded("server", journal, leader=False)
    controllers = Recorded("controllers", journal, leader=True)
    process = Process([serving, controllers], 7.0, said.append, said.append, Election(store, "me", QUICK))
    thread, outcome = _run_in_thread(process)
    assert serving.started.wait(BOUND)
    holder_line = f"waiting for the store lease {STORE_LEASE_NAMESPACE}/{STORE_LEASE_NAME} held by another"
    eventually(
        lambda: any(line.startswith(holder_line) for line in said), holder_line, timeout=BOUND, interval=0.02
    )
    assert not controllers.started.is_set(), "a leader-elected runnable started without the lease"
    holder.release()
    assert controllers.started.wait(BOUND)
    process.stop()
    thread.join(BOUND)
    assert outcome == [True]
    assert journal == ["start server", "start controllers", "stop controllers (7s)", "stop server (0s)"]
    assert said[-3:] == [
        f"leading: holding the store lease {STORE_LEASE_NAMESPACE}/{STORE_LEASE_NAME}",
        "stopping: finishing reconciles in progress",
        "stopped",
    ]
    lease = store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE)
    assert not lease.spec.holder_identity, "the lease was not released"


def test_a_runnable_that_cannot_start_stops_those_started_before_it(store: SQLiteStore) -> None:
    journal: list[str] = []
    runnables = [
        Recorded("endpoints", journal, leader=False),
        Recorded("webhooks", journal, leader=False),
        Recorded("hegel", journal, leader=False, fails=True),
        Recorded("controllers", journal, leader=True),
    ]
    process = Process(runnables, 1.0, journal.append, journal.append)
    with pytest.raises(StartFailed, match="hegel cannot start"):
        process.run()
    assert journal == ["start endpoints", "start webhooks", "stop webhooks (0s)", "stop endpoints (0s)"]


def test_a_runnable_unfinished_after_the_grace_period_keeps_the_lease_and_fails(store: SQLiteStore) -> None:
    journal: list[str] = []
    controllers = Recorded("controllers", journal, leader=True, finishes=False)
    process = Process([controllers], 0.5, journal.append, journal.append, Election(store, "me", QUICK))
    thread, outcome = _run_in_thread(process)
    assert controllers.started.wait(BOUND)
    process.stop()
    thread.join(BOUND)
    assert outcome == [False]
    assert "stopped" not in journal
    lease = store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE)
    assert lease.spec.holder_identity == "me", "a reconcile may still act: the lease must expire, not go"


class Interrupting(Recorded):
    """Its start is where a signal arrives: the process is still starting its runnables."""

    def start(self, stop: threading.Event) -> None:
        super().start(stop)
        os.kill(os.getpid(), signal.SIGINT)


def test_a_signal_while_the_runnables_start_stops_the_process_gracefully(store: SQLiteStore) -> None:
    """Kubernetes may stop a pod while it starts: SIGTERM (SIGINT here, whose default action raises instead
    of ending the test run) must wind the process down like any other, not end it on the spot."""
    journal: list[str] = []
    runnables = [
        Interrupting("webhooks", journal, leader=False),
        Recorded("caches", journal, leader=False),
        Recorded("controllers", journal, leader=True),
    ]
    process = Process(runnables, 1.0, journal.append, journal.append, Election(store, "me", QUICK))
    try:
        clean = process.run()
    except KeyboardInterrupt:
        pytest.fail(f"the signal was not the process's to handle; it had done {journal}")
    assert clean
    assert journal[-1] == "stopped"
    assert "stop webhooks (0s)" in journal
    assert "stop caches (0s)" in journal
