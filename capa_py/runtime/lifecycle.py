"""The process lifecycle: runnables, leader election, signals and graceful shutdown in one place.

:class:`Process` is what ``capa controller`` runs (controller-runtime's manager, reduced): it

1. starts every runnable that needs no leader election (the metrics and probe endpoints, the servers, the
   caches), in order; one that cannot start stops those started and :class:`StartFailed` propagates;
2. with an :class:`Election`, waits for the store lease (saying who holds it), then renews it on a thread;
3. starts the runnables that need leadership (the controllers);
4. runs until SIGTERM or SIGINT (handled when it runs on the main thread, where Python delivers signals)
   or :meth:`Process.stop`, then stops the leader-elected runnables with the grace period
   (``--graceful-shutdown-timeout``), releases the lease when they all finished in time (otherwise lets it
   expire, as a reconcile may still be acting) and stops the rest in reverse order.

A leader that cannot renew stops every leader-elected runnable's intake at once and gets until another
process could take the lease over (its duration less the renew deadline) to stop; a process still running
then exits at once, so two processes never reconcile one store together.

It says what it does through two callbacks (``say`` for progress, ``complain`` for errors) and returns
whether it ended cleanly; the command decides how that reads and what exit code it is.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from capa_py.api.coordination import Lease
from capa_py.logging import get_logger
from capa_py.runtime.leader import (
    STORE_LEASE_NAME,
    STORE_LEASE_NAMESPACE,
    LeaderElector,
    LeaseHeld,
    LeaseTiming,
    describe_holder,
)
from capa_py.runtime.metrics import ControllerMetrics
from capa_py.runtime.runnable import Runnable, Say, StartFailed
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore

_log = get_logger("runtime.lifecycle")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
POLL = 0.5
LOST_LEASE_EXIT_CODE = 1

__all__ = ["Election", "Process", "StartFailed"]


@dataclass(frozen=True)
class Election:
    """The store lease a process must hold to run its leader-elected runnables."""

    store: ObjectStore
    identity: str
    timing: LeaseTiming


class _LostLeaseDeadline:
    """After the lease is lost, reconciles get until another process may take it over to stop; a process
    still running then exits at once, so two reconcilers never act on one store."""

    def __init__(self, seconds: float, halt: Callable[[], None], complain: Say, exit_code: int) -> None:
        self.seconds = seconds
        self.halt = halt
        self.complain = complain
        self.exit_code = exit_code
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        self.halt()  # no reconcile starts from now on, and the process is stopping
        self._timer = threading.Timer(self.seconds, self._exit_now)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _exit_now(self) -> None:
        self.complain("lost the store lease; reconciles did not stop in time")
        sys.stderr.flush()
        os._exit(self.exit_code)


class Process:
    """Runs ``runnables`` until told to stop; see the module's description."""

    def __init__(
        self,
        runnables: Sequence[Runnable],
        grace: float,
        say: Say,
        complain: Say,
        election: Election | None = None,
        metrics: ControllerMetrics | None = None,
        lost_lease_exit_code: int = LOST_LEASE_EXIT_CODE,
    ) -> None:
        self.runnables = list(runnables)
        self.grace = grace
        self.say = say
        self.complain = complain
        self.election = election
        self.metrics = metrics
        self.lost_lease_exit_code = lost_lease_exit_code
        self.stopping = threading.Event()
        """Set by SIGTERM, SIGINT, :meth:`stop` or a lost lease: the process winds down."""

    @property
    def lease(self) -> str:
        return f"{STORE_LEASE_NAMESPACE}/{STORE_LEASE_NAME}"

    def stop(self) -> None:
        """Wind down as on SIGTERM; safe from any thread."""
        self.stopping.set()

    def _leading(self, leading: bool) -> None:
        if self.metrics is not None:
            self.metrics.leading(STORE_LEASE_NAME, leading)

    def run(self) -> bool:
        """Run until stopped; True when everything stopped cleanly (and the lease, if held, was released).

        :class:`StartFailed` when a runnable cannot start (after stopping those already started)."""
        always = [r for r in self.runnables if not r.needs_leader_election()]
        elected = [r for r in self.runnables if r.needs_leader_election()]
        started: list[Runnable] = []
        previous: dict[signal.Signals, Any] = {}
        lost: _LostLeaseDeadline | None = None
        clean = True
        # Before anything starts: a signal while the runnables start winds the process down like any other.
        if threading.current_thread() is threading.main_thread():  # where Python handles signals
            previous = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS}
        try:
            for runnable in always:
                runnable.start(self.stopping)
                started.append(runnable)
            elector: LeaderElector | None = None
            if self.election is not None:
                timing = self.election.timing
                lost = _LostLeaseDeadline(
                    timing.duration - timing.renew_deadline,
                    lambda: self._halt(elected),
                    self.complain,
                    self.lost_lease_exit_code,
                )
                elector, clean = self._elect(self.election, lost)
            running = self._start_elected(elected)
            while not self.stopping.wait(POLL):
                pass
            self.say("stopping: finishing reconciles in progress")
            finished = True
            for runnable in reversed(running):  # every one is stopped, whether or not another finished
                finished = runnable.stop(self.grace) and finished
            clean = clean and finished
            if elector is not None:
                clean = self._step_down(elector, finished) and clean
        finally:
            if lost is not None:
                lost.cancel()
            for runnable in reversed(started):
                runnable.stop(0.0)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if clean:
            self.say("stopped")
        return clean

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping.set()

    def _halt(self, elected: Sequence[Runnable]) -> None:
        for runnable in elected:
            runnable.halt()
        self.stopping.set()

    def _start_elected(self, elected: Sequence[Runnable]) -> list[Runnable]:
        running: list[Runnable] = []
        for runnable in elected:
            if self.stopping.is_set():
                break
            runnable.start(self.stopping)
            running.append(runnable)
        return running

    def _elect(self, election: Election, lost: _LostLeaseDeadline) -> tuple[LeaderElector | None, bool]:
        """Wait for the lease; the elector holding it (None when stopped first or failing) and whether
        all is well."""
        self._leading(False)
        elector = LeaderElector(election.store, election.identity, timing=election.timing, on_lost=lost.start)

        def waiting(held: Lease) -> None:
            self.say(f"waiting for the store lease {self.lease} held by {describe_holder(held)}")

        try:
            elector.acquire(wait=True, on_wait=waiting, stop=self.stopping)
        except LeaseHeld:
            return None, True  # stopped while waiting: nothing was reconciled, nothing to release
        except StoreError as exc:
            self.complain(f"cannot take the store lease: {exc}")
            self.stopping.set()
            return None, False
        elector.start_renewing()
        self._leading(True)
        self.say(f"leading: holding the store lease {self.lease}")
        return elector, True

    def _step_down(self, elector: LeaderElector, finished: bool) -> bool:
        """Release the lease when every leader-elected runnable finished; False when it was lost."""
        clean = True
        if elector.lost.is_set():
            self.complain(f"{elector.lost_message()}; stopped reconciling")
            clean = False
        elif finished:
            elector.release()
        else:
            # A reconcile may still be acting: the lease expires after its duration instead, once this
            # process (and with it that reconcile) has ended.
            elector.stop_renewing()
        self._leading(False)
        return clean
