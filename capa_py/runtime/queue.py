"""A work queue keyed by object, as controller-runtime's: deduplicated, delayed, with error backoff.

A key waiting in the queue is never queued twice; adding it again only moves it earlier. Errors back off
by the queue's rate limiter (:mod:`capa_py.runtime.ratelimiter`; by default exponentially per key, reset on
success), so a failing object cannot starve the others or hammer AWS. An optional :class:`QueueMetrics`
sees every add, retry, wait and piece of work (the ``workqueue_*`` metrics).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from capa_py.runtime.ratelimiter import ItemExponentialFailureRateLimiter, RateLimiter


@dataclass(frozen=True, order=True)
class ObjectKey:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


class QueueMetrics(Protocol):
    """What a queue reports: adds, retries, its depth, how long keys waited and how long work took."""

    def added(self) -> None: ...

    def retried(self) -> None: ...

    def depth(self, depth: int) -> None: ...

    def waited(self, seconds: float) -> None: ...

    def worked(self, seconds: float) -> None: ...


class WorkQueue:
    def __init__(
        self,
        base_backoff: float = 0.5,
        max_backoff: float = 300.0,
        rate_limiter: RateLimiter | None = None,
        metrics: QueueMetrics | None = None,
    ) -> None:
        self.rate_limiter: RateLimiter = rate_limiter or ItemExponentialFailureRateLimiter(
            base_backoff, max_backoff
        )
        self.metrics = metrics
        self._due: dict[ObjectKey, float] = {}
        self._heap: list[tuple[float, ObjectKey]] = []
        self._processing: set[ObjectKey] = set()
        self._dirty: dict[ObjectKey, float] = {}
        self._queued_at: dict[ObjectKey, float] = {}
        self._started_at: dict[ObjectKey, float] = {}
        self._shutting_down = False
        self._cond = threading.Condition()
        self._waiting = 0
        self.on_starved: Callable[[], None] | None = None
        """Called (outside the queue's lock) when a key is due and no worker is waiting in :meth:`get`:
        a process that starts its workers on demand starts another one (up to its limit)."""

    def add(self, key: ObjectKey, after: float = 0.0) -> None:
        self._add(key, after, count=True)

    def _add(self, key: ObjectKey, after: float, count: bool) -> None:
        now = time.monotonic()
        due = now + max(after, 0.0)
        with self._cond:
            if self._shutting_down:
                return
            if key in self._processing:
                # Re-add once the current reconcile finishes, so one key never runs twice at once.
                if count and key not in self._dirty and self.metrics is not None:
                    self.metrics.added()
                self._dirty[key] = min(due, self._dirty.get(key, due))
                return
            current = self._due.get(key)
            if current is not None and current <= due:
                return  # already queued, as early or earlier: not another add
            if count and current is None and self.metrics is not None:
                self.metrics.added()
            self._due[key] = due
            # Time in the queue counts from when the key is due, as a delayed add only joins then.
            self._queued_at[key] = due
            heapq.heappush(self._heap, (due, key))
            if self.metrics is not None:
                self.metrics.depth(len(self._due))
            self._cond.notify()
            starved = self._waiting == 0 and after <= 0
        if starved and self.on_starved is not None:
            self.on_starved()

    def add_rate_limited(self, key: ObjectKey) -> float:
        """Re-add after the delay the rate limiter gives this key (a retry); returns the delay."""
        delay = self.rate_limiter.when(key)
        if self.metrics is not None:
            self.metrics.retried()
        self.add(key, delay)
        return delay

    def forget(self, key: ObjectKey) -> None:
        """The key's last attempt succeeded: its backoff starts over."""
        self.rate_limiter.forget(key)

    def shut_down(self) -> None:
        """Hand out no more keys (``get`` returns None at once) and ignore adds; work in progress goes on."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> ObjectKey | None:
        """The next due key (marked as processing), or None after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._shutting_down:
                    return None
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded entry
                if self._heap and self._heap[0][0] <= now:
                    _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing.add(key)
                    queued_at = self._queued_at.pop(key, now)
                    self._started_at[key] = now
                    if self.metrics is not None:
                        self.metrics.depth(len(self._due))
                        self.metrics.waited(max(0.0, now - queued_at))
                    # Another key already due and nobody left waiting: one more worker (a delayed key
                    # that came due while every worker was busy wakes no one by itself).
                    starved = self._waiting == 0 and self._due_now(now)
                    break
                wait = None if not self._heap else self._heap[0][0] - now
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._waiting += 1
                try:
                    self._cond.wait(wait)
                finally:
                    self._waiting -= 1
        if starved and self.on_starved is not None:
            self.on_starved()
        return key

    def _due_now(self, now: float) -> bool:
        while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # superseded entry
        return bool(self._heap) and self._heap[0][0] <= now

    def done(self, key: ObjectKey) -> None:
        with self._cond:
            self._processing.discard(key)
            due = self._dirty.pop(key, None)
            started = self._started_at.pop(key, None)
            if self.metrics is not None and started is not None:
                self.metrics.worked(max(0.0, time.monotonic() - started))
        if due is not None:
            self._add(key, max(0.0, due - time.monotonic()), count=False)

    def has_work(self, keys: Iterable[ObjectKey]) -> bool:
        """Whether any of ``keys`` is queued (due now or later) or being reconciled."""
        with self._cond:
            return any(k in self._due or k in self._processing or k in self._dirty for k in keys)

    def in_progress(self) -> int:
        with self._cond:
            return len(self._processing)

    def waiting(self) -> int:
        """How many workers are waiting in :meth:`get` for a key."""
        with self._cond:
            return self._waiting

    def has_due(self) -> bool:
        """Whether a key is due now (waiting for a worker), as opposed to queued for later."""
        with self._cond:
            return self._due_now(time.monotonic())

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)


class QueueRouter:
    """One :class:`WorkQueue` per controller behind the one-queue interface the manager drives: a key goes
    to the queue of its kind's controller, and each controller's workers take from their own queue."""

    def __init__(self, queues: dict[str, WorkQueue]) -> None:
        self.queues = queues

    def add(self, key: ObjectKey, after: float = 0.0) -> None:
        self.queues[key.kind].add(key, after)

    def add_rate_limited(self, key: ObjectKey) -> float:
        return self.queues[key.kind].add_rate_limited(key)

    def forget(self, key: ObjectKey) -> None:
        self.queues[key.kind].forget(key)

    def get(self, timeout: float | None = None) -> ObjectKey | None:
        raise TypeError("each controller's workers take keys from that controller's own queue")

    def done(self, key: ObjectKey) -> None:
        self.queues[key.kind].done(key)

    def has_work(self, keys: Iterable[ObjectKey]) -> bool:
        return any(self.queues[k.kind].has_work([k]) for k in keys if k.kind in self.queues)

    def shut_down(self) -> None:
        for queue in self.queues.values():
            queue.shut_down()

    def in_progress(self) -> int:
        return sum(queue.in_progress() for queue in self.queues.values())

    def quiet(self) -> bool:
        """No reconcile running and none due: the end of a burst."""
        return not any(q.in_progress() or q.has_due() for q in self.queues.values())

    def __len__(self) -> int:
        return sum(len(queue) for queue in self.queues.values())
