"""``Engine.remove``: delete the role's resource — recorded, or found by tags, by natural key or through an
intent — then drop its record; requeue (``Waiting``) while AWS is still deleting or dependents remain.
"""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import NonRetryableError, RetryableError, Waiting
from capa_py.engine.profiles import MOTO
from capa_py.engine.tags import managed_tags
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.route import Route, RouteDesired, route_id
from resources.subnet import Subnet, SubnetDesired
from resources.vpc import Vpc, VpcDesired
from tests.engine.support import (
    Faults,
    Owner,
    SimulatedCrash,
    addresses,
    engine_for,
    nat_gateways,
    records,
    subnets,
    vpcs,
)
from tests.resources.builders import ZONE, Builder

ENGINE = Engine(MOTO)
VPC = VpcDesired("10.60.0.0/16")


def test_remove_deletes_the_recorded_resource_and_drops_the_record(aws: AWSClients, owner: Owner) -> None:
    created = ENGINE.ensure(Vpc(aws), "vpc", VPC, owner.scope())

    ENGINE.remove(Vpc(aws), "vpc", owner.scope())

    assert created.id not in vpcs(aws)
    assert owner.status().resources == {}


def test_remove_finds_an_unrecorded_resource_by_tags(aws: AWSClients, owner: Owner) -> None:
    owner.store.fail_status_writes(records("vpc"), times=1)
    with pytest.raises(RetryableError):
        ENGINE.ensure(Vpc(aws), "vpc", VPC, owner.scope())
    assert len(vpcs(aws)) == 1
    assert owner.status().resources == {}
    untouched = Vpc(aws).create(VPC, managed_tags("beta", "vpc"), None)

    ENGINE.remove(Vpc(aws), "vpc", owner.scope())

    assert vpcs(aws).keys() == {untouched.id}, "only this cluster's VPC for the role is deleted"


