"""Network resource classes' own behaviour against moto: VPC DNS attributes, public subnets, gateway
attachments, elastic IP and route table candidates, NAT gateway states, routes and associations re-pointed
in place."""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.aws.errors import AlreadyExists, DependencyViolation, NotFound
from capa_py.aws.session import AWSClients
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from resources.internet_gateway import (
    InternetGateway,
    InternetGatewayAttachment,
    InternetGatewayAttachmentDesired,
)
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.route import Route, RouteDesired
from resources.route_table import (
    RouteTable,
    RouteTableAssociation,
    RouteTableAssociationDesired,
    RouteTableDesired,
    target_parameter,
)
from resources.subnet import Subnet, SubnetDesired
from resources.vpc import Vpc, VpcDesired
from tests.resources.builders import ZONE, Builder


def _vpc_attribute(aws: AWSClients, vpc_id: str, attribute: str) -> bool:
    member = attribute[0].upper() + attribute[1:]
    return bool(aws.ec2.call("DescribeVpcAttribute", VpcId=vpc_id, Attribute=attribute)[member]["Value"])


# -- VPC -----------------------------------------------------------------------------------------------


def test_vpc_update_turns_dns_hostnames_on_then_changes_nothing(build: Builder) -> None:
    vpcs = Vpc(build.aws)
    desired = VpcDesired("10.0.0.0/16")
    vpc = vpcs.create(desired, build.tags("vpc"), None)
    assert not _vpc_attribute(build.aws, vpc.id, "enableDnsHostnames"), "AWS default for a new VPC"

    assert vpcs.update(vpc, desired) is True
    assert _vpc_attribute(build.aws, vpc.id, "enableDnsHostnames")
    assert _vpc_attribute(build.aws, vpc.id, "enableDnsSupport")
    assert vpcs.update(vpc, desired) is False

    assert vpcs.update(vpc, VpcDesired("10.0.0.0/16", enable_dns_hostnames=False)) is True
    assert not _vpc_attribute(build.aws, vpc.id, "enableDnsHostnames")


def test_vpc_candidates_are_unowned_vpcs_with_the_cidr(build: Builder) -> None:
    vpcs = Vpc(build.aws)
    desired = VpcDesired("10.7.0.0/16")
    untagged = vpcs.create(desired, None, None)
    vpcs.create(desired, build.tags("vpc"), None)  # owned by a cluster: not a candidate
    vpcs.create(VpcDesired("10.8.0.0/16"), None, None)  # another CIDR

    assert [o.id for o in vpcs.describe_candidates(desired)] == [untagged.id]
    assert vpcs.describe_candidates(VpcDesired("172.31.0.0/16")) == [], "the default VPC is never a candidate"


# -- subnet --------------------------------------------------------------------------------------------


def test_subnet_update_maps_public_ips_for_public_subnets_only(build: Builder) -> None:
    subnets = Subnet(build.aws)
    vpc_id = build.vpc().id
    public = SubnetDesired(vpc_id, "10.0.1.0/24", ZONE, is_public=True)
    subnet = subnets.create(public, build.tags("public"), None)
    assert subnet.attributes["map_public_ip_on_launch"] is False

    assert subnets.update(subnet, public) is True
    refreshed = subnets.describe_by_id(subnet.id)
    assert refreshed is not None
    assert refreshed.attributes["map_public_ip_on_launch"] is True
    assert subnets.update(refreshed, public) is False

    private = SubnetDesired(vpc_id, "10.0.1.0/24", ZONE, is_public=False)
    assert subnets.update(refreshed, private) is True
    final = subnets.describe_by_id(subnet.id)
    assert final is not None
    assert final.attributes["map_public_ip_on_launch"] is False


def test_subnet_natural_key_is_vpc_and_cidr(build: Builder) -> None:
    subnets = Subnet(build.aws)
    first_vpc, second_vpc = build.vpc().id, build.vpc().id
    subnet = subnets.create(SubnetDesired(first_vpc, "10.0.3.0/24", ZONE), None, None)

    assert subnets.describe_by_key(SubnetDesired(second_vpc, "10.0.3.0/24", ZONE)) is None
    found = subnets.describe_by_key(SubnetDesired(first_vpc, "10.0.3.0/24", ZONE))
    assert found is not None
    assert found.id == subnet.id
    assert found.attributes == {
        "vpc_id": first_vpc,
        "cidr_block": "10.0.3.0/24",
        "availability_zone": ZONE,
        "map_public_ip_on_launch": False,
    }


