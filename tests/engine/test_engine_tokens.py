"""Client tokens: derived from the owner's uid and the role, so stable across engines and processes and
distinct per role and per owner; sent only where the effective traits say the endpoint honours them.
"""

from __future__ import annotations

import re

import pytest

from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import RetryableError
from capa_py.engine.profiles import AWS, MOTO
from capa_py.engine.tokens import MAX_TOKEN_LENGTH, client_token
from resources.route_table import RouteTable, RouteTableDesired
from tests.engine.support import (
    SUBJECTS,
    Faults,
    FlakyStatusStore,
    Owner,
    SimulatedCrash,
    Subject,
    engine_for,
    records,
    route_tables,
)
from tests.resources.builders import Builder


def test_client_token_is_stable_and_distinct_per_owner_and_role() -> None:
    token = client_token("0b9d6f3e-uid", "nat-gateway-a")

    assert token == client_token("0b9d6f3e-uid", "nat-gateway-a"), "same owner and role: same token"
    assert token != client_token("0b9d6f3e-uid", "nat-gateway-b"), "another role: another token"
    assert token != client_token("5c2a81d0-uid", "nat-gateway-a"), "another owner: another token"
    assert re.fullmatch(r"[0-9a-f]+", token), "AWS wants ASCII"
    assert len(token) <= MAX_TOKEN_LENGTH, "AWS allows up to 64 characters"
    assert "0b9d6f3e" not in token, "the token must not reveal the uid"
    with pytest.raises(ValueError, match="uid"):
        client_token("", "nat-gateway-a")


def test_tokens_are_stable_across_engine_instances_and_distinct_per_role_and_owner(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, flaky_store: FlakyStatusStore, faults: Faults
) -> None:
    vpc_id = build_tokens.vpc().id
    desired = RouteTableDesired(vpc_id)
    other_owner = Owner.create(flaky_store, name="beta")
    creates = faults.watch(aws_tokens, "CreateRouteTable")

    owner.store.fail_status_writes(records("private-route-table-a"), times=1)
    with pytest.raises(RetryableError):
        engine_for(4, "route-table").ensure(
            RouteTable(aws_tokens), "private-route-table-a", desired, owner.scope()
        )
    again = engine_for(4, "route-table").ensure(
        RouteTable(aws_tokens), "private-route-table-a", desired, owner.scope()
    )
    other_role = engine_for(4, "route-table").ensure(
        RouteTable(aws_tokens), "private-route-table-b", desired, owner.scope()
    )
    other_owner_table = engine_for(4, "route-table").ensure(
        RouteTable(aws_tokens), "private-route-table-a", desired, other_owner.scope()
    )

    tokens = [p["ClientToken"] for p in creates.params]
    assert tokens == [
        client_token(owner.uid, "private-route-table-a"),
        client_token(owner.uid, "private-route-table-a"),
        client_token(owner.uid, "private-route-table-b"),
        client_token(other_owner.uid, "private-route-table-a"),
    ]
    assert len({again.id, other_role.id, other_owner_table.id}) == 3
    assert route_tables(aws_tokens, vpc_id).keys() == {again.id, other_role.id, other_owner_table.id}, (
        "the first engine's table was returned to the second engine, not duplicated"
    )


def test_tokens_are_sent_only_where_the_profile_trusts_them(
    aws: AWSClients, aws_tokens: AWSClients, owner: Owner, faults: Faults
) -> None:
    plain = faults.watch(aws, "CreateRouteTable")
    honoured = faults.watch(aws_tokens, "CreateRouteTable")

    Engine(MOTO).ensure(RouteTable(aws), "rtb", RouteTableDesired(Builder(aws).vpc().id), owner.scope())
    Engine(AWS).ensure(
        RouteTable(aws_tokens), "rtb-aws", RouteTableDesired(Builder(aws_tokens).vpc().id), owner.scope()
    )

    (without,) = plain.params
    assert "ClientToken" not in without, "moto ignores tokens: the moto profile must not rely on one"
    assert "TagSpecifications" in without
    (with_token,) = honoured.params
    assert with_token["ClientToken"] == client_token(owner.uid, "rtb-aws"), "class 1 with token on AWS"
    assert "TagSpecifications" in with_token


