"""A work queue keyed by object, as controller-runtime's: deduplicated, delayed, with error backoff.

A key waiting in the queue is never queued twice; adding it again only moves it earlier. Errors back off
exponentially per key (reset on success), so a failing object cannot starve the others or hammer AWS.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class ObjectKey:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


class WorkQueue:
    def __init__(self, base_backoff: float = 0.5, max_backoff: float = 300.0) -> None:
        self.base_backoff = base_backoff
        self.max_backoff = max_backoff
        self._due: dict[ObjectKey, float] = {}
        self._heap: list[tuple[float, ObjectKey]] = []
        self._failures: dict[ObjectKey, int] = {}
        self._processing: set[ObjectKey] = set()
        self._dirty: dict[ObjectKey, float] = {}
        self._cond = threading.Condition()

    def add(self, key: ObjectKey, after: float = 0.0) -> None:
        due = time.monotonic() + max(after, 0.0)
        with self._cond:
            if key in self._processing:
                # Re-add once the current reconcile finishes, so one key never runs twice at once.
                self._dirty[key] = min(due, self._dirty.get(key, due))
                return
            current = self._due.get(key)
            if current is not None and current <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, key))
            self._cond.notify()

    def add_rate_limited(self, key: ObjectKey) -> float:
        """Re-add after an error, with exponential backoff for this key; returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = float(min(self.max_backoff, self.base_backoff * (2.0**failures)))
        self.add(key, delay)
        return delay

    def forget(self, key: ObjectKey) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def get(self, timeout: float | None = None) -> ObjectKey | None:
        """The next due key (marked as processing), or None after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded entry
                if self._heap and self._heap[0][0] <= now:
                    _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing.add(key)
                    return key
                wait = None if not self._heap else self._heap[0][0] - now
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: ObjectKey) -> None:
        with self._cond:
            self._processing.discard(key)
            due = self._dirty.pop(key, None)
        if due is not None:
            self.add(key, max(0.0, due - time.monotonic()))

    def has_work(self, keys: Iterable[ObjectKey]) -> bool:
        """Whether any of ``keys`` is queued (due now or later) or being reconciled."""
        with self._cond:
            return any(k in self._due or k in self._processing or k in self._dirty for k in keys)

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)
