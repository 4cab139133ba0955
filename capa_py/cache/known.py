"""What a resource class may reuse instead of asking AWS again: :class:`Known`.

A resource class asks AWS; it never decides how long an answer stays true. What it reads with a call of
its own and that changes only when someone changes it (a VPC's DNS attributes, a load balancer's
cross-zone flag, an AMI's root device) it reads through :meth:`Known.value`, and what it has just set it
tells :meth:`Known.learn`. The region's shared observations keep both (nothing is kept when they are
disabled: every value is read again).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from capa_py.aws.observations import MISS, Observations
from capa_py.aws.session import AWSClients

T = TypeVar("T")


class Known:
    """The rarely-changing values of one region this process already read or set."""

    def __init__(self, observations: Observations) -> None:
        self._observations = observations

    def value(self, key: Hashable, max_age: float, read: Callable[[], T]) -> T:
        """The value of ``key`` when read or set less than ``max_age`` seconds ago; else ``read()``, kept."""
        return self._observations.fact(key, max_age, read)

    def recalled(self, key: Hashable, max_age: float) -> Any:
        """The value of ``key`` when younger than ``max_age``, else :data:`~capa_py.aws.observations.MISS`
        (nothing is read)."""
        return self._observations.known_fact(key, max_age)

    def learn(self, key: Hashable, value: Any) -> None:
        """``key`` is ``value`` now, known without asking (what the caller just set, a documented
        default)."""
        self._observations.learn_fact(key, value)

    def forget(self, key: Hashable) -> None:
        """What was known of ``key`` is no longer true (the caller just changed it): read it again."""
        self._observations.forget_fact(key)

    def due(self, kind: str) -> list[str]:
        """The ids of ``kind`` the next refresh of the kind will describe (a caller reading something of
        every resource anyway may read theirs in the same call)."""
        return self._observations.stale(kind)


def known_of(aws: AWSClients) -> Known:
    """What is known of the region of ``aws``."""
    return Known(aws.observations)


__all__ = ["MISS", "Known", "known_of"]
