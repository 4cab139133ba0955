"""How long the workflow server holds a rejected workflow back, and the clock it reads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Backoff:
    """How long a rejected workflow is held back: ``base * 2**(n-1)`` seconds after the n-th rejection,
    at most ``maximum``."""

    base: float = 10.0
    maximum: float = 300.0

    def delay(self, rejections: int) -> float:
        return float(min(self.base * 2 ** min(max(rejections - 1, 0), 62), self.maximum))
