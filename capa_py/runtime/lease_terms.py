"""The terms of the store lease: its name, timing, holder identity, and the errors of holding it.

:mod:`capa_py.runtime.leader` runs the election over these.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from capa_py.api.coordination import Lease, now_micro

STORE_LEASE_NAMESPACE = "capa-py-system"
"""capa-py's namespace (``capa_py.manifests.rbac.NAMESPACE``), which ``capa manifests`` installs."""
STORE_LEASE_NAME = "capa-py-controller"
LEASE_DURATION_ENV = "CAPA_LEASE_DURATION"
"""Environment variable: the lease duration in whole seconds (default 15); the periods scale with it."""


@dataclass(frozen=True)
class LeaseTiming:
    """How long a silent holder keeps the lease, and how often it renews and candidates retry.

    The defaults are controller-runtime's (15 s / 10 s / 2 s) with renewals every 5 s rather than every
    retry period, which is plenty for a store written by a handful of processes.
    """

    duration: int = 15
    renew_period: float = 5.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if self.duration < 1:
            raise ValueError("the lease duration must be at least 1 second")
        if not 0 < self.renew_period <= self.renew_deadline < self.duration:
            raise ValueError("need 0 < renew period <= renew deadline < duration")
        if self.retry_period <= 0:
            raise ValueError("the retry period must be positive")

    @classmethod
    def for_duration(cls, duration: int) -> LeaseTiming:
        """The default proportions scaled to another duration (renew at 1/3, give up at 2/3)."""
        if duration < 1:
            raise ValueError("the lease duration must be at least 1 second")
        return cls(
            duration=duration,
            renew_period=duration / 3,
            renew_deadline=duration * 2 / 3,
            retry_period=min(2.0, duration / 5),
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> LeaseTiming:
        """The timing ``CAPA_LEASE_DURATION`` asks for, or the defaults; ValueError when it is malformed."""
        raw = environ.get(LEASE_DURATION_ENV, "").strip()
        if not raw:
            return cls()
        try:
            seconds = int(raw)
        except ValueError:
            raise ValueError(f"{LEASE_DURATION_ENV} must be a whole number of seconds, not {raw!r}") from None
        if seconds < 1:
            raise ValueError(f"{LEASE_DURATION_ENV} must be at least 1 second, not {raw!r}")
        return cls.for_duration(seconds)


def holder_identity(command: str) -> str:
    """A readable, unique identity: what runs, its pid and host, and a random suffix (pids are reused)."""
    return f"{command} pid {os.getpid()} on {socket.gethostname()} ({secrets.token_hex(3)})"


def describe_holder(lease: Lease, now: datetime | None = None) -> str:
    """``<identity>, renewed 3s ago`` for messages."""
    now = now or now_micro()
    renewed = lease.spec.renew_time or lease.spec.acquire_time
    if renewed is None:
        return lease.holder
    ago = max(0, math.floor((now - renewed).total_seconds()))
    return f"{lease.holder}, renewed {ago}s ago"


class LeaseHeld(Exception):
    """Someone else holds the lease (and the caller would not, or could no longer, wait)."""

    def __init__(self, lease: Lease, now: datetime, waited: float | None = None) -> None:
        self.lease = lease
        self.holder = lease.holder
        where = f"{lease.metadata.namespace}/{lease.metadata.name}"
        held = f"the store lease {where} is held by {describe_holder(lease, now)}"
        if waited is not None:
            held = f"gave up after waiting {round(waited)}s: {held}"
        super().__init__(held)


class LeaseLost(Exception):
    """The lease was lost while held: whatever it guarded must stop."""
