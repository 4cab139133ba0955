"""Adoption compares what it finds with what the spec asks for.

A resource the engine has not recorded but finds by its tags or its natural key is adopted only when the
immutable attributes the describe reports match the desired ones. A mismatch raises ``AdoptionRefused``
naming the kind, the id, how it was found and both values, and nothing is tagged, modified, recorded or
deleted; a later delete of the owner leaves the refused resource alone too.
"""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.aws.accounting import call_scope
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine
from capa_py.engine.errors import AdoptionRefused, NonRetryableError
from capa_py.engine.profiles import MOTO
from capa_py.engine.resource import tag_list
from capa_py.engine.tags import managed_tags
from resources.instance import Instance
from resources.load_balancer import LoadBalancer, LoadBalancerDesired
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.route_table import RouteTable, RouteTableDesired
from resources.security_group import SecurityGroup, SecurityGroupDesired
from resources.subnet import Subnet, SubnetDesired
from resources.target_group import TargetGroup, TargetGroupDesired
from resources.vpc import Vpc, VpcDesired
from tests.engine.support import Owner, engine_for, tags_of
from tests.resources.builders import CLUSTER, Builder

ENGINE = Engine(MOTO)


def _ours(role: str, owner: Owner) -> dict[str, str]:
    """This store's tags for ``role``: what a create by this store would have left."""
    return managed_tags(CLUSTER, role, store_uid=owner.store.uid)


def _ec2_tags(role: str, owner: Owner) -> list[dict[str, Any]]:
    return [{"ResourceType": "vpc", "Tags": tag_list(_ours(role, owner))}]


def _refused(failure: pytest.ExceptionInfo[AdoptionRefused], *parts: str) -> None:
    assert isinstance(failure.value, NonRetryableError), "retrying cannot change an immutable attribute"
    assert failure.value.reason == "AdoptionRefused"
    for part in parts:
        assert part in str(failure.value), (part, str(failure.value))


def test_a_vpc_found_by_its_tags_with_another_cidr_is_refused_and_left_as_it_is(
    aws: AWSClients, owner: Owner
) -> None:
    vpc = aws.ec2.call("CreateVpc", CidrBlock="10.1.0.0/16", TagSpecifications=_ec2_tags("vpc", owner))["Vpc"]
    before = tags_of(vpc)

    with call_scope() as calls, pytest.raises(AdoptionRefused) as failure:
        ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.0.0.0/16"), owner.scope())

    _refused(failure, f"vpc {vpc['VpcId']} found by its tags", "cidrBlock 10.1.0.0/16", "10.0.0.0/16")
    assert failure.value.mismatches[0].attribute == "cidrBlock"
    assert calls.total(mutating=True) == 0, calls.mutating_operations()
    assert "vpc" not in owner.status().resources
    (after,) = aws.ec2.call("DescribeVpcs", VpcIds=[vpc["VpcId"]])["Vpcs"]
    assert tags_of(after) == before


def test_a_subnet_found_by_its_key_in_another_zone_is_refused(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    vpc_id = build.vpc().id
    subnet = aws.ec2.call(
        "CreateSubnet", VpcId=vpc_id, CidrBlock="10.0.7.0/24", AvailabilityZone="us-east-1b"
    )["Subnet"]
    desired = SubnetDesired(vpc_id, "10.0.7.0/24", "us-east-1a", is_public=True)
    # Separate tagging (class 3): an untagged holder of the key may be ours, so the key lookup adopts.
    engine = engine_for(3, Subnet.kind)

    with call_scope() as calls, pytest.raises(AdoptionRefused) as failure:
        engine.ensure(Subnet(aws), "public-subnet-a", desired, owner.scope())

    _refused(
        failure,
        f"subnet {subnet['SubnetId']} found by its key {vpc_id}/10.0.7.0/24",
        "availabilityZone us-east-1b",
        "availabilityZone us-east-1a",
    )
    assert calls.total(mutating=True) == 0, "neither tagged nor given a public IP mapping"
    assert "public-subnet-a" not in owner.status().resources


def test_a_security_group_carrying_the_roles_tags_in_another_vpc_is_refused(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    ours, other = build.vpc().id, build.vpc("10.9.0.0/16").id
    group_id = aws.ec2.call(
        "CreateSecurityGroup",
        VpcId=other,
        GroupName="alpha-node",
        Description="node",
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tag_list(_ours("node", owner))}],
    )["GroupId"]
    desired = SecurityGroupDesired(ours, "alpha-node", "node")

    with call_scope() as calls, pytest.raises(AdoptionRefused) as failure:
        ENGINE.ensure(SecurityGroup(aws), "node", desired, owner.scope())

    _refused(failure, f"security-group {group_id} found by its tags", f"vpcId {other}", f"vpcId {ours}")
    assert calls.total(mutating=True) == 0, "no group created in our VPC, no rule authorized"


