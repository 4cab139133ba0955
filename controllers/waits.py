"""How long a step that waits on AWS asks to be requeued: AWS's own waiter cadence.

A NAT gateway becoming ``available``, a load balancer leaving ``provisioning`` and an instance becoming
``running`` take from tens of seconds to minutes. The SDKs poll them with the waiters botocore ships
(``NatGatewayAvailable``, ``LoadBalancerAvailable``, ``InstanceRunning``), every ``delay`` seconds; a
controller polls at the same cadence, as a requeue rather than a sleep, and only the resources still
pending (the other steps of the pass do not wait for them).

The cadence is read from botocore's waiter models, so it follows the SDK. One exception: the answer to a
create always reports the resource pending, and on some endpoints it is ready a moment later; the first
poll of a resource created (or adopted) in this very pass comes after :data:`FIRST_POLL_AFTER_CREATE`
instead of a whole cadence, so such an endpoint is not kept waiting for nothing. On AWS that first poll
costs one describe per waiting step.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime

from capa_py.aws.models import session_with_shared_data
from capa_py.logging import get_logger

DEFAULT_CADENCE = 15.0
"""The waiters' delay when botocore's model cannot be read (every one of ours is 15 s today)."""
FIRST_POLL_AFTER_CREATE = 3.0
_log = get_logger("controller.waits")


@dataclass(frozen=True)
class Waiter:
    """A botocore waiter: the service's waiter model and the waiter's name in it."""

    service: str
    name: str

    @property
    def cadence(self) -> float:
        """Seconds between two polls, as botocore's waiter model says."""
        return _waiter_delay(self.service, self.name)

    def requeue(self, created_this_pass: bool) -> float:
        """When to look again at a resource still pending: a whole cadence, or sooner for the first poll
        of one created in this pass (when the cadence is longer than that first poll)."""
        return min(self.cadence, FIRST_POLL_AFTER_CREATE) if created_this_pass else self.cadence


def utc_now() -> datetime:
    """The clock :func:`just_created` reads (a test moves it on instead of waiting)."""
    return datetime.now(UTC)


def just_created(created_at: datetime | None) -> bool:
    """Whether AWS says the resource was created less than the first poll's delay ago: an observation of it
    may still be its create's answer (which always says pending), seen again by a reconcile moments later."""
    if created_at is None:
        return False
    moment = created_at if created_at.tzinfo is not None else created_at.replace(tzinfo=UTC)
    return (utc_now() - moment).total_seconds() < FIRST_POLL_AFTER_CREATE


NAT_GATEWAY_AVAILABLE = Waiter("ec2", "NatGatewayAvailable")
LOAD_BALANCER_AVAILABLE = Waiter("elbv2", "LoadBalancerAvailable")
INSTANCE_RUNNING = Waiter("ec2", "InstanceRunning")


@functools.cache
def _waiter_delay(service: str, name: str) -> float:
    try:
        model = session_with_shared_data().get_waiter_model(service).get_waiter(name)
        delay = float(model.delay)
    except Exception as exc:  # a botocore without this waiter (or its data): the documented default
        _log.warning("waiter model unreadable; using the default cadence", waiter=name, error=str(exc))
        return DEFAULT_CADENCE
    return delay if delay > 0 else DEFAULT_CADENCE
