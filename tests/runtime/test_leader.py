"""Leader election on the SQLite store: acquire, renew, take over after expiry, race, release, lose.

Expiry is driven by each elector's clock (injected), never by sleeping: a candidate whose clock reads past
``renewTime + leaseDurationSeconds`` sees an expired lease, whatever the wall clock says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.coordination import Lease
from capa_py.runtime.leader import (
    LEASE_DURATION_ENV,
    STORE_LEASE_NAME,
    STORE_LEASE_NAMESPACE,
    LeaderElector,
    LeaseHeld,
    LeaseLost,
    LeaseTiming,
    holder_identity,
    leading,
)
from capa_py.store import SQLiteStore, StoreError

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
# Fast renewals, so the background renewer acts many times within a test's bounded waits.
QUICK = LeaseTiming(duration=2, renew_period=0.05, renew_deadline=0.5, retry_period=0.05)
BOUND = 30.0  # a safety bound on waits for background threads, never the expected duration


def at(offset: float) -> Callable[[], datetime]:
    return lambda: T0 + timedelta(seconds=offset)


class Clock:
    """A clock a test moves by hand."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def __call__(self) -> datetime:
        return T0 + timedelta(seconds=self.offset)


def the_lease(store: SQLiteStore) -> Lease:
    return store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE)


def elector(
    store: SQLiteStore, identity: str, clock: Callable[[], datetime] | None = None, **kwargs: Any
) -> LeaderElector:
    return LeaderElector(store, identity, clock=clock or at(0), **kwargs)


def test_the_first_candidate_creates_the_lease_and_holds_it(store: SQLiteStore) -> None:
    a = elector(store, "a")
    assert a.try_acquire_or_renew() is True

    lease = the_lease(store)
    assert lease.to_dict()["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-02T03:04:05.678901Z",
        "renewTime": "2026-01-02T03:04:05.678901Z",
        "leaseTransitions": 0,
    }
    assert lease.metadata.namespace == "capa-py-system"
    assert lease.metadata.name == "capa-py-controller"


def test_a_candidate_is_refused_while_the_holder_is_within_its_duration(store: SQLiteStore) -> None:
    assert elector(store, "a").try_acquire_or_renew() is True
    b = elector(store, "b", clock=at(14.9))
    before = the_lease(store)

    assert b.try_acquire_or_renew() is False
    assert b.observed is not None
    assert b.observed.holder == "a"
    after = the_lease(store)
    assert after.metadata.resource_version == before.metadata.resource_version, "a refused candidate wrote"


def test_renewal_moves_renew_time_and_keeps_acquire_time_and_transitions(store: SQLiteStore) -> None:
    clock = Clock()
    a = elector(store, "a", clock=clock)
    assert a.try_acquire_or_renew() is True
    first = the_lease(store)
    clock.offset = 20.0  # past the duration: the holder still renews its own lease

    assert a.try_acquire_or_renew() is True
    renewed = the_lease(store)
    assert renewed.spec.holder_identity == "a"
    assert renewed.spec.acquire_time == first.spec.acquire_time
    assert renewed.spec.renew_time == T0 + timedelta(seconds=20)
    assert renewed.spec.lease_transitions == 0
    assert int(renewed.metadata.resource_version or 0) > int(first.metadata.resource_version or 0)


def test_a_candidate_takes_over_an_expired_lease_and_counts_the_transition(store: SQLiteStore) -> None:
    assert elector(store, "a").try_acquire_or_renew() is True
    b = elector(store, "b", clock=at(15.0))

    assert b.try_acquire_or_renew() is True
    lease = the_lease(store)
    assert lease.spec.holder_identity == "b"
    assert lease.spec.acquire_time == T0 + timedelta(seconds=15)
    assert lease.spec.lease_transitions == 1

    c = elector(store, "c", clock=at(31.0))
    assert c.try_acquire_or_renew() is True
    assert the_lease(store).spec.lease_transitions == 2


def race(
    identity: str, own: SQLiteStore, offset: float, barrier: threading.Barrier, outcomes: dict[str, bool]
) -> None:
    candidate = LeaderElector(own, identity, clock=at(offset))
    barrier.wait()
    outcomes[identity] = candidate.try_acquire_or_renew()


