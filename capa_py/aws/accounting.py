"""Counting AWS calls: this project's main cost.

Every call made through a client from :class:`~capa_py.aws.session.AWSClients` is counted by service,
operation and outcome (``ok`` or the error code) in the process-wide counter and in every active scope,
so a reconcile, a CLI command or a benchmark can say exactly what it cost. Scopes follow the context
(``contextvars``), so threads started with a copied context count into their parent's scope.
"""

from __future__ import annotations

import contextvars
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_MUTATING_PREFIXES = ("Describe", "List", "Get", "Lookup", "Search")


def is_mutating(operation: str) -> bool:
    """Whether an API operation changes something (every call but Describe/List/Get…)."""
    return not operation.startswith(_MUTATING_PREFIXES)


@dataclass(frozen=True)
class CallKey:
    service: str
    operation: str
    outcome: str


class CallCounter:
    """A thread-safe tally of AWS calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[CallKey] = Counter()

    def add(self, service: str, operation: str, outcome: str) -> None:
        with self._lock:
            self._counts[CallKey(service, operation, outcome)] += 1

    def snapshot(self) -> dict[CallKey, int]:
        with self._lock:
            return dict(self._counts)

    def total(self, mutating: bool | None = None, outcome: str | None = None) -> int:
        return sum(
            n
            for key, n in self.snapshot().items()
            if (mutating is None or is_mutating(key.operation) == mutating)
            and (outcome is None or key.outcome == outcome)
        )

    def by_operation(self) -> dict[str, int]:
        """``{"ec2:CreateVpc": 1, ...}`` summed over outcomes, sorted by name."""
        totals: Counter[str] = Counter()
        for key, n in self.snapshot().items():
            totals[f"{key.service}:{key.operation}"] += n
        return dict(sorted(totals.items()))

    def by_outcome(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for key, n in self.snapshot().items():
            totals[key.outcome] += n
        return dict(sorted(totals.items()))

    def mutating_operations(self) -> dict[str, int]:
        return {op: n for op, n in self.by_operation().items() if is_mutating(op.split(":", 1)[1])}

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


PROCESS_COUNTER = CallCounter()
"""Every call this process made."""

_active_scopes: contextvars.ContextVar[tuple[CallCounter, ...]] = contextvars.ContextVar(
    "capa_aws_call_scopes", default=()
)


def record_call(service: str, operation: str, outcome: str) -> None:
    PROCESS_COUNTER.add(service, operation, outcome)
    for counter in _active_scopes.get():
        counter.add(service, operation, outcome)


@contextmanager
def call_scope(counter: CallCounter | None = None) -> Iterator[CallCounter]:
    """Count the calls made inside the block (in this context) into ``counter``."""
    scope = counter if counter is not None else CallCounter()
    token = _active_scopes.set((*_active_scopes.get(), scope))
    try:
        yield scope
    finally:
        _active_scopes.reset(token)