# -- drift under token strategies --------------------------------------------------------------------------
# AWS keeps a client token's result for at least a day after the resource is deleted (EC2 "Ensuring
# idempotency"): a create repeated with the token of a lost resource returns the lost resource. The token
# server does the same, so these tests show whether a re-create after drift really creates.

TOKEN_DRIFT = [
    pytest.param(1, "instance", id="class1-instance"),
    pytest.param(2, "nat-gateway", id="class2-nat-gateway"),
    pytest.param(4, "route-table", id="class4-route-table"),
]


def _lose(aws: AWSClients, subject: Subject, resource_id: str) -> None:
    """Delete a resource behind the engine's back."""
    observed = subject.cls(aws).describe_by_id(resource_id)
    subject.cls(aws).delete(resource_id)
    if subject.kind == "nat-gateway" and observed is not None:
        # AWS frees a deleted NAT gateway's address; moto keeps it associated.
        for allocation_id in observed.attributes["allocation_ids"]:
            (address,) = aws.ec2.call("DescribeAddresses", AllocationIds=[allocation_id])["Addresses"]
            aws.ec2.call("DisassociateAddress", AssociationId=address["AssociationId"])


def _token_engine(strategy: int, kind: str) -> Engine:
    if strategy == 1:
        return Engine(MOTO.with_overrides({kind: {"client_token": True}}))
    return engine_for(strategy, kind)


@pytest.mark.parametrize(("strategy", "kind"), TOKEN_DRIFT)
def test_drift_under_a_token_strategy_creates_a_replacement_with_a_token_of_its_own(
    strategy: int, kind: str, aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    subject = SUBJECTS[kind]
    desired, live = subject.prepare(build_tokens)
    engine = _token_engine(strategy, kind)
    lost = engine.ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())
    _lose(aws_tokens, subject, lost.id)
    creates = faults.watch(aws_tokens, subject.create_operation)

    replacement = engine.ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())

    assert replacement.id != lost.id, "the lost resource's token returned the lost resource"
    assert live(aws_tokens).keys() == {replacement.id}, "the replacement must exist, alone"
    assert owner.status().resources[subject.role].id == replacement.id
    (params,) = creates.params
    assert params["ClientToken"] != client_token(owner.uid, subject.role), "a fresh token for the replacement"
    again = engine.ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())
    assert again.id == replacement.id, "the replacement is recorded and kept"


@pytest.mark.parametrize(("strategy", "kind"), TOKEN_DRIFT)
def test_drift_replacement_interrupted_by_a_crash_is_found_again_by_its_token(
    strategy: int, kind: str, aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    subject = SUBJECTS[kind]
    desired, live = subject.prepare(build_tokens)
    lost = _token_engine(strategy, kind).ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())
    _lose(aws_tokens, subject, lost.id)
    faults.crash_after(aws_tokens, subject.create_operation)
    with pytest.raises(SimulatedCrash):
        _token_engine(strategy, kind).ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())
    (made_before_crash,) = live(aws_tokens)
    faults.clear()

    restarted = _token_engine(strategy, kind).ensure(
        subject.cls(aws_tokens), subject.role, desired, owner.scope()
    )

    assert restarted.id == made_before_crash, "the restart must get the replacement back, not a third one"
    assert live(aws_tokens).keys() == {made_before_crash}
    assert owner.status().resources[subject.role].id == made_before_crash


def test_remove_after_a_crash_during_a_token_replacement_finds_the_replacement_by_tags(
    aws_tokens: AWSClients, build_tokens: Builder, owner: Owner, faults: Faults
) -> None:
    subject = SUBJECTS["instance"]
    desired, live = subject.prepare(build_tokens)
    engine = _token_engine(1, subject.kind)
    lost = engine.ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())
    _lose(aws_tokens, subject, lost.id)
    faults.crash_after(aws_tokens, subject.create_operation)
    with pytest.raises(SimulatedCrash):
        engine.ensure(subject.cls(aws_tokens), subject.role, desired, owner.scope())
    faults.clear()
    assert len(live(aws_tokens)) == 1

    engine.remove(subject.cls(aws_tokens), subject.role, owner.scope())

    assert live(aws_tokens) == {}, "the unrecorded replacement carries the role's tags: remove must find it"
    assert owner.status().resources == {}