def test_of_candidates_racing_for_a_free_or_expired_lease_exactly_one_wins(store_path: Path) -> None:
    # Each candidate has its own store (its own SQLite connection), as separate processes would.
    for round_number in range(5):
        offset = 100.0 * round_number  # every round's clock is past the previous holder's duration
        stores = [SQLiteStore(store_path) for _ in range(6)]
        barrier = threading.Barrier(len(stores))
        outcomes: dict[str, bool] = {}

        threads = [
            threading.Thread(target=race, args=(f"round-{round_number}-{i}", own, offset, barrier, outcomes))
            for i, own in enumerate(stores)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND)
        for own in stores:
            own.close()
        winners = [identity for identity, won in outcomes.items() if won]
        assert len(outcomes) == len(stores), f"round {round_number}: a candidate did not finish: {outcomes}"
        assert len(winners) == 1, f"round {round_number}: exactly one candidate must win, got {winners}"
        with SQLiteStore(store_path) as reader:
            lease = the_lease(reader)
        assert lease.holder == winners[0], f"round {round_number}: the record names {lease.holder}"
        assert lease.spec.lease_transitions == round_number


def test_release_clears_the_holder_so_a_candidate_takes_it_before_expiry(store: SQLiteStore) -> None:
    a = elector(store, "a")
    a.acquire()
    a.release()

    released = the_lease(store)
    assert released.spec.holder_identity == ""
    assert released.spec.lease_transitions == 0
    b = elector(store, "b", clock=at(0.5))  # well within a's duration had it not released
    assert b.try_acquire_or_renew() is True
    assert the_lease(store).spec.lease_transitions == 1


def test_a_waiting_candidate_announces_the_holder_once_and_gets_the_lease_when_released(
    store: SQLiteStore,
) -> None:
    holder = elector(store, "holder")
    holder.acquire()
    announced: list[str] = []
    acquired = threading.Event()

    def wait_for_it() -> None:
        waiter = elector(store, "waiter", timing=QUICK)
        waiter.acquire(wait=True, on_wait=lambda lease: announced.append(lease.holder))
        acquired.set()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    try:
        # Several retries pass while the holder keeps the lease (its clock never expires it).
        for _ in range(3):
            assert not acquired.wait(QUICK.retry_period * 2), "the waiter got a lease that is held"
        assert announced == ["holder"], f"the holder should be announced exactly once: {announced}"
    finally:
        holder.release()
        thread.join(BOUND)
    assert acquired.is_set(), "the waiter did not get the released lease"
    assert the_lease(store).holder == "waiter"


def test_without_waiting_a_held_lease_raises_naming_the_holder_and_its_last_renewal(
    store: SQLiteStore,
) -> None:
    elector(store, "capa apply pid 42 on box (abc123)").acquire()
    candidate = elector(store, "b", clock=at(3.4))

    with pytest.raises(LeaseHeld) as raised:
        candidate.acquire(wait=False)
    assert str(raised.value) == (
        "the store lease capa-py-system/capa-py-controller is held by capa apply pid 42 on box (abc123), "
        "renewed 3s ago"
    )


def test_waiting_gives_up_after_the_timeout_naming_the_holder(store: SQLiteStore) -> None:
    elector(store, "a").acquire()
    with pytest.raises(LeaseHeld, match=r"gave up after waiting \d+s: .* held by a, renewed"):
        elector(store, "b", timing=QUICK).acquire(wait=True, timeout=0.2)


def test_the_holder_renews_in_the_background(store: SQLiteStore) -> None:
    with leading(store, "a", timing=QUICK) as held:
        first = the_lease(store).metadata.resource_version
        renewed = threading.Event()

        def watch() -> None:
            for event in store.watch(
                Lease, namespace=STORE_LEASE_NAMESPACE, resource_version=first, timeout=BOUND
            ):
                if event.object.holder == "a" and event.type == "MODIFIED":
                    renewed.set()
                    return

        watch()
        assert renewed.is_set(), "no renewal was written while the lease was held"
        assert not held.lost.is_set()
    assert the_lease(store).holder == "", "leaving the block must release the lease"