def test_remove_finds_an_unrecorded_route_by_its_natural_key(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    table_id = build.route_table(build.vpc().id).id
    desired = RouteDesired(table_id, "0.0.0.0/0", build.internet_gateway().id)
    Route(aws).create(desired, None, None)

    ENGINE.remove(Route(aws), "default-route", owner.scope(), desired)

    assert Route(aws).describe_by_id(route_id(table_id, "0.0.0.0/0")) is None


def test_remove_leaves_a_keyed_resource_this_cluster_does_not_own(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    vpc_id = build.vpc().id
    desired = SubnetDesired(vpc_id, "10.0.9.0/24", ZONE)
    theirs = Subnet(aws).create(desired, managed_tags("beta", "public-subnet-a"), None)

    ENGINE.remove(Subnet(aws), "public-subnet-a", owner.scope(), desired)

    assert subnets(aws, vpc_id).keys() == {theirs.id}


def test_remove_finds_what_an_interrupted_create_made_through_the_intent(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    engine = engine_for(5, "elastic-ip")
    users = aws.ec2.call("AllocateAddress", Domain="vpc")["AllocationId"]
    faults.crash_after(aws, "AllocateAddress")
    with pytest.raises(SimulatedCrash):
        engine.ensure(ElasticIp(aws), "nat-address-a", ElasticIpDesired(), owner.scope())
    faults.clear()
    assert len(addresses(aws)) == 2
    assert "nat-address-a" in owner.status().intents

    engine.remove(ElasticIp(aws), "nat-address-a", owner.scope(), ElasticIpDesired())

    assert addresses(aws).keys() == {users}, "the interrupted allocation is released, the user's kept"
    assert owner.status().intents == {}
    assert owner.status().resources == {}


def test_remove_with_an_undecidable_intent_deletes_nothing(
    aws: AWSClients, owner: Owner, faults: Faults
) -> None:
    engine = engine_for(5, "elastic-ip")
    faults.crash_after(aws, "AllocateAddress")
    with pytest.raises(SimulatedCrash):
        engine.ensure(ElasticIp(aws), "nat-address-a", ElasticIpDesired(), owner.scope())
    faults.clear()
    aws.ec2.call("AllocateAddress", Domain="vpc")  # a second candidate appears
    releases = faults.watch(aws, "ReleaseAddress")

    with pytest.raises(NonRetryableError, match="cannot decide"):
        engine.remove(ElasticIp(aws), "nat-address-a", owner.scope(), ElasticIpDesired())

    assert releases.seen == 0
    assert len(addresses(aws)) == 2
    assert "nat-address-a" in owner.status().intents


def _deleting_nat_gateways(parsed: dict[str, Any]) -> None:
    """AWS shows a deleted NAT gateway as ``deleting`` for minutes; moto marks it ``deleted`` at once."""
    for gateway in parsed.get("NatGateways", []):
        if gateway.get("State") == "deleted":
            gateway["State"] = "deleting"


def test_remove_waits_for_a_slow_nat_gateway_deletion_and_deletes_once(
    aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    desired = NatGatewayDesired(build.subnet(public=True).id, build.elastic_ip().id)
    gateway = ENGINE.ensure(NatGateway(aws), "nat-gateway-a", desired, owner.scope())
    slow = faults.rewrite(aws, "DescribeNatGateways", _deleting_nat_gateways)
    deletes = faults.watch(aws, "DeleteNatGateway")

    with pytest.raises(Waiting, match="deletion in progress") as first:
        ENGINE.remove(NatGateway(aws), "nat-gateway-a", owner.scope())
    with pytest.raises(Waiting, match="deletion in progress"):
        ENGINE.remove(NatGateway(aws), "nat-gateway-a", owner.scope())

    assert first.value.requeue_after > 0
    assert deletes.seen == 1, "a gateway already deleting needs no second DeleteNatGateway"
    assert slow.seen > 0
    assert owner.status().resources["nat-gateway-a"].id == gateway.id, "recorded until it is gone"

    faults.clear()  # AWS finished deleting
    ENGINE.remove(NatGateway(aws), "nat-gateway-a", owner.scope())

    assert nat_gateways(aws) == {}
    assert owner.status().resources == {}


def test_remove_waits_while_dependents_remain(aws: AWSClients, build: Builder, owner: Owner) -> None:
    created = ENGINE.ensure(Vpc(aws), "vpc", VPC, owner.scope())
    subnet = build.subnet(created.id, cidr="10.60.1.0/24")

    with pytest.raises(Waiting, match="DependencyViolation"):
        ENGINE.remove(Vpc(aws), "vpc", owner.scope())
    assert created.id in vpcs(aws)
    assert owner.status().resources["vpc"].id == created.id

    aws.ec2.call("DeleteSubnet", SubnetId=subnet.id)
    ENGINE.remove(Vpc(aws), "vpc", owner.scope())

    assert vpcs(aws) == {}
    assert owner.status().resources == {}


def test_remove_of_a_resource_already_gone_only_drops_the_record(aws: AWSClients, owner: Owner) -> None:
    created = ENGINE.ensure(Vpc(aws), "vpc", VPC, owner.scope())
    aws.ec2.call("DeleteVpc", VpcId=created.id)

    ENGINE.remove(Vpc(aws), "vpc", owner.scope())

    assert owner.status().resources == {}


@pytest.mark.parametrize("strategy", [3, 5])
def test_remove_finds_an_untagged_keyed_resource_an_interrupted_create_left(
    strategy: int, aws: AWSClients, build: Builder, owner: Owner, faults: Faults
) -> None:
    """Under a profile where a subnet is not tagged at creation, an interrupted create leaves it untagged
    and unrecorded; ensure would adopt it by its key, so remove must find it by its key too — but never
    one another cluster owns."""
    engine = engine_for(strategy, "subnet")
    vpc_id = build.vpc().id
    ours = SubnetDesired(vpc_id, "10.0.9.0/24", ZONE)
    theirs = SubnetDesired(vpc_id, "10.0.10.0/24", ZONE)
    foreign = Subnet(aws).create(theirs, managed_tags("beta", "public-subnet-b"), None)
    faults.crash_after(aws, "CreateSubnet")
    with pytest.raises(SimulatedCrash):
        engine.ensure(Subnet(aws), "public-subnet-a", ours, owner.scope())
    faults.clear()
    assert len(subnets(aws, vpc_id)) == 2
    assert owner.status().resources == {}

    engine.remove(Subnet(aws), "public-subnet-a", owner.scope(), ours)
    engine.remove(Subnet(aws), "public-subnet-b", owner.scope(), theirs)

    assert subnets(aws, vpc_id).keys() == {foreign.id}, "ours removed by key, the other cluster's kept"