# -- internet gateway and attachment -------------------------------------------------------------------


def test_internet_gateway_attachment_lifecycle(build: Builder) -> None:
    gateways = InternetGateway(build.aws)
    attachments = InternetGatewayAttachment(build.aws)
    gateway_id, vpc_id = build.internet_gateway().id, build.vpc().id
    desired = InternetGatewayAttachmentDesired(gateway_id, vpc_id)

    attachment = attachments.create(desired, None, None)
    assert attachment.id == f"{gateway_id}:{vpc_id}"
    gateway = gateways.describe_by_id(gateway_id)
    assert gateway is not None
    assert gateway.state == "attached"
    with pytest.raises(AlreadyExists):
        attachments.create(desired, None, None)
    with pytest.raises(DependencyViolation):
        gateways.delete(gateway_id)  # still attached

    attachments.delete(attachment.id)
    assert attachments.describe_by_key(desired) is None
    with pytest.raises(NotFound):
        attachments.delete(attachment.id)  # Gateway.NotAttached means already detached
    gateways.delete(gateway_id)
    assert gateways.describe_by_id(gateway_id) is None


def test_attachment_of_gateway_to_another_vpc_is_not_this_attachment(build: Builder) -> None:
    attachments = InternetGatewayAttachment(build.aws)
    gateway_id, vpc_id, other_vpc = build.internet_gateway().id, build.vpc().id, build.vpc().id
    attachments.create(InternetGatewayAttachmentDesired(gateway_id, vpc_id), None, None)

    assert attachments.describe_by_key(InternetGatewayAttachmentDesired(gateway_id, other_vpc)) is None
    with pytest.raises(ValueError, match="malformed internet-gateway-attachment id"):
        attachments.describe_by_id(gateway_id)


# -- elastic IP ----------------------------------------------------------------------------------------


def test_elastic_ip_candidates_are_untagged_and_unassociated(build: Builder) -> None:
    addresses = ElasticIp(build.aws)
    untagged = addresses.create(ElasticIpDesired(), None, None)
    addresses.create(ElasticIpDesired(), build.tags("eip"), None)
    user_named = addresses.create(ElasticIpDesired(), None, None)
    addresses.tag(user_named.id, {"Name": "someone-elses"})
    in_use = addresses.create(ElasticIpDesired(), None, None)
    instance = build.instance()
    build.aws.ec2.call("AssociateAddress", AllocationId=in_use.id, InstanceId=instance.id)

    assert [o.id for o in addresses.describe_candidates(ElasticIpDesired())] == [untagged.id]
    assert untagged.attributes["public_ip"]


# -- NAT gateway ---------------------------------------------------------------------------------------


def test_nat_gateway_states_and_slow_delete(build: Builder, lookup: Any) -> None:
    gateways = NatGateway(build.aws)
    desired = NatGatewayDesired(build.subnet(public=True).id, build.elastic_ip().id)
    created = gateways.create(desired, build.tags("nat"), "nat-token")
    observed = gateways.describe_by_id(created.id)
    assert observed is not None
    assert gateways.is_ready(observed) == (observed.state == "available")
    assert observed.attributes["allocation_ids"] == [desired.allocation_id]
    assert gateways.deletion_is_slow

    gateways.delete(created.id)

    assert gateways.describe_by_id(created.id) is None, "deleted gateways stay listed by AWS but are gone"
    assert gateways.describe_by_tags(lookup("nat"), desired) == []
    with pytest.raises(NotFound):
        gateways.delete(created.id)


def test_nat_gateway_candidates_use_the_desired_subnet_and_address(build: Builder) -> None:
    gateways = NatGateway(build.aws)
    subnet_id = build.subnet(public=True).id
    desired = NatGatewayDesired(subnet_id, build.elastic_ip().id)
    untagged = gateways.create(desired, None, None)
    gateways.create(NatGatewayDesired(subnet_id, build.elastic_ip().id), None, None)  # another address

    assert [o.id for o in gateways.describe_candidates(desired)] == [untagged.id]
    assert gateways.describe_by_tags({"sigs.k8s.io/cluster-api-provider-aws/role": "nat"}, desired) == [], (
        "moto ignores tag: filters on DescribeNatGateways; the class checks tags itself"
    )