def test_a_holder_whose_lease_was_taken_over_loses_it_and_its_guard_stops_the_work(
    store: SQLiteStore,
) -> None:
    a = elector(store, "a", timing=QUICK)
    a.acquire()
    a.start_renewing()
    ticks: list[int] = []
    tick = a.guard(ticks.append)
    tick(1)
    try:
        # Another candidate whose clock is far ahead sees a's lease as expired and takes it.
        assert elector(store, "b", clock=at(3600)).try_acquire_or_renew() is True
        assert a.lost.wait(BOUND), "the holder did not notice that its lease was taken over"
        lost = r"lost the store lease capa-py-system/capa-py-controller \(held by b now\)"
        with pytest.raises(LeaseLost, match=lost):
            tick(2)
        assert ticks == [1], "the guarded work ran after the lease was lost"
    finally:
        a.release()
    assert the_lease(store).holder == "b", "a holder that lost the lease must not release someone else's"


class FailingWrites:
    """The store, except that updates fail once ``failing`` is set (a store the holder cannot reach)."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.failing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update(self, obj: Any) -> Any:
        if self.failing:
            raise StoreError("the store is unreachable")
        return self.inner.update(obj)


def test_a_holder_that_cannot_renew_within_the_deadline_loses_the_lease(store: SQLiteStore) -> None:
    flaky = FailingWrites(store)
    a = LeaderElector(flaky, "a", timing=QUICK)  # type: ignore[arg-type]
    a.acquire()
    a.start_renewing()
    try:
        flaky.failing = True
        assert a.lost.wait(BOUND), "renewals failed past the deadline and the lease was not given up"
        with pytest.raises(LeaseLost):
            a.check()
    finally:
        a.release()


def test_a_holder_killed_without_releasing_is_taken_over_only_after_its_duration(store: SQLiteStore) -> None:
    # A killed holder leaves its record as it was: nothing released, no more renewals.
    LeaderElector(store, "killed", clock=at(0), timing=LeaseTiming.for_duration(3)).acquire()

    assert elector(store, "next", clock=at(2.9)).try_acquire_or_renew() is False
    assert elector(store, "next", clock=at(3.0)).try_acquire_or_renew() is True


def test_timing_from_the_environment() -> None:
    assert LeaseTiming.from_env({}) == LeaseTiming(15, 5.0, 10.0, 2.0)
    assert LeaseTiming.from_env({LEASE_DURATION_ENV: "3"}) == LeaseTiming(3, 1.0, 2.0, 0.6)
    for bad in ("0", "-1", "1.5", "soon"):
        with pytest.raises(ValueError, match=LEASE_DURATION_ENV):
            LeaseTiming.from_env({LEASE_DURATION_ENV: bad})


def test_holder_identity_names_command_pid_and_host_and_is_unique() -> None:
    import os
    import socket

    first, second = holder_identity("capa apply"), holder_identity("capa apply")
    assert first.startswith(f"capa apply pid {os.getpid()} on {socket.gethostname()} (")
    assert first != second


class RivalWritesFirst:
    """The store, where a rival candidate takes the lease just before our first write lands."""

    def __init__(self, inner: SQLiteStore, rival: LeaderElector) -> None:
        self.inner = inner
        self.rival = rival
        self.raced = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def update(self, obj: Any) -> Any:
        if not self.raced:
            self.raced = True
            assert self.rival.try_acquire_or_renew() is True
        return self.inner.update(obj)  # stale now: Conflict


def test_a_candidate_that_loses_the_race_for_a_released_lease_names_the_winner(store: SQLiteStore) -> None:
    first = elector(store, "first")
    first.acquire()
    first.release()
    racing = RivalWritesFirst(store, elector(store, "rival"))
    candidate = LeaderElector(racing, "candidate", clock=at(0))  # type: ignore[arg-type]

    with pytest.raises(LeaseHeld, match=r"is held by rival, renewed 0s ago"):
        candidate.acquire(wait=False)
    assert racing.raced
    assert the_lease(store).holder == "rival"
