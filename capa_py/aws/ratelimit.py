"""Client-side rate limiting per service and operation class, in the shape EC2 throttles.

EC2 meters requests with token buckets per account and class of action: non-mutating (Describe*), mutating,
and RunInstances apart. We keep one bucket per (service, class) in the process, so a reconcile storm slows
itself before AWS has to; and when AWS answers with a throttling error anyway the bucket is emptied, so
every caller backs off together instead of each retrying into the limit.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from capa_py.aws.accounting import is_mutating


@dataclass(frozen=True)
class BucketSpec:
    capacity: float
    refill_per_second: float


DEFAULT_BUCKETS: dict[str, BucketSpec] = {
    "describe": BucketSpec(100, 20),
    "mutate": BucketSpec(200, 5),
    "run_instances": BucketSpec(5, 2),
}


def operation_class(operation: str) -> str:
    if operation == "RunInstances":
        return "run_instances"
    return "mutate" if is_mutating(operation) else "describe"


class TokenBucket:
    def __init__(self, spec: BucketSpec) -> None:
        self.spec = spec
        self._tokens = spec.capacity
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def _refill(self, now: float) -> None:
        self._tokens = min(
            self.spec.capacity, self._tokens + (now - self._stamp) * self.spec.refill_per_second
        )
        self._stamp = now

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                now = time.monotonic()
                self._refill(now)
                if self._tokens >= 1:
                    self._tokens -= 1
                    return waited
                delay = (1 - self._tokens) / self.spec.refill_per_second
            time.sleep(delay)
            waited += delay

    def drain(self) -> None:
        with self._lock:
            self._refill(time.monotonic())
            self._tokens = 0.0

    @property
    def tokens(self) -> float:
        with self._lock:
            self._refill(time.monotonic())
            return self._tokens


class RateLimiter:
    """Buckets keyed by (service, operation class)."""

    def __init__(self, buckets: dict[str, BucketSpec] | None = None, enabled: bool = True) -> None:
        self.specs = dict(buckets or DEFAULT_BUCKETS)
        self.enabled = enabled
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._lock = threading.Lock()

    def bucket(self, service: str, operation: str) -> TokenBucket:
        key = (service, operation_class(operation))
        with self._lock:
            if key not in self._buckets:
                self._buckets[key] = TokenBucket(self.specs[key[1]])
            return self._buckets[key]

    def acquire(self, service: str, operation: str) -> float:
        return self.bucket(service, operation).acquire() if self.enabled else 0.0

    def throttled(self, service: str, operation: str) -> None:
        """AWS throttled this class of call: empty the bucket so every caller waits for refill."""
        self.bucket(service, operation).drain()
