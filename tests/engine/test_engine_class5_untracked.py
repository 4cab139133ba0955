"""Strategy class 5, no tags and no token: elastic IP and VPC with every trait lowered (no natural key, so
the engine writes an intent before creating), and route, route table association and internet gateway
attachment as declared (natural keys).

The design's edge case coverage: (1) there is no tagging; (2) a failed status write rolls the create back;
(3) a failed rollback is logged prominently and raised as non-retryable, the resource orphaned; (4) "No":
a crash before recording orphans the resource. The engine does better: a natural key finds the resource
again, and an intent lets a restart adopt the one resource the interrupted create made — or refuse, when it
cannot tell which.
"""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from capa_py.aws.session import AWSClients
from capa_py.engine.errors import NonRetryableError, RetryableError, RollbackFailed, UndecidableIntent
from capa_py.engine.traits import StrategyClass
from resources.internet_gateway import (
    InternetGatewayAttachment,
    InternetGatewayAttachmentDesired,
    attachment_id,
)
from resources.route import Route, RouteDesired, route_id
from resources.route_table import RouteTableAssociation, RouteTableAssociationDesired
from tests.engine.support import (
    SUBJECTS,
    Faults,
    Live,
    Owner,
    SimulatedCrash,
    Subject,
    engine_for,
    intents,
    records,
)
from tests.resources.builders import Builder

EIP = SUBJECTS["elastic-ip"]
VPC = SUBJECTS["vpc"]
ENGINE = engine_for(5, EIP.kind, VPC.kind)


def _routes(table_id: str) -> Live:
    def live(aws: AWSClients) -> dict[str, dict[str, str]]:
        tables = aws.ec2.call("DescribeRouteTables", RouteTableIds=[table_id])["RouteTables"]
        return {
            route_id(table_id, r["DestinationCidrBlock"]): {}
            for t in tables
            for r in t.get("Routes", [])
            if r.get("GatewayId") != "local"
        }

    return live


def _route(build: Builder) -> tuple[Any, Live]:
    table_id = build.route_table(build.vpc().id).id
    return RouteDesired(table_id, "0.0.0.0/0", build.internet_gateway().id), _routes(table_id)


def _association(build: Builder) -> tuple[Any, Live]:
    vpc_id = build.vpc().id
    subnet_id = build.subnet(vpc_id).id
    table_id = build.route_table(vpc_id).id

    def live(aws: AWSClients) -> dict[str, dict[str, str]]:
        filters = [{"Name": "association.subnet-id", "Values": [subnet_id]}]
        tables = aws.ec2.call("DescribeRouteTables", Filters=filters)["RouteTables"]
        return {
            a["RouteTableAssociationId"]: {}
            for t in tables
            for a in t.get("Associations", [])
            if a.get("SubnetId") == subnet_id
        }

    return RouteTableAssociationDesired(table_id, subnet_id), live


def _attachment(build: Builder) -> tuple[Any, Live]:
    vpc_id, gateway_id = build.vpc().id, build.internet_gateway().id

    def live(aws: AWSClients) -> dict[str, dict[str, str]]:
        gateways = aws.ec2.call("DescribeInternetGateways", InternetGatewayIds=[gateway_id])
        return {
            attachment_id(gateway_id, a["VpcId"]): {}
            for g in gateways["InternetGateways"]
            for a in g.get("Attachments", [])
        }

    return InternetGatewayAttachmentDesired(gateway_id, vpc_id), live


ROUTE = Subject("default-route", Route, "DeleteRoute", _route)
KEYED = [
    ROUTE,
    Subject("public-subnet-a-association", RouteTableAssociation, "DisassociateRouteTable", _association),
    Subject("internet-gateway-attachment", InternetGatewayAttachment, "DetachInternetGateway", _attachment),
]
ALL = [EIP, VPC, *KEYED]


def test_class5_covers_lowered_and_declared_kinds(aws: AWSClients) -> None:
    for subject in ALL:
        assert ENGINE.strategy(subject.cls(aws)) == StrategyClass.NO_TAGS_NO_TOKEN, subject.kind
    assert all(ENGINE.traits(s.cls(aws)).natural_key for s in KEYED)
    assert not any(ENGINE.traits(s.cls(aws)).natural_key for s in (EIP, VPC))


