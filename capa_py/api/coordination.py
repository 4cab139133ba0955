"""``coordination.k8s.io/v1`` Lease: the record leader election is built on.

A Lease names who holds it (``holderIdentity``), for how long a holder that stops renewing keeps it
(``leaseDurationSeconds``), when it was taken and last renewed (``acquireTime``, ``renewTime``, both
``MicroTime``: RFC 3339 with microseconds) and how often it changed hands (``leaseTransitions``). The
fields and their wire form are the Kubernetes API's, so the same record serves the embedded store and a
real API server, and ``kubectl get lease -o json`` prints what :meth:`Lease.to_dict` does.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, ClassVar

from pydantic import Field, PlainSerializer

from capa_py.api.meta import KubeModel, KubeObject


def _format_micro_time(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


MicroTime = Annotated[datetime, PlainSerializer(_format_micro_time, return_type=str, when_used="json")]
"""A ``metav1.MicroTime``: RFC 3339 in UTC with microsecond precision on the wire."""


def now_micro() -> datetime:
    """Now, in UTC, with the microseconds a ``MicroTime`` keeps."""
    return datetime.now(UTC)


class LeaseSpec(KubeModel):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: MicroTime | None = None
    renew_time: MicroTime | None = None
    lease_transitions: int | None = None
    # Coordinated leader election (Kubernetes 1.31+); read so records written by such clients load, unused.
    preferred_holder: str | None = None
    strategy: str | None = None


class Lease(KubeObject):
    """A ``coordination.k8s.io/v1`` Lease (no status subresource: everything lives in ``spec``)."""

    API_VERSION: ClassVar[str] = "coordination.k8s.io/v1"
    KIND: ClassVar[str] = "Lease"
    PLURAL: ClassVar[str] = "leases"
    HAS_STATUS: ClassVar[bool] = False

    spec: LeaseSpec = Field(default_factory=LeaseSpec)

    @property
    def holder(self) -> str:
        """Who holds the lease; empty when it was released or never taken."""
        return self.spec.holder_identity or ""

    def expires_at(self) -> datetime | None:
        """When a holder that stopped renewing loses the lease (None: no renewal recorded)."""
        renewed = self.spec.renew_time or self.spec.acquire_time
        if renewed is None:
            return None
        return renewed + timedelta(seconds=self.spec.lease_duration_seconds or 0)

    def expired(self, now: datetime) -> bool:
        expires = self.expires_at()
        return expires is None or now >= expires
