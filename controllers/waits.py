"""How long a step that waits on AWS asks to be requeued: AWS's own waiter cadence.

A NAT gateway becoming ``available``, a load balancer leaving ``provisioning`` and an instance becoming
``running`` take from tens of seconds to minutes. The SDKs poll them with the waiters botocore ships
(``NatGatewayAvailable``, ``LoadBalancerAvailable``, ``InstanceRunning``), every ``delay`` seconds; a
controller polls at the same cadence, as a requeue rather than a sleep, and only the resources still
pending (the other steps of the pass do not wait for them).

The cadence is read from botocore's waiter models, so it follows the SDK, and it is the longest a pending
resource goes unlooked-at. Sooner than that, the next look comes after a fixed share of the resource's age
(:data:`POLL_SHARE` of the time since AWS says it was created, at least :data:`MIN_POLL`): a resource is
then noticed ready at most that share of its own wait late, whether it takes seconds (an emulator, a quick
instance) or minutes (a load balancer), and the looks thin out as the wait grows (a load balancer that takes
150 s is looked at about 32 times, against CAPA's 32-41 load balancer describes over a cluster's life). The
answer to a create always reports the resource pending; on some endpoints it is ready a moment later, and
the first look comes :data:`MIN_POLL` after it. Resources of one kind waited on together share their looks
(one describe for all of them).
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
"""How long after its create an observation of a resource may still be that create's answer (see
:func:`just_created`); also the first look's delay when AWS gave no creation time."""
MIN_POLL = 2.0
"""The shortest time between two looks at a pending resource."""
POLL_SHARE = 0.1
"""The next look at a pending resource comes after this share of its age (so it is noticed ready at most
10% of its wait late), between :data:`MIN_POLL` and the waiter's cadence."""
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

    def requeue(self, created_this_pass: bool, created_at: datetime | None = None) -> float:
        """When to look again at a resource still pending, created at ``created_at`` (as AWS says; for
        several, the youngest): after :data:`POLL_SHARE` of its age, at least :data:`MIN_POLL` and at most
        the cadence. Without a creation time: :data:`FIRST_POLL_AFTER_CREATE` after a create in this pass,
        else the cadence."""
        if created_at is None:
            return min(self.cadence, FIRST_POLL_AFTER_CREATE) if created_this_pass else self.cadence
        age = (utc_now() - _aware(created_at)).total_seconds()
        return min(self.cadence, max(MIN_POLL, age * POLL_SHARE))


def utc_now() -> datetime:
    """The clock :func:`just_created` reads (a test moves it on instead of waiting)."""
    return datetime.now(UTC)


def just_created(created_at: datetime | None) -> bool:
    """Whether AWS says the resource was created less than the first poll's delay ago: an observation of it
    may still be its create's answer (which always says pending), seen again by a reconcile moments later."""
    if created_at is None:
        return False
    return (utc_now() - _aware(created_at)).total_seconds() < FIRST_POLL_AFTER_CREATE


def youngest(first: datetime | None, second: datetime | None) -> datetime | None:
    """The later of two creation times (either may be unknown)."""
    if first is None or second is None:
        return first if second is None else second
    return max(_aware(first), _aware(second))


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


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
