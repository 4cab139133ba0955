"""Bounded intent adoption: an intent adopts only what the interrupted create can have made.

Every kind that can reach the intent path (its class lists candidates: VPC, elastic IP, route table, NAT
gateway, instance) is driven onto it by lowering its traits to strategy class 3 (separate tagging) and 5
(untracked). The stranger's case: the process dies after writing the intent and before sending the create,
someone else then makes an untagged look-alike, and the reconcile runs only after the adoption window. The
look-alike is never adopted, tagged or deleted. A kind whose creation time AWS reports creates anew (the
look-alike was made after the window; a NAT gateway look-alike holds the desired address, so AWS refuses
that create); a kind without one cannot attribute it and reports an undecidable intent. The interrupted
create's own resource is adopted when examined in time, and, for kinds with a creation time, even later.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from capa_py.api.meta import utcnow
from capa_py.aws.errors import AlreadyExists
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import UndecidableIntent
from capa_py.engine.profiles import ADOPTION_WINDOW
from tests.engine.support import (
    SUBJECTS,
    Faults,
    Owner,
    SimulatedCrash,
    Subject,
    carries_lookup_tags,
    engine_for,
)
from tests.resources.builders import Builder

INTENT_KINDS = [SUBJECTS[kind] for kind in ("vpc", "elastic-ip", "route-table", "nat-gateway", "instance")]
DATED = {"nat-gateway", "instance"}
"""Kinds whose describe reports a creation time (CreateTime, LaunchTime)."""
LATE = timedelta(seconds=ADOPTION_WINDOW + 300)


def _engine(strategy: int, subject: Subject, clock: Callable[[], datetime] = utcnow) -> Engine:
    return Engine(engine_for(strategy, subject.kind).profile, clock=clock)


def _stranger(aws: AWSClients, subject: Subject, desired: Any) -> str:
    """An untagged look-alike of ``desired`` made by someone else, straight through the API."""
    ec2 = aws.ec2
    if subject.kind == "vpc":
        return str(ec2.call("CreateVpc", CidrBlock=desired.cidr_block)["Vpc"]["VpcId"])
    if subject.kind == "elastic-ip":
        return str(ec2.call("AllocateAddress", Domain="vpc")["AllocationId"])
    if subject.kind == "route-table":
        return str(ec2.call("CreateRouteTable", VpcId=desired.vpc_id)["RouteTable"]["RouteTableId"])
    if subject.kind == "nat-gateway":
        response = ec2.call(
            "CreateNatGateway", SubnetId=desired.subnet_id, AllocationId=desired.allocation_id
        )
        return str(response["NatGateway"]["NatGatewayId"])
    response = ec2.call(
        "RunInstances",
        ImageId=desired.image_id,
        InstanceType=desired.instance_type,
        SubnetId=desired.subnet_id,
        MinCount=1,
        MaxCount=1,
    )
    return str(response["Instances"][0]["InstanceId"])


def _interrupt_before_create(
    subject: Subject,
    strategy: int,
    aws: AWSClients,
    build: Builder,
    owner: Owner,
    faults: Faults,
    at: datetime,
) -> Any:
    """Write the intent (stamped ``at``) and die before the create is sent; return the desired state."""
    desired, live = subject.prepare(build)
    before = set(live(aws))
    crash = faults.crash_before(aws, subject.create_operation)
    with pytest.raises(SimulatedCrash):
        _engine(strategy, subject, clock=lambda: at).ensure(
            subject.cls(aws), subject.role, desired, owner.scope()
        )
    faults.clear()
    assert crash.fired == 1
    assert set(live(aws)) == before, "nothing was created"
    assert owner.status().intents[subject.role].started_at == at
    return desired


@pytest.mark.parametrize("strategy", [3, 5])
@pytest.mark.parametrize("subject", INTENT_KINDS, ids=str)
def test_a_strangers_look_alike_after_the_window_is_never_adopted_tagged_or_deleted(
    subject: Subject, strategy: int, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    started = utcnow() - LATE
    desired = _interrupt_before_create(subject, strategy, aws, build, owner, faults, started)
    stranger = _stranger(aws, subject, desired)
    tagging = faults.watch(aws, "CreateTags")
    deleting = faults.watch(aws, subject.delete_operation)
    creating = faults.watch(aws, subject.create_operation)

    if subject.kind == "nat-gateway":
        # The look-alike holds the desired address, so AWS refuses the fresh create: an error, not adoption.
        with pytest.raises(AlreadyExists, match="AlreadyAssociated"):
            _engine(strategy, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())

        assert creating.seen == 1, "made after the window: not a candidate, so the engine creates anew"
        assert subject.role not in owner.status().resources
        assert tagging.seen == 0
    elif subject.kind in DATED:
        observed = _engine(strategy, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())

        assert observed.id != stranger, "made after the window: not the interrupted create's"
        assert creating.seen == 1, "no candidate left: the engine creates anew"
        assert owner.status().resources[subject.role].id == observed.id
        assert subject.role not in owner.status().intents, "the new create's record settles the intent"
        assert all(stranger not in call.get("Resources", []) for call in tagging.params)
    else:
        with pytest.raises(UndecidableIntent) as failure:
            _engine(strategy, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())

        assert failure.value.candidates == [stranger]
        assert stranger in str(failure.value)
        assert "adoption window" in str(failure.value)
        assert (creating.seen, tagging.seen) == (0, 0), "an undecidable intent neither creates nor tags"
        status = owner.status()
        assert subject.role not in status.resources
        intent = status.intents[subject.role]
        assert intent.examined_at is not None
        assert intent.seen == [stranger], "the examination records what it saw, for `capa audit`"
    assert deleting.seen == 0, "nothing is deleted"
    found = _tags(aws, subject, stranger)
    assert found is not None, "the stranger's resource still exists"
    assert not carries_lookup_tags(found, subject.role), "the stranger's resource is not tagged as ours"


def _tags(aws: AWSClients, subject: Subject, resource_id: str) -> dict[str, str] | None:
    observed = subject.cls(aws).describe_by_id(resource_id)
    return None if observed is None else observed.tags


@pytest.mark.parametrize("strategy", [3, 5])
@pytest.mark.parametrize("subject", INTENT_KINDS, ids=str)
def test_the_interrupted_creates_own_resource_is_adopted_when_examined_in_time(
    subject: Subject, strategy: int, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(build)
    before = set(live(aws))
    faults.crash_after(aws, subject.create_operation)
    with pytest.raises(SimulatedCrash):
        _engine(strategy, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())
    faults.clear()
    (created,) = set(live(aws)) - before
    creating = faults.watch(aws, subject.create_operation)

    observed = _engine(strategy, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())

    assert observed.id == created
    assert creating.seen == 0
    assert set(live(aws)) == before | {created}
    status = owner.status()
    assert status.resources[subject.role].id == created
    assert subject.role not in status.intents


@pytest.mark.parametrize("subject", [s for s in INTENT_KINDS if s.kind in DATED], ids=str)
def test_a_dated_resource_of_the_interrupted_create_is_adopted_even_when_examined_late(
    subject: Subject, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(build)
    before = set(live(aws))
    faults.crash_after(aws, subject.create_operation)
    with pytest.raises(SimulatedCrash):
        _engine(3, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())
    faults.clear()
    (created,) = set(live(aws)) - before

    later = utcnow() + LATE
    observed = _engine(3, subject, clock=lambda: later).ensure(
        subject.cls(aws), subject.role, desired, owner.scope()
    )

    assert observed.id == created, "its creation time puts it inside the window"
    assert owner.status().resources[subject.role].id == created


def test_an_undated_resource_first_examined_after_the_window_stays_undecidable_until_removed(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    subject = SUBJECTS["vpc"]
    desired, live = subject.prepare(build)
    faults.crash_after(aws, subject.create_operation)
    with pytest.raises(SimulatedCrash):
        _engine(5, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())
    faults.clear()
    (created,) = live(aws)

    later = utcnow() + LATE
    with pytest.raises(UndecidableIntent) as failure:
        _engine(5, subject, clock=lambda: later).ensure(
            subject.cls(aws), subject.role, desired, owner.scope()
        )

    assert failure.value.candidates == [created], "nothing dates it: it may be anyone's"
    assert subject.role not in owner.status().resources
    assert live(aws).keys() == {created}

    with pytest.raises(UndecidableIntent):  # the examination was late: it stays undecidable
        _engine(5, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())
    assert subject.role not in owner.status().resources

    aws.ec2.call("DeleteVpc", VpcId=created)  # a human removes the resource the report named
    observed = _engine(5, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())

    assert live(aws).keys() == {observed.id}, "nothing left to attribute: the create is made anew"
    assert owner.status().resources[subject.role].id == observed.id


def test_a_look_alike_appearing_after_the_first_examination_is_not_considered(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    subject = SUBJECTS["elastic-ip"]
    desired, live = subject.prepare(build)
    faults.crash_after(aws, subject.create_operation)
    with pytest.raises(SimulatedCrash):
        _engine(5, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())
    faults.clear()
    (ours,) = live(aws)
    early = _stranger(aws, subject, desired)

    with pytest.raises(UndecidableIntent) as failure:
        _engine(5, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())
    assert sorted(failure.value.candidates) == sorted([ours, early])
    assert sorted(owner.status().intents[subject.role].seen) == sorted([ours, early])

    aws.ec2.call("ReleaseAddress", AllocationId=early)  # a human removes the stray the report named
    late = _stranger(aws, subject, desired)  # and someone else allocates a new look-alike

    observed = _engine(5, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())

    assert observed.id == ours, "only what the first examination saw is considered"
    assert owner.status().resources[subject.role].id == ours
    assert live(aws)[late] == {}, "the later look-alike is left alone"


def test_the_examination_is_written_into_the_intent_in_camel_case(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    subject = SUBJECTS["vpc"]
    desired = _interrupt_before_create(subject, 5, aws, build, owner, faults, utcnow() - LATE)
    stranger = _stranger(aws, subject, desired)
    with pytest.raises(UndecidableIntent):
        _engine(5, subject).ensure(subject.cls(aws), subject.role, desired, owner.scope())

    intent = owner.persisted().status.intents[subject.role].model_dump(mode="json", by_alias=True)

    assert intent["seen"] == [stranger]
    assert isinstance(intent["examinedAt"], str)
    assert intent["startedAt"] < intent["examinedAt"]
