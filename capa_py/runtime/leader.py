"""Leader election over the object store: one holder of a ``coordination.k8s.io/v1`` Lease at a time.

The mechanism is client-go's ``leaderelection`` reduced to what the store protocol gives every
implementation (SQLite file or Kubernetes API): a candidate reads the Lease and

* creates it when there is none (of two creators, the store lets one win: ``AlreadyExists``);
* takes it over when it was released (empty ``holderIdentity``) or its holder stopped renewing
  (``renewTime + leaseDurationSeconds`` has passed), counting the transition;
* renews it when it already holds it.

Every write carries the ``resourceVersion`` it read, so of two candidates racing for one record exactly one
write lands and the other gets ``Conflict``: it lost, and looks again later. While held, a background
thread renews every ``renew_period``; when renewals keep failing for ``renew_deadline`` (shorter than the
duration, so the holder gives up before anyone else may take over) or the record names someone else, the
lease is *lost*: :attr:`LeaderElector.lost` is set and the work it guards must stop
(:meth:`LeaderElector.guard`). On a clean exit the holder releases the lease (clears ``holderIdentity``), so
a waiting candidate, which watches the record, takes it at once; a holder killed outright keeps it until
its duration passes, after which crash recovery proceeds as usual.

Expiry is judged on the wall clock against the holder's ``renewTime``; candidates and holders of one store
are expected to share a clock (one machine for the SQLite store, NTP-synchronised nodes for a cluster).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import ParamSpec, TypeVar

from capa_py.api.coordination import Lease, LeaseSpec, now_micro
from capa_py.api.meta import ObjectMeta
from capa_py.logging import get_logger
from capa_py.runtime.lease_terms import (
    LEASE_DURATION_ENV,
    STORE_LEASE_NAME,
    STORE_LEASE_NAMESPACE,
    LeaseHeld,
    LeaseLost,
    LeaseTiming,
    describe_holder,
    holder_identity,
)
from capa_py.store.errors import AlreadyExists, Conflict, NotFound, StoreError
from capa_py.store.protocol import ObjectStore

_log = get_logger("runtime.leader")

__all__ = [
    "LEASE_DURATION_ENV",
    "STORE_LEASE_NAME",
    "STORE_LEASE_NAMESPACE",
    "LeaderElector",
    "LeaseHeld",
    "LeaseLost",
    "LeaseTiming",
    "describe_holder",
    "holder_identity",
    "leading",
]

P = ParamSpec("P")
R = TypeVar("R")


class LeaderElector:
    """Acquires, renews and releases one Lease for one identity."""

    def __init__(
        self,
        store: ObjectStore,
        identity: str,
        namespace: str = STORE_LEASE_NAMESPACE,
        name: str = STORE_LEASE_NAME,
        timing: LeaseTiming | None = None,
        clock: Callable[[], datetime] = now_micro,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.identity = identity
        self.namespace = namespace
        self.name = name
        self.timing = timing or LeaseTiming()
        self.clock = clock
        self.on_lost = on_lost
        """Called once, from the renewing thread, when the lease is lost."""
        self.observed: Lease | None = None
        """The record as last read or written."""
        self.lost = threading.Event()
        """Set once the lease is lost while held."""
        self.lost_to: str = ""
        self._held = False
        self._stop_renewing = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._held and not self.lost.is_set()

    # -- one attempt --------------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One attempt: create, take over or renew the lease. True when this identity holds it after."""
        now = self.clock()
        try:
            current = self.store.get(Lease, self.name, self.namespace)
        except NotFound:
            return self._create(now)
        self.observed = current
        ours = current.holder == self.identity
        if current.holder and not ours and not current.expired(now):
            return False
        spec = LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.timing.duration,
            acquire_time=current.spec.acquire_time if ours else now,
            renew_time=now,
            lease_transitions=(current.spec.lease_transitions or 0) + (0 if ours else 1),
        )
        candidate = current.model_copy(update={"spec": spec})
        try:
            self.observed = self.store.update(candidate)
        except (Conflict, NotFound):
            # Someone else wrote the record since we read it: they won this round.
            return False
        if not ours:
            _log.info(
                "took over the lease",
                lease=f"{self.namespace}/{self.name}",
                previous_holder=current.holder or None,
                transitions=spec.lease_transitions,
            )
        return True

    def _create(self, now: datetime) -> bool:
        lease = Lease(
            metadata=ObjectMeta(name=self.name, namespace=self.namespace),
            spec=LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self.timing.duration,
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )
        try:
            self.observed = self.store.create(lease)
        except AlreadyExists:
            self.observed = None
            return False
        return True

    # -- acquiring ----------------------------------------------------------------------------------
    def acquire(
        self,
        wait: bool = True,
        timeout: float | None = None,
        on_wait: Callable[[Lease], None] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        """Take the lease, waiting for it while another holds it (unless ``wait`` is False).

        ``on_wait`` is called once per holder waited for. Raises :class:`LeaseHeld` when not waiting, when
        ``timeout`` seconds pass or when ``stop`` is set.
        """
        started = time.monotonic()
        announced: set[str] = set()
        while True:
            if self.try_acquire_or_renew():
                self._held = True
                self.lost.clear()
                _log.info("acquired the lease", lease=f"{self.namespace}/{self.name}")
                return
            observed = self.observed
            if observed is None or not observed.holder or observed.expired(self.clock()):
                # Free when we looked, yet another candidate wrote first: read who it was.
                continue
            if not wait:
                raise LeaseHeld(observed, self.clock())
            waited = time.monotonic() - started
            if (timeout is not None and waited >= timeout) or (stop is not None and stop.is_set()):
                raise LeaseHeld(observed, self.clock(), waited)
            if observed.holder not in announced:
                announced.add(observed.holder)
                if on_wait is not None:
                    on_wait(observed)
            delay = self._until_expiry(observed)
            if timeout is not None:
                delay = min(delay, max(0.0, timeout - waited))
            self._wait_for_change(observed, delay, stop)

    def _until_expiry(self, lease: Lease) -> float:
        """How long to wait before the next attempt: the retry period, or less when expiry comes sooner."""
        expires = lease.expires_at()
        if expires is None:
            return self.timing.retry_period
        left = (expires - self.clock()).total_seconds()
        return max(0.01, min(self.timing.retry_period, left + 0.01))

    def _wait_for_change(self, lease: Lease, delay: float, stop: threading.Event | None) -> None:
        """Sleep up to ``delay``, waking early when the record changes (a release, a new holder)."""
        version = lease.metadata.resource_version
        if not version:
            time.sleep(delay)
            return
        try:
            for event in self.store.watch(
                Lease, namespace=self.namespace, resource_version=version, timeout=delay, stop=stop
            ):
                if event.object.name == self.name:
                    return
        except StoreError as exc:
            _log.debug("watching the lease failed; polling", error=str(exc))
            time.sleep(delay)

    # -- holding ------------------------------------------------------------------------------------
    def start_renewing(self) -> None:
        """Renew in a background thread until :meth:`release` (or until the lease is lost)."""
        if not self._held:
            raise RuntimeError("start_renewing needs the lease held: call acquire first")
        self._stop_renewing.clear()
        self._renewer = threading.Thread(target=self._renew_loop, name="capa-lease-renewer", daemon=True)
        self._renewer.start()

    def _renew_loop(self) -> None:
        last_renewed = time.monotonic()
        delay = self.timing.renew_period
        while not self._stop_renewing.wait(delay):
            try:
                renewed = self.try_acquire_or_renew()
            except Exception as exc:  # a store error must not kill the renewer silently
                _log.warning("renewing the lease failed", error=str(exc))
                renewed = False
            if self._stop_renewing.is_set():
                return
            if renewed:
                last_renewed = time.monotonic()
                delay = self.timing.renew_period
                continue
            holder = self.observed.holder if self.observed is not None else ""
            if holder and holder != self.identity:
                self._lose(f"the lease is held by {holder} now")
                return
            if time.monotonic() - last_renewed >= self.timing.renew_deadline:
                self._lose(f"no renewal succeeded for {self.timing.renew_deadline:g}s")
                return
            delay = self.timing.retry_period

    def _lose(self, why: str) -> None:
        self.lost_to = self.observed.holder if self.observed is not None else ""
        _log.warning("lost the lease", lease=f"{self.namespace}/{self.name}", reason=why)
        self.lost.set()
        if self.on_lost is not None:
            self.on_lost()

    def lost_message(self) -> str:
        now_held_by = f" (held by {self.lost_to} now)" if self.lost_to not in ("", self.identity) else ""
        return f"lost the store lease {self.namespace}/{self.name}{now_held_by}"

    def check(self) -> None:
        """Raise :class:`LeaseLost` when the lease was lost."""
        if self.lost.is_set():
            raise LeaseLost(self.lost_message())

    def guard(self, work: Callable[P, R]) -> Callable[P, R]:
        """``work`` that first checks the lease: a loop calling it stops with :class:`LeaseLost`."""

        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            self.check()
            return work(*args, **kwargs)

        return guarded

    def stop_renewing(self) -> None:
        """Stop renewing without giving the lease up: it expires after its duration (for a holder that
        cannot vouch that the work it guarded has stopped)."""
        self._stop_renewing.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None

    def release(self) -> None:
        """Stop renewing and give the lease up (clear the holder) if this identity still holds it."""
        self._stop_renewing.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        if not self._held or self.lost.is_set():
            self._held = False
            return
        self._held = False
        try:
            current = self.store.get(Lease, self.name, self.namespace)
            if current.holder != self.identity:
                return
            now = self.clock()
            released = LeaseSpec(
                holder_identity="",
                lease_duration_seconds=1,
                acquire_time=now,
                renew_time=now,
                lease_transitions=current.spec.lease_transitions,
            )
            self.observed = self.store.update(current.model_copy(update={"spec": released}))
            _log.info("released the lease", lease=f"{self.namespace}/{self.name}")
        except StoreError as exc:
            # Not released: the lease expires after its duration instead.
            _log.warning("releasing the lease failed", error=str(exc))


@contextmanager
def leading(
    store: ObjectStore,
    identity: str,
    namespace: str = STORE_LEASE_NAMESPACE,
    name: str = STORE_LEASE_NAME,
    timing: LeaseTiming | None = None,
    wait: bool = True,
    timeout: float | None = None,
    on_wait: Callable[[Lease], None] | None = None,
) -> Iterator[LeaderElector]:
    """Hold the lease for the duration of the block: acquire (or wait), renew in the background, release.

    The block must stop when :attr:`LeaderElector.lost` is set (call :meth:`LeaderElector.check` or wrap
    its loop's callback in :meth:`LeaderElector.guard`).
    """
    elector = LeaderElector(store, identity, namespace, name, timing)
    elector.acquire(wait=wait, timeout=timeout, on_wait=on_wait)
    elector.start_renewing()
    try:
        yield elector
    finally:
        elector.release()