def test_an_instance_carrying_the_roles_tags_with_another_type_is_refused(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    subnet_id = build.subnet().id
    theirs = build.instance_desired(subnet_id, instance_type="t3.small")
    instance = Instance(aws).create(theirs, _ours("control-plane-0", owner), None)
    desired = build.instance_desired(subnet_id)

    with call_scope() as calls, pytest.raises(AdoptionRefused) as failure:
        ENGINE.ensure(Instance(aws), "control-plane-0", desired, owner.scope())

    _refused(failure, instance.id, "instanceType t3.small", "instanceType t3.medium")
    assert calls.total(mutating=True) == 0
    assert Instance(aws).describe_by_id(instance.id) is not None


def test_a_target_group_found_with_another_port_is_refused(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    vpc_id = build.vpc().id
    existing = TargetGroup(aws).create(
        TargetGroupDesired("alpha-apiserver", vpc_id, port=443), _ours("apiserver-tg", owner), None
    )

    with pytest.raises(AdoptionRefused) as failure:
        ENGINE.ensure(
            TargetGroup(aws), "apiserver-tg", TargetGroupDesired("alpha-apiserver", vpc_id), owner.scope()
        )

    _refused(failure, existing.id, "port 443", "port 6443")


def test_a_load_balancer_found_by_its_name_with_another_scheme_in_another_vpc_is_refused(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    theirs, ours = build.subnet().id, build.subnet(build.vpc("10.9.0.0/16").id, cidr="10.9.1.0/24").id
    existing = LoadBalancer(aws).create(
        LoadBalancerDesired("alpha-apiserver", (theirs,), scheme="internal"),
        _ours("apiserver-lb", owner),
        None,
    )
    their_vpc = existing.attributes["vpc_id"]
    our_vpc = aws.ec2.call("DescribeSubnets", SubnetIds=[ours])["Subnets"][0]["VpcId"]

    with call_scope() as calls, pytest.raises(AdoptionRefused) as failure:
        ENGINE.ensure(
            LoadBalancer(aws), "apiserver-lb", LoadBalancerDesired("alpha-apiserver", (ours,)), owner.scope()
        )

    _refused(
        failure,
        f"load-balancer {existing.id} found by its tags",
        f"scheme internal, vpcId {their_vpc}",
        f"scheme internet-facing, vpcId {our_vpc}",
    )
    assert calls.total(mutating=True) == 0


def test_a_route_table_carrying_the_roles_tags_in_another_vpc_is_refused(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    ours, other = build.vpc().id, build.vpc("10.9.0.0/16").id
    table = RouteTable(aws).create(RouteTableDesired(other), _ours("route-table-public", owner), None)

    with call_scope() as calls, pytest.raises(AdoptionRefused) as failure:
        ENGINE.ensure(RouteTable(aws), "route-table-public", RouteTableDesired(ours), owner.scope())

    _refused(failure, f"route-table {table.id} found by its tags", f"vpcId {other}", f"vpcId {ours}")
    assert calls.total(mutating=True) == 0


def test_a_nat_gateway_carrying_the_roles_tags_in_another_subnet_is_refused(
    aws: AWSClients, build: Builder, owner: Owner
) -> None:
    vpc_id = build.vpc().id
    theirs = build.subnet(vpc_id, cidr="10.0.1.0/24", public=True).id
    ours = build.subnet(vpc_id, cidr="10.0.2.0/24", public=True).id
    gateway = NatGateway(aws).create(
        NatGatewayDesired(theirs, build.elastic_ip().id), _ours("nat-gateway-a", owner), None
    )
    desired = NatGatewayDesired(ours, build.elastic_ip().id)

    with call_scope() as calls, pytest.raises(AdoptionRefused) as failure:
        ENGINE.ensure(NatGateway(aws), "nat-gateway-a", desired, owner.scope())

    _refused(failure, f"nat-gateway {gateway.id} found by its tags", f"subnetId {theirs}", f"subnetId {ours}")
    assert calls.total(mutating=True) == 0, "no second gateway, no tags"


def test_a_vpc_found_by_its_tags_with_the_desired_cidr_is_adopted(aws: AWSClients, owner: Owner) -> None:
    vpc = aws.ec2.call("CreateVpc", CidrBlock="10.0.0.0/16", TagSpecifications=_ec2_tags("vpc", owner))["Vpc"]

    observed = ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.0.0.0/16"), owner.scope())

    assert observed.id == vpc["VpcId"]
    assert owner.status().resources["vpc"].id == vpc["VpcId"]


def test_removing_the_role_leaves_a_refused_resource_alone(aws: AWSClients, owner: Owner) -> None:
    vpc = aws.ec2.call("CreateVpc", CidrBlock="10.1.0.0/16", TagSpecifications=_ec2_tags("vpc", owner))["Vpc"]
    with pytest.raises(AdoptionRefused):
        ENGINE.ensure(Vpc(aws), "vpc", VpcDesired("10.0.0.0/16"), owner.scope())

    with call_scope() as calls:
        ENGINE.remove(Vpc(aws), "vpc", owner.scope(), VpcDesired("10.0.0.0/16"))

    assert calls.by_operation().get("ec2:DeleteVpc", 0) == 0
    assert aws.ec2.call("DescribeVpcs", VpcIds=[vpc["VpcId"]])["Vpcs"], "the VPC was never ours to delete"
