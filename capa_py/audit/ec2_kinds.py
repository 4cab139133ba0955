"""Describe calls for the EC2 kinds the audit knows, each item turned into a :class:`Found`.

Every kind is one row of :data:`EC2_KINDS` — the describe operation, its result key, the filter naming an id
and the filter naming a VPC, and how an item becomes a Found — rather than one function per kind repeating
the same paginated call. :func:`describe_ec2` lists a kind whole, for some ids, or inside some VPCs.
Narrowing by filter rather than by a ``…Ids`` parameter matters: an ids parameter fails the whole call when
one id is gone (and the tagging API lags behind deletes), a filter just matches less.

A converter returns nothing for what is not a resource of its own: terminated instances, deleted NAT
gateways, volumes attached to an instance, network interfaces in use (an instance's, a NAT gateway's or a
load balancer's, which go with their owner). What remains can leak on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.audit.model import Found
from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClients
from capa_py.engine.resource import tag_dict
from resources.internet_gateway import attachment_id
from resources.route import route_id

Item = Mapping[str, Any]
Converter = Callable[[Item, str], list[Found]]
FILTER_VALUES_PER_CALL = 100

_GONE_INSTANCE_STATES = frozenset({"terminated", "shutting-down"})
_GONE_NAT_STATES = frozenset({"deleted", "failed"})
_GONE_ENDPOINT_STATES = frozenset({"deleted", "failed", "rejected", "expired"})
_LIVE_ATTACHMENT_STATES = frozenset({"attaching", "attached", "available"})
_ROUTE_TARGETS = ("GatewayId", "NatGatewayId", "NetworkInterfaceId", "InstanceId", "VpcPeeringConnectionId")


def _vpc(item: Item, region: str) -> list[Found]:
    return [
        Found(
            region,
            "vpc",
            item["VpcId"],
            tag_dict(item.get("Tags")),
            state=item.get("State"),
            attributes={"cidr_block": item.get("CidrBlock"), "is_default": bool(item.get("IsDefault"))},
        )
    ]


def _subnet(item: Item, region: str) -> list[Found]:
    return [
        Found(
            region,
            "subnet",
            item["SubnetId"],
            tag_dict(item.get("Tags")),
            state=item.get("State"),
            vpc_id=item.get("VpcId"),
            attributes={
                "vpc_id": item.get("VpcId"),
                "cidr_block": item.get("CidrBlock"),
                "availability_zone": item.get("AvailabilityZone"),
            },
        )
    ]


def _internet_gateway(item: Item, region: str) -> list[Found]:
    attached = [
        str(a["VpcId"])
        for a in item.get("Attachments", [])
        if a.get("VpcId") and a.get("State") in _LIVE_ATTACHMENT_STATES
    ]
    return [
        Found(
            region,
            "internet-gateway",
            item["InternetGatewayId"],
            tag_dict(item.get("Tags")),
            state="attached" if attached else "detached",
            vpc_id=attached[0] if attached else None,
            attributes={"attached_vpcs": attached},
        )
    ]


def _elastic_ip(item: Item, region: str) -> list[Found]:
    if not item.get("AllocationId"):  # an EC2-Classic address: not something capa-py makes
        return []
    return [
        Found(
            region,
            "elastic-ip",
            item["AllocationId"],
            tag_dict(item.get("Tags")),
            state="associated" if item.get("AssociationId") else "unassociated",
            name=item.get("PublicIp"),
            attributes={
                "domain": item.get("Domain"),
                "association_id": item.get("AssociationId"),
                "network_interface_id": item.get("NetworkInterfaceId"),
                "instance_id": item.get("InstanceId") or None,
            },
        )
    ]


def _nat_gateway(item: Item, region: str) -> list[Found]:
    if item.get("State") in _GONE_NAT_STATES:
        return []
    addresses = item.get("NatGatewayAddresses", [])
    return [
        Found(
            region,
            "nat-gateway",
            item["NatGatewayId"],
            tag_dict(item.get("Tags")),
            state=item.get("State"),
            vpc_id=item.get("VpcId"),
            created_at=item.get("CreateTime"),
            attributes={
                "subnet_id": item.get("SubnetId"),
                "allocation_ids": [a["AllocationId"] for a in addresses if a.get("AllocationId")],
                "network_interface_ids": [
                    a["NetworkInterfaceId"] for a in addresses if a.get("NetworkInterfaceId")
                ],
            },
        )
    ]


def _route_table(item: Item, region: str) -> list[Found]:
    associations = [
        {
            "id": a.get("RouteTableAssociationId"),
            "subnet_id": a.get("SubnetId"),
            "main": bool(a.get("Main")),
        }
        for a in item.get("Associations", [])
        if a.get("AssociationState", {}).get("State", "associated") in ("associating", "associated")
    ]
    routes = [
        {
            "destination": r.get("DestinationCidrBlock") or r.get("DestinationIpv6CidrBlock"),
            "target_id": next((str(r[k]) for k in _ROUTE_TARGETS if r.get(k)), None),
            "origin": r.get("Origin"),
            "state": r.get("State"),
        }
        for r in item.get("Routes", [])
    ]
    return [
        Found(
            region,
            "route-table",
            item["RouteTableId"],
            tag_dict(item.get("Tags")),
            state="available",
            vpc_id=item.get("VpcId"),
            attributes={
                "vpc_id": item.get("VpcId"),
                "main": any(a["main"] for a in associations),
                "associations": associations,
                "routes": routes,
            },
        )
    ]


def _group_references(permissions: Iterable[Item]) -> list[str]:
    pairs = [pair for permission in permissions for pair in permission.get("UserIdGroupPairs", [])]
    return sorted({str(pair["GroupId"]) for pair in pairs if pair.get("GroupId")})


def _security_group(item: Item, region: str) -> list[Found]:
    return [
        Found(
            region,
            "security-group",
            item["GroupId"],
            tag_dict(item.get("Tags")),
            state="available",
            vpc_id=item.get("VpcId"),
            name=item.get("GroupName"),
            attributes={
                "group_name": item.get("GroupName"),
                "is_default": item.get("GroupName") == "default",
                "references": _group_references(
                    [*item.get("IpPermissions", []), *item.get("IpPermissionsEgress", [])]
                ),
            },
        )
    ]


def _network_interface(item: Item, region: str) -> list[Found]:
    in_use = item.get("Status") != "available" or item.get("Attachment", {}).get("InstanceId")
    if in_use or item.get("RequesterManaged") or item.get("InterfaceType", "interface") != "interface":
        return []
    return [
        Found(
            region,
            "network-interface",
            item["NetworkInterfaceId"],
            tag_dict(item.get("TagSet") or item.get("Tags")),
            state=item.get("Status"),
            vpc_id=item.get("VpcId"),
            attributes={"subnet_id": item.get("SubnetId"), "description": item.get("Description") or ""},
        )
    ]


def _volume(item: Item, region: str) -> list[Found]:
    if item.get("State") != "available":  # in use: it goes with its instance
        return []
    return [
        Found(
            region,
            "volume",
            item["VolumeId"],
            tag_dict(item.get("Tags")),
            state=item.get("State"),
            created_at=item.get("CreateTime"),
            attributes={"availability_zone": item.get("AvailabilityZone"), "size": item.get("Size")},
        )
    ]


def _instances(reservation: Item, region: str) -> list[Found]:
    found: list[Found] = []
    for item in reservation.get("Instances", []):
        state = item.get("State", {}).get("Name")
        if state in _GONE_INSTANCE_STATES:
            continue
        found.append(
            Found(
                region,
                "instance",
                item["InstanceId"],
                tag_dict(item.get("Tags")),
                state=state,
                vpc_id=item.get("VpcId"),
                created_at=item.get("LaunchTime"),
                attributes={
                    "subnet_id": item.get("SubnetId"),
                    "image_id": item.get("ImageId"),
                    "instance_type": item.get("InstanceType"),
                    "key_name": item.get("KeyName"),
                    "security_group_ids": sorted(g["GroupId"] for g in item.get("SecurityGroups", [])),
                },
            )
        )
    return found


def _launch_template(item: Item, region: str) -> list[Found]:
    return [
        Found(
            region,
            "launch-template",
            item["LaunchTemplateId"],
            tag_dict(item.get("Tags")),
            state="available",
            created_at=item.get("CreateTime"),
            name=item.get("LaunchTemplateName"),
        )
    ]


def _vpc_endpoint(item: Item, region: str) -> list[Found]:
    state = str(item.get("State", "")).lower()
    if state in _GONE_ENDPOINT_STATES:
        return []
    return [
        Found(
            region,
            "vpc-endpoint",
            item["VpcEndpointId"],
            tag_dict(item.get("Tags")),
            state=state,
            vpc_id=item.get("VpcId"),
            created_at=item.get("CreationTimestamp"),
            name=item.get("ServiceName"),
            attributes={"network_interface_ids": list(item.get("NetworkInterfaceIds", []))},
        )
    ]


@dataclass(frozen=True)
class EC2Kind:
    operation: str
    result_key: str
    convert: Converter
    id_filter: str | None
    """The filter naming an id; None: the endpoint may not support one, so ids are matched here."""
    vpc_filter: str | None = "vpc-id"
    filter_param: str = "Filters"


EC2_KINDS: dict[str, EC2Kind] = {
    "vpc": EC2Kind("DescribeVpcs", "Vpcs", _vpc, "vpc-id", vpc_filter=None),
    "subnet": EC2Kind("DescribeSubnets", "Subnets", _subnet, "subnet-id"),
    "internet-gateway": EC2Kind(
        "DescribeInternetGateways",
        "InternetGateways",
        _internet_gateway,
        "internet-gateway-id",
        vpc_filter="attachment.vpc-id",
    ),
    "elastic-ip": EC2Kind("DescribeAddresses", "Addresses", _elastic_ip, "allocation-id", vpc_filter=None),
    "nat-gateway": EC2Kind(
        "DescribeNatGateways", "NatGateways", _nat_gateway, "nat-gateway-id", filter_param="Filter"
    ),
    "route-table": EC2Kind("DescribeRouteTables", "RouteTables", _route_table, "route-table-id"),
    "security-group": EC2Kind("DescribeSecurityGroups", "SecurityGroups", _security_group, "group-id"),
    "network-interface": EC2Kind(
        "DescribeNetworkInterfaces", "NetworkInterfaces", _network_interface, "network-interface-id"
    ),
    "volume": EC2Kind("DescribeVolumes", "Volumes", _volume, "volume-id", vpc_filter=None),
    "instance": EC2Kind("DescribeInstances", "Reservations", _instances, "instance-id"),
    "launch-template": EC2Kind(
        "DescribeLaunchTemplates", "LaunchTemplates", _launch_template, None, vpc_filter=None
    ),
    "vpc-endpoint": EC2Kind("DescribeVpcEndpoints", "VpcEndpoints", _vpc_endpoint, None),
}


def _chunks(values: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(values), FILTER_VALUES_PER_CALL):
        yield list(values[start : start + FILTER_VALUES_PER_CALL])


def describe_ec2(
    aws: AWSClients,
    kind: str,
    *,
    ids: Sequence[str] | None = None,
    vpc_ids: Sequence[str] | None = None,
) -> list[Found]:
    """Resources of an EC2 kind: all of them, those with the given ids, or those in the given VPCs."""
    spec = EC2_KINDS[kind]
    if ids is not None and not ids:
        return []
    if vpc_ids is not None and (not vpc_ids or spec.vpc_filter is None):
        return []
    calls: list[list[dict[str, Any]]] = [[]]
    if ids is not None and spec.id_filter is not None:
        calls = [[{"Name": spec.id_filter, "Values": chunk}] for chunk in _chunks(sorted(set(ids)))]
    elif vpc_ids is not None and spec.vpc_filter is not None:
        calls = [[{"Name": spec.vpc_filter, "Values": chunk}] for chunk in _chunks(sorted(set(vpc_ids)))]
    found: list[Found] = []
    for filters in calls:
        params = {spec.filter_param: filters} if filters else {}
        try:
            items = list(aws.ec2.pages(spec.operation, spec.result_key, **params))
        except NotFound:
            items = []
        for item in items:
            found.extend(spec.convert(item, aws.region))
    if ids is not None and spec.id_filter is None:
        wanted = set(ids)
        found = [f for f in found if f.id in wanted]
    return found


# -- parts of a resource that are resources of their own to capa-py (they are recorded under roles) --------


def route_table_parts(table: Found) -> list[Found]:
    """A route table's routes (but the local one) and subnet associations (but the main one)."""
    parts: list[Found] = []
    for route in table.attributes.get("routes", []):
        if route["origin"] != "CreateRoute" or not route["destination"] or route["target_id"] == "local":
            continue
        parts.append(
            Found(
                table.region,
                "route",
                route_id(table.id, route["destination"]),
                state=route["state"],
                vpc_id=table.vpc_id,
                parent=table.id,
                attributes={"route_table_id": table.id, "target_id": route["target_id"]},
            )
        )
    for association in table.attributes.get("associations", []):
        if association["main"] or not association["id"]:
            continue
        parts.append(
            Found(
                table.region,
                "route-table-association",
                association["id"],
                state="associated",
                vpc_id=table.vpc_id,
                parent=table.id,
                attributes={"route_table_id": table.id, "subnet_id": association["subnet_id"]},
            )
        )
    return parts


