"""How long a key waits before it is retried, as client-go's workqueue rate limiters decide it.

* :class:`ItemExponentialFailureRateLimiter` — per key, ``base * 2**failures`` capped at ``max_delay``;
  :meth:`forget` (after a successful attempt) starts the key over at ``base``;
* :class:`BucketRateLimiter` — one token bucket shared by every key (``qps`` tokens a second, at most
  ``burst`` saved up): an add that finds the bucket empty waits for the next token;
* :class:`MaxOfRateLimiter` — the longest delay of several limiters (each is charged for every add).

:func:`controller_rate_limiter` is controller-runtime's default: exponential 5 ms → 1000 s per key, max'ed
with a 10 qps / burst 100 bucket. Every limiter takes a ``clock`` (monotonic seconds) so tests can drive it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Protocol

Clock = Callable[[], float]


class RateLimiter(Protocol):
    def when(self, key: Hashable) -> float:
        """The delay before ``key`` may be retried (and count this retry)."""
        ...

    def forget(self, key: Hashable) -> None:
        """The key succeeded: start its backoff over."""
        ...

    def num_requeues(self, key: Hashable) -> int: ...


class ItemExponentialFailureRateLimiter:
    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base delay <= max delay")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def when(self, key: Hashable) -> float:
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        # 2**failures overflows a float long after the cap is reached: stop doubling there.
        if failures >= 64:
            return self.max_delay
        return float(min(self.max_delay, self.base_delay * (2.0**failures)))

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class BucketRateLimiter:
    """A token bucket: ``burst`` adds pass at once, then one every ``1/qps`` seconds."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("need qps > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def when(self, key: Hashable) -> float:
        # Reserve a token now; a negative balance is the wait until that token has accrued.
        with self._lock:
            now = self.clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: Hashable) -> None:
        return None

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("need at least one rate limiter")
        self.limiters = limiters

    def when(self, key: Hashable) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


def controller_rate_limiter(clock: Clock = time.monotonic) -> MaxOfRateLimiter:
    """controller-runtime's default: per key 5 ms doubling up to 1000 s, and 10 qps with a burst of 100."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100, clock)
    )
