"""The work queue's retry delays, as client-go's rate limiters give them, on an injected clock."""

from __future__ import annotations

import pytest

from capa_py.runtime.queue import ObjectKey, WorkQueue
from capa_py.runtime.ratelimiter import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    controller_rate_limiter,
)

A = ObjectKey("AWSCluster", "default", "a")
B = ObjectKey("AWSCluster", "default", "b")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_per_item_backoff_doubles_from_5ms_caps_at_1000s_and_resets_on_forget() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [limiter.when(A) for _ in range(20)]
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert delays[17] == pytest.approx(0.005 * 2**17)  # 655.36 s, still under the cap
    assert delays[18:] == [1000.0, 1000.0]
    assert limiter.num_requeues(A) == 20
    assert limiter.when(B) == pytest.approx(0.005), "each key backs off on its own"
    limiter.forget(A)
    assert limiter.num_requeues(A) == 0
    assert limiter.when(A) == pytest.approx(0.005), "a success starts the key over"
    for _ in range(200):
        limiter.when(B)
    assert limiter.when(B) == 1000.0, "a key failing for ever stays at the cap"


def test_token_bucket_passes_a_burst_then_one_add_per_tenth_of_a_second() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=10.0, burst=100, clock=clock)
    assert [bucket.when(A) for _ in range(100)] == [0.0] * 100
    # The bucket is empty: every further add waits for its own token, 0.1 s apart.
    assert [bucket.when(B) for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    clock.advance(0.3)  # the three reserved tokens have accrued: the next add waits one period
    assert bucket.when(A) == pytest.approx(0.1)
    clock.advance(60.0)  # refills up to the burst, never beyond
    assert [bucket.when(A) for _ in range(100)] == [0.0] * 100
    assert bucket.when(A) == pytest.approx(0.1)


def test_controller_default_is_the_larger_of_the_item_backoff_and_the_bucket() -> None:
    clock = FakeClock()
    limiter = controller_rate_limiter(clock)
    assert limiter.when(A) == pytest.approx(0.005), "the bucket is full: the item backoff decides"
    for _ in range(99):
        limiter.when(B)  # drains the bucket (B's own backoff grows too, which is not looked at)
    # Bucket empty: 0.1 s for the next token beats A's 10 ms backoff.
    assert limiter.when(A) == pytest.approx(0.1)
    clock.advance(100.0)
    limiter.forget(A)
    assert limiter.when(A) == pytest.approx(0.005)


def test_max_of_charges_every_limiter() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=1.0, burst=1, clock=clock)
    limiter = MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0), bucket)
    assert limiter.when(A) == pytest.approx(0.005)
    assert limiter.when(A) == pytest.approx(1.0), "the first add took the only token"


def test_queue_retries_with_the_limiter_delay_and_forget_resets_it() -> None:
    clock = FakeClock()
    queue = WorkQueue(rate_limiter=controller_rate_limiter(clock))
    delays = [queue.add_rate_limited(A) for _ in range(3)]
    assert delays == pytest.approx([0.005, 0.01, 0.02])
    queue.forget(A)
    assert queue.add_rate_limited(A) == pytest.approx(0.005)
    assert len(queue) == 1, "retries of one key are one queued key"


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="base delay"):
        ItemExponentialFailureRateLimiter(0.0, 1.0)
    with pytest.raises(ValueError, match="qps"):
        BucketRateLimiter(qps=0.0)
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter()


class Recording:
    """A QueueMetrics that keeps what it was told."""

    def __init__(self) -> None:
        self.adds = 0
        self.retries = 0
        self.depths: list[int] = []
        self.waits: list[float] = []
        self.work: list[float] = []

    def added(self) -> None:
        self.adds += 1

    def retried(self) -> None:
        self.retries += 1

    def depth(self, depth: int) -> None:
        self.depths.append(depth)

    def waited(self, seconds: float) -> None:
        self.waits.append(seconds)

    def worked(self, seconds: float) -> None:
        self.work.append(seconds)


def test_queue_metrics_count_distinct_adds_retries_waits_and_work() -> None:
    metrics = Recording()
    queue = WorkQueue(metrics=metrics)
    queue.add(A)
    queue.add(A)  # already queued: de-duplicated, not another add
    queue.add(B)
    assert metrics.adds == 2
    assert metrics.depths[-1] == 2
    key = queue.get(timeout=0)
    assert key is not None
    assert metrics.depths[-1] == 1
    queue.add(key)  # while it is processed: queued again once it is done, counted once
    queue.add(key)
    assert metrics.adds == 3
    queue.done(key)
    assert len(metrics.waits) == 1
    assert len(metrics.work) == 1
    assert all(w >= 0 for w in metrics.waits + metrics.work)
    assert len(queue) == 2, "the key re-added during its reconcile is queued again"
    queue.add_rate_limited(A)
    assert metrics.retries == 1
    queue.shut_down()
    assert queue.get(timeout=None) is None, "a shut-down queue hands out nothing, without waiting"
    queue.add(ObjectKey("AWSCluster", "default", "c"))
    assert metrics.adds == 3, "adds after shutdown are ignored"
