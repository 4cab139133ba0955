"""Describe calls for the EC2 kinds the audit knows, each item turned into a :class:`Found`.

The kinds a resource class models are listed and parsed through :mod:`resources.listing` (the class's own
parse and :class:`~capa_py.engine.resource.Observed`), and only then made a :class:`Found`; the audit keeps
parsers of its own only for kinds no resource class models (:data:`AUDIT_ONLY_KINDS`, each saying why).
:func:`describe_ec2` lists a kind whole, for some ids, or inside some VPCs.

A listing returns nothing for what is not a resource of its own: terminated instances, deleted NAT
gateways, volumes attached to an instance, network interfaces in use (an instance's, a NAT gateway's or a
load balancer's, which go with their owner). What remains can leak on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from capa_app.audit.model import Found
from capa_py.aws.session import AWSClients
from capa_py.engine.resource import Observed, tag_dict
from resources.internet_gateway import attachment_id
from resources.listing import EC2_LISTINGS, Ec2Listing, filter_chunks, list_ec2
from resources.route import route_id

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroupRules",
    "ec2:DescribeVolumes",
    "ec2:DescribeVpcEndpoints",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

Item = Mapping[str, Any]

_GONE_ENDPOINT_STATES = frozenset({"deleted", "failed", "rejected", "expired"})
_LIVE_ATTACHMENT_STATES = frozenset({"attaching", "attached", "available"})
_NAME_ATTRIBUTE = {
    "elastic-ip": "public_ip",
    "security-group": "group_name",
    "load-balancer": "name",
    "target-group": "name",
    "launch-template": "name",
}
"""The attribute shown as a resource's name (the others have none)."""


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


def _found(region: str, kind: str, observed: Observed) -> Found:
    """A listed resource of a modeled kind as discovery records it."""
    attributes = dict(observed.attributes)
    vpc_id = attributes.get("vpc_id")
    if kind == "internet-gateway":
        attached = [
            str(a["vpc_id"])
            for a in attributes.get("attachments", [])
            if a.get("vpc_id") and a.get("state") in _LIVE_ATTACHMENT_STATES
        ]
        attributes["attached_vpcs"] = attached
        vpc_id = attached[0] if attached else None
    if kind == "security-group":
        attributes["is_default"] = attributes.get("group_name") == "default"
    name = attributes.get(_NAME_ATTRIBUTE[kind]) if kind in _NAME_ATTRIBUTE else None
    return Found(
        region,
        kind,
        observed.id,
        dict(observed.tags),
        state=observed.state,
        vpc_id=vpc_id,
        created_at=observed.created_at,
        name=name,
        attributes=attributes,
    )


def found_from(region: str, kind: str, observed: Iterable[Observed]) -> list[Found]:
    return [_found(region, kind, o) for o in observed]


def _audit_only(
    operation: str,
    result_key: str,
    convert: Callable[[Item, str], list[Found]],
    id_filter: str | None,
    vpc_filter: str | None = "vpc-id",
) -> Callable[[str], Ec2Listing[Found]]:
    """The listing of a kind only the audit parses, for one region."""
    return lambda region: Ec2Listing(
        operation, result_key, lambda item: convert(item, region), id_filter, vpc_filter=vpc_filter
    )


AUDIT_ONLY_KINDS: dict[str, Callable[[str], Ec2Listing[Found]]] = {
    # In-use interfaces go with their owner; a free one (left by a terminated instance) is a leak of its
    # own, and no resource class makes interfaces.
    "network-interface": _audit_only(
        "DescribeNetworkInterfaces", "NetworkInterfaces", _network_interface, "network-interface-id"
    ),
    # Made by RunInstances with the instance, never by a resource class: a detached one outlives it.
    "volume": _audit_only("DescribeVolumes", "Volumes", _volume, "volume-id", vpc_filter=None),
    # Made by hand or by other tools in a cluster's VPC; capa-py makes none, but one blocks the VPC's delete.
    "vpc-endpoint": _audit_only("DescribeVpcEndpoints", "VpcEndpoints", _vpc_endpoint, None),
}
"""EC2 kinds no resource class models, listed with the audit's own parsers."""

EC2_KINDS = frozenset(EC2_LISTINGS) | frozenset(AUDIT_ONLY_KINDS)


def describe_ec2(
    aws: AWSClients,
    kind: str,
    *,
    ids: Sequence[str] | None = None,
    vpc_ids: Sequence[str] | None = None,
) -> list[Found]:
    """Resources of an EC2 kind: all of them, those with the given ids, or those in the given VPCs."""
    if kind in AUDIT_ONLY_KINDS:
        return list_ec2(aws, AUDIT_ONLY_KINDS[kind](aws.region), ids=ids, vpc_ids=vpc_ids)
    return found_from(aws.region, kind, list_ec2(aws, EC2_LISTINGS[kind], ids=ids, vpc_ids=vpc_ids))


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
    for chunk in filter_chunks(sorted(groups)):
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