def internet_gateway_parts(gateway: Found) -> list[Found]:
    """An internet gateway's attachments, ``igw-…:vpc-…`` as the engine records them."""
    return [
        Found(
            gateway.region,
            "internet-gateway-attachment",
            attachment_id(gateway.id, vpc_id),
            state="attached",
            vpc_id=vpc_id,
            parent=gateway.id,
            attributes={"internet_gateway_id": gateway.id, "vpc_id": vpc_id},
        )
        for vpc_id in gateway.attributes.get("attached_vpcs", [])
    ]


def security_group_rules_referencing(
    aws: AWSClients, groups: Mapping[str, str | None], referenced: Collection[str]
) -> list[Found]:
    """The rules of ``groups`` (id → VPC) that name one of the ``referenced`` groups: AWS refuses to delete
    a group such a rule still names."""
    found: list[Found] = []
    for chunk in _chunks(sorted(groups)):
        filters = [{"Name": "group-id", "Values": chunk}]
        rules = aws.ec2.pages("DescribeSecurityGroupRules", "SecurityGroupRules", Filters=filters)
        for rule in rules:
            target = rule.get("ReferencedGroupInfo", {}).get("GroupId")
            group_id = rule.get("GroupId")
            if target not in referenced or target == group_id:
                continue
            found.append(
                Found(
                    aws.region,
                    "security-group-rule",
                    rule["SecurityGroupRuleId"],
                    tag_dict(rule.get("Tags")),
                    state="egress" if rule.get("IsEgress") else "ingress",
                    vpc_id=groups.get(str(group_id)),
                    parent=group_id,
                    attributes={
                        "group_id": group_id,
                        "referenced_group": target,
                        "is_egress": bool(rule.get("IsEgress")),
                    },
                )
            )
    return found
