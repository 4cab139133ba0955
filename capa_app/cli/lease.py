"""One reconciler per store: the commands that run controllers hold the store's lease while they do.

``capa apply`` and ``capa delete --wait`` store (or mark) their objects first, then take the Lease
``capa-py-system/capa-py-controller`` before the controllers start, renew it while they run and release it
when they stop. A second such command on the same store waits for it, saying once who holds it, or with
``--no-wait-for-lock`` exits 1 naming the holder. A command that loses the lease stops reconciling and
exits 1 (at the latest when another process could take the lease over: a run that has not stopped by
then ends the process). ``CAPA_LEASE_DURATION`` (whole seconds) shortens or lengthens how long a killed
holder blocks others.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from capa_app.cli.common import EXIT_FAILED, EXIT_INVALID, fail, stderr
from capa_py.api.coordination import Lease
from capa_py.logging import get_logger
from capa_py.runtime.leader import (
    LeaderElector,
    LeaseHeld,
    LeaseLost,
    LeaseTiming,
    describe_holder,
    holder_identity,
)
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore

_log = get_logger("cli.lease")


def _announce(lease: Lease) -> None:
    message = f"waiting for the store lease held by {describe_holder(lease)}"
    stderr.print(message, markup=False, highlight=False)


class _StopDeadline:
    """After the lease is lost, the controllers get until another process may take it over to stop;
    a run still going then ends the process, so no two reconcilers ever act on one store."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.elector: LeaderElector | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._timer = threading.Timer(self.seconds, self._stop_now)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()

    def _stop_now(self) -> None:
        with self._lock:
            if self._closed:
                return
        _log.warning("the controllers did not stop after the lease was lost; exiting now")
        message = self.elector.lost_message() if self.elector is not None else "lost the store lease"
        stderr.print(f"error: {message}; stopped reconciling", markup=False, highlight=False)
        sys.stderr.flush()
        os._exit(EXIT_FAILED)


@contextmanager
def store_lease(
    store: ObjectStore, command: str, wait: bool = True, timeout: float | None = None
) -> Iterator[LeaderElector]:
    """Hold the store's lease around running controllers; exit 1 when it is held (and not waited for,
    or not freed within ``timeout``) or when it is lost. Wrap the run's tick in ``elector.guard``."""
    try:
        timing = LeaseTiming.from_env()
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    deadline = _StopDeadline(timing.duration - timing.renew_deadline)
    elector = LeaderElector(store, holder_identity(command), timing=timing, on_lost=deadline.start)
    deadline.elector = elector
    try:
        elector.acquire(wait=wait, timeout=timeout, on_wait=_announce)
    except LeaseHeld as exc:
        fail(str(exc))
    except StoreError as exc:
        fail(f"cannot take the store lease: {exc}")
    elector.start_renewing()
    try:
        yield elector
    except LeaseLost as exc:
        fail(f"{exc}; stopped reconciling")
    finally:
        deadline.cancel()
        elector.release()