@pytest.mark.parametrize("subject", ALL, ids=str)
def test_class5_creates_untagged_records_and_never_calls_create_tags(
    subject: Subject, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(build)
    create_tags = faults.fail(aws, "CreateTags")

    observed = ENGINE.ensure(subject.cls(aws), subject.role, desired, owner.scope())

    assert create_tags.seen == 0, "class 5 has no tagging to fail"
    assert live(aws) == {observed.id: {}}, f"one untagged {subject.kind} expected"
    status = owner.status()
    recorded = status.resources[subject.role]
    assert (recorded.id, recorded.strategy) == (observed.id, "untracked")
    assert subject.role not in status.intents, "recording settles the intent"


def test_class5_address_failed_status_write_rolls_back_and_the_retry_allocates_one(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = EIP.prepare(build)
    owner.store.fail_status_writes(records(EIP.role))
    release = faults.watch(aws, EIP.delete_operation)

    with pytest.raises(RetryableError, match="rolled back") as failure:
        ENGINE.ensure(EIP.cls(aws), EIP.role, desired, owner.scope())

    assert type(failure.value) is RetryableError
    assert release.seen == 1, "an address that cannot be recorded must be released"
    assert live(aws) == {}, "the rollback must leave no address behind (they cost money)"

    owner.store.heal()
    observed = ENGINE.ensure(EIP.cls(aws), EIP.role, desired, owner.scope())

    assert live(aws).keys() == {observed.id}
    assert owner.status().resources[EIP.role].id == observed.id
    assert EIP.role not in owner.status().intents


def test_class5_address_rollback_failure_is_rollback_failed_and_the_intent_adopts_the_orphan_later(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = EIP.prepare(build)
    owner.store.fail_status_writes(records(EIP.role))
    faults.fail(aws, EIP.delete_operation)

    with capture_logs() as logs, pytest.raises(RollbackFailed) as failure:
        ENGINE.ensure(EIP.cls(aws), EIP.role, desired, owner.scope())

    (orphan_id,) = live(aws)
    assert isinstance(failure.value, NonRetryableError)
    assert (failure.value.resource_id, failure.value.kind) == (orphan_id, "elastic-ip")
    orphan_logs = [e for e in logs if e["log_level"] == "error" and e.get("resource_id") == orphan_id]
    assert orphan_logs, f"no error log line names the orphan: {logs}"
    assert "ORPHANED" in orphan_logs[0]["event"], "the orphan log line must stand out"
    assert EIP.role not in owner.status().resources
    assert EIP.role in owner.status().intents, "the intent survives the failed rollback"

    owner.store.heal()
    faults.clear()
    observed = ENGINE.ensure(EIP.cls(aws), EIP.role, desired, owner.scope())

    assert observed.id == orphan_id, "the intent must lead the next attempt to the orphaned address"
    assert live(aws).keys() == {orphan_id}


def test_class5_intent_write_failure_creates_nothing(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = EIP.prepare(build)
    owner.store.fail_status_writes(intents(EIP.role))
    allocations = faults.watch(aws, EIP.create_operation)

    with pytest.raises(RetryableError, match="nothing was created"):
        ENGINE.ensure(EIP.cls(aws), EIP.role, desired, owner.scope())

    assert allocations.seen == 0
    assert live(aws) == {}


def _unmanaged(aws: AWSClients, subject: Subject) -> str:
    """A resource of the subject's shape that is not ours (a user's): a candidate that already existed."""
    if subject is EIP:
        return str(aws.ec2.call("AllocateAddress", Domain="vpc")["AllocationId"])
    return str(aws.ec2.call("CreateVpc", CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"])


@pytest.mark.parametrize("subject", [EIP, VPC], ids=str)
def test_class5_crash_after_create_is_adopted_through_the_intent_after_restart(
    subject: Subject, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(build)
    users = _unmanaged(aws, subject)
    faults.crash_after(aws, subject.create_operation)

    with pytest.raises(SimulatedCrash):
        engine_for(5, subject.kind).ensure(subject.cls(aws), subject.role, desired, owner.scope())

    assert subject.role in owner.status().intents, "the intent was persisted before the create"
    (created_id,) = live(aws).keys() - {users}
    faults.clear()

    observed = engine_for(5, subject.kind).ensure(subject.cls(aws), subject.role, desired, owner.scope())

    assert observed.id == created_id, "the restart must adopt what the interrupted create made"
    assert live(aws).keys() == {users, created_id}, "no second resource; the user's one untouched"
    status = owner.status()
    assert status.resources[subject.role].id == created_id
    assert subject.role not in status.intents


def test_class5_two_candidates_after_a_crash_is_undecidable_and_creates_nothing(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = EIP.prepare(build)
    faults.crash_after(aws, EIP.create_operation)
    with pytest.raises(SimulatedCrash):
        ENGINE.ensure(EIP.cls(aws), EIP.role, desired, owner.scope())
    faults.clear()
    (ours,) = live(aws)
    stranger = _unmanaged(aws, EIP)  # appeared after the intent: indistinguishable from ours
    allocations = faults.watch(aws, EIP.create_operation)

    with pytest.raises(UndecidableIntent) as failure:
        ENGINE.ensure(EIP.cls(aws), EIP.role, desired, owner.scope())

    assert isinstance(failure.value, NonRetryableError)
    assert sorted(failure.value.candidates) == sorted([ours, stranger])
    assert allocations.seen == 0, "an undecidable intent must not create"
    assert live(aws).keys() == {ours, stranger}
    status = owner.status()
    assert EIP.role not in status.resources
    assert EIP.role in status.intents, "the intent waits for a human"


def test_class5_route_failed_status_write_rolls_back_and_the_retry_creates_one(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = ROUTE.prepare(build)
    owner.store.fail_status_writes(records(ROUTE.role))
    delete = faults.watch(aws, ROUTE.delete_operation)

    with pytest.raises(RetryableError, match="rolled back"):
        ENGINE.ensure(ROUTE.cls(aws), ROUTE.role, desired, owner.scope())
    assert delete.seen == 1
    assert live(aws) == {}

    owner.store.heal()
    observed = ENGINE.ensure(ROUTE.cls(aws), ROUTE.role, desired, owner.scope())

    assert live(aws).keys() == {observed.id} == {route_id(desired.route_table_id, "0.0.0.0/0")}
    assert owner.status().resources[ROUTE.role].id == observed.id


def test_class5_route_rollback_failure_is_rollback_failed_and_the_key_finds_it_later(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = ROUTE.prepare(build)
    owner.store.fail_status_writes(records(ROUTE.role))
    faults.fail(aws, ROUTE.delete_operation)

    with capture_logs() as logs, pytest.raises(RollbackFailed) as failure:
        ENGINE.ensure(ROUTE.cls(aws), ROUTE.role, desired, owner.scope())

    (orphan_id,) = live(aws)
    assert failure.value.resource_id == orphan_id
    assert any(e["log_level"] == "error" and e.get("resource_id") == orphan_id for e in logs), logs

    owner.store.heal()
    faults.clear()
    creates = faults.watch(aws, ROUTE.create_operation)
    observed = ENGINE.ensure(ROUTE.cls(aws), ROUTE.role, desired, owner.scope())

    assert observed.id == orphan_id, "the natural key finds the route again"
    assert creates.seen == 0
    assert live(aws).keys() == {orphan_id}
    assert owner.status().resources[ROUTE.role].id == orphan_id


@pytest.mark.parametrize("subject", KEYED, ids=str)
def test_class5_natural_key_crash_after_create_is_found_by_key_after_restart(
    subject: Subject, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired, live = subject.prepare(build)
    faults.crash_after(aws, subject.create_operation)

    with pytest.raises(SimulatedCrash):
        ENGINE.ensure(subject.cls(aws), subject.role, desired, owner.scope())
    (created_id,) = live(aws)
    assert owner.status().intents == {}, "a natural key needs no intent"
    faults.clear()
    creates = faults.watch(aws, subject.create_operation)

    observed = engine_for(5).ensure(subject.cls(aws), subject.role, desired, owner.scope())

    assert observed.id == created_id, "found by key"
    assert creates.seen == 0, "found by key, not created again"
    assert live(aws).keys() == {created_id}
    assert owner.status().resources[subject.role].id == created_id