# -- route tables, routes, associations ----------------------------------------------------------------


def test_route_table_candidates_skip_main_and_owned_tables(build: Builder) -> None:
    tables = RouteTable(build.aws)
    vpc_id = build.vpc().id
    untagged = tables.create(RouteTableDesired(vpc_id), None, None)
    build.route_table(vpc_id)  # owned

    candidates = tables.describe_candidates(RouteTableDesired(vpc_id))
    assert [o.id for o in candidates] == [untagged.id]
    observed = tables.describe_by_id(untagged.id)
    assert observed is not None
    assert observed.attributes["routes"] == [
        {"destination": "10.0.0.0/16", "target_id": "local", "state": "active"}
    ]


def _public_route_setup(build: Builder) -> tuple[str, str, str]:
    vpc_id = build.vpc().id
    gateway_id = build.internet_gateway().id
    InternetGatewayAttachment(build.aws).create(
        InternetGatewayAttachmentDesired(gateway_id, vpc_id), None, None
    )
    return vpc_id, build.route_table(vpc_id).id, gateway_id


def test_route_update_replaces_the_target_in_place(build: Builder) -> None:
    routes = Route(build.aws)
    vpc_id, table_id, gateway_id = _public_route_setup(build)
    route = routes.create(RouteDesired(table_id, "0.0.0.0/0", gateway_id), None, None)
    assert route.id == f"{table_id}|0.0.0.0/0"
    with pytest.raises(AlreadyExists):
        routes.create(RouteDesired(table_id, "0.0.0.0/0", gateway_id), None, None)

    subnet_id = build.subnet(vpc_id, public=True).id
    nat = NatGateway(build.aws).create(NatGatewayDesired(subnet_id, build.elastic_ip().id), None, None)
    to_nat = RouteDesired(table_id, "0.0.0.0/0", nat.id)
    observed = routes.describe_by_key(to_nat)
    assert observed is not None
    assert observed.attributes["target_id"] == gateway_id

    assert routes.update(observed, to_nat) is True
    replaced = routes.describe_by_id(route.id)
    assert replaced is not None
    assert replaced.attributes["target_id"] == nat.id
    assert routes.update(replaced, to_nat) is False
    assert routes.describe_by_key(RouteDesired(table_id, "10.9.0.0/16", gateway_id)) is None

    routes.delete(route.id)
    assert routes.describe_by_id(route.id) is None
    with pytest.raises(NotFound):
        routes.delete(route.id)


def test_route_targets_name_their_create_parameter() -> None:
    assert target_parameter("igw-0abc") == "GatewayId"
    assert target_parameter("nat-0abc") == "NatGatewayId"
    with pytest.raises(ValueError, match="unsupported route target"):
        target_parameter("sg-0abc")


def test_association_update_repoints_the_subnet_and_gets_a_new_id(build: Builder) -> None:
    associations = RouteTableAssociation(build.aws)
    vpc_id = build.vpc().id
    subnet_id = build.subnet(vpc_id).id
    first_table, second_table = build.route_table(vpc_id).id, build.route_table(vpc_id).id

    association = associations.create(RouteTableAssociationDesired(first_table, subnet_id), None, None)
    assert association.id.startswith("rtbassoc-")

    desired = RouteTableAssociationDesired(second_table, subnet_id)
    observed = associations.describe_by_key(desired)
    assert observed is not None
    assert observed.id == association.id
    assert observed.attributes["route_table_id"] == first_table

    assert associations.update(observed, desired) is True
    assert observed.id != association.id, "ReplaceRouteTableAssociation gives a new association id"
    found = associations.describe_by_key(desired)
    assert found is not None
    assert (found.id, found.attributes["route_table_id"]) == (observed.id, second_table)
    assert associations.describe_by_id(association.id) is None
    assert associations.update(found, desired) is False

    associations.delete(found.id)
    assert associations.describe_by_key(desired) is None
