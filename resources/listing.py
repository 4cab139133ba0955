"""Listing resources of the EC2 resource classes' kinds: all of them, some ids, or those inside some VPCs.

A resource class describes what it manages (by id, by tags, by key); ``capa audit`` also needs every resource
of a kind, whoever made it, to find what leaked. Each kind is one row of :data:`EC2_LISTINGS`: its describe
operation, result key, the filter naming an id and the one naming a VPC, and how an item becomes the
class's own :class:`~capa_py.engine.resource.Observed` (the class module's parse, so a listed resource
reads exactly as the controllers see it). :func:`list_ec2` runs a listing. Narrowing by filter rather than
by a ``…Ids`` parameter matters: an ids parameter fails the whole call when one id is gone (and the tagging
API lags behind deletes), a filter just matches less.

A listing leaves out what is gone (a terminated or shutting-down instance, a deleted NAT gateway) and what
is not a resource of its own (an EC2-Classic address), and adds the few facts the classes' parses leave
out that a leaked resource's deletion needs: which routes were made by ``CreateRoute`` (``origin``), the
network interfaces of a NAT gateway, and every group a security group's rules name, egress included
(``references``); a route table keeps only its live associations. The ELBv2 kinds are listed with ELBv2's
own calls, which filter by neither tag nor VPC; their parses are here too.

The parses are the class modules' own (private to them, reached from here only, so that each class module
keeps reading as its calls).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClients
from capa_py.engine.resource import Observed
from resources._common import EC2_FILTER_VALUES
from resources.autoscaling_group import _group as _autoscaling_group
from resources.elastic_ip import _observed as _elastic_ip
from resources.instance import _observed as _instance
from resources.internet_gateway import _observed_gateway
from resources.launch_template import _template as _launch_template
from resources.listener import _observed_listener
from resources.load_balancer import _observed_lb
from resources.nat_gateway import GONE_STATES as NAT_GONE_STATES
from resources.nat_gateway import _observed as _nat_gateway
from resources.route_table import _observed_table
from resources.security_group import _observed as _security_group
from resources.subnet import _observed as _subnet
from resources.target_group import TargetRegistration, _observed_tg
from resources.vpc import _observed as _vpc

IAM_ACTIONS: tuple[str, ...] = (
    "autoscaling:DescribeAutoScalingGroups",
    "ec2:DescribeAddresses",
    "ec2:DescribeInstances",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeNatGateways",
    "ec2:DescribeRouteTables",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

Item = Mapping[str, Any]

GONE_INSTANCE_STATES = frozenset({"terminated", "shutting-down"})
_LIVE_ASSOCIATION_STATES = ("associating", "associated")


class HasId(Protocol):
    @property
    def id(self) -> str: ...


T = TypeVar("T", bound=HasId)


@dataclass(frozen=True)
class Ec2Listing(Generic[T]):
    """How one EC2 kind is listed, and how each item of the listing is parsed (into nothing when it is not
    a live resource of its own)."""

    operation: str
    result_key: str
    parse: Callable[[Item], list[T]]
    id_filter: str | None
    """The filter naming an id; None: the endpoint may not support one, so ids are matched here."""
    vpc_filter: str | None = "vpc-id"
    filter_param: str = "Filters"


def _one(parse: Callable[[Item], Observed]) -> Callable[[Item], list[Observed]]:
    return lambda item: [parse(item)]


def _listed_elastic_ip(item: Item) -> list[Observed]:
    return [_elastic_ip(item)] if item.get("AllocationId") else []  # EC2-Classic: not capa-py's


def _listed_nat_gateway(item: Item) -> list[Observed]:
    if item.get("State") in NAT_GONE_STATES:
        return []
    observed = _nat_gateway(item)
    addresses = item.get("NatGatewayAddresses", [])
    observed.attributes["network_interface_ids"] = [
        a["NetworkInterfaceId"] for a in addresses if a.get("NetworkInterfaceId")
    ]
    return [observed]


def _listed_route_table(item: Item) -> list[Observed]:
    observed = _observed_table(item)
    live = [
        association
        for association, raw in zip(
            observed.attributes["associations"], item.get("Associations", []), strict=True
        )
        if raw.get("AssociationState", {}).get("State", "associated") in _LIVE_ASSOCIATION_STATES
    ]
    observed.attributes["associations"] = live
    observed.attributes["main"] = any(a["main"] for a in live)
    for route, raw in zip(observed.attributes["routes"], item.get("Routes", []), strict=True):
        route["origin"] = raw.get("Origin")
    return [observed]


def _group_references(permissions: Iterable[Item]) -> list[str]:
    pairs = [pair for permission in permissions for pair in permission.get("UserIdGroupPairs", [])]
    return sorted({str(pair["GroupId"]) for pair in pairs if pair.get("GroupId")})


def _listed_security_group(item: Item) -> list[Observed]:
    observed = _security_group(item)
    observed.attributes["references"] = _group_references(
        [*item.get("IpPermissions", []), *item.get("IpPermissionsEgress", [])]
    )
    return [observed]


def _listed_instances(reservation: Item) -> list[Observed]:
    return [
        _instance(item)
        for item in reservation.get("Instances", [])
        if item.get("State", {}).get("Name") not in GONE_INSTANCE_STATES
    ]


EC2_LISTINGS: dict[str, Ec2Listing[Observed]] = {
    "vpc": Ec2Listing("DescribeVpcs", "Vpcs", _one(_vpc), "vpc-id", vpc_filter=None),
    "subnet": Ec2Listing("DescribeSubnets", "Subnets", _one(_subnet), "subnet-id"),
    "internet-gateway": Ec2Listing(
        "DescribeInternetGateways",
        "InternetGateways",
        _one(_observed_gateway),
        "internet-gateway-id",
        vpc_filter="attachment.vpc-id",
    ),
    "elastic-ip": Ec2Listing(
        "DescribeAddresses", "Addresses", _listed_elastic_ip, "allocation-id", vpc_filter=None
    ),
    "nat-gateway": Ec2Listing(
        "DescribeNatGateways", "NatGateways", _listed_nat_gateway, "nat-gateway-id", filter_param="Filter"
    ),
    "route-table": Ec2Listing("DescribeRouteTables", "RouteTables", _listed_route_table, "route-table-id"),
    "security-group": Ec2Listing(
        "DescribeSecurityGroups", "SecurityGroups", _listed_security_group, "group-id"
    ),
    "instance": Ec2Listing("DescribeInstances", "Reservations", _listed_instances, "instance-id"),
    # moto does not filter launch templates by id: ids are matched after the listing.
    "launch-template": Ec2Listing(
        "DescribeLaunchTemplates", "LaunchTemplates", _one(_launch_template), None, vpc_filter=None
    ),
}
"""The listings of the EC2 resource classes' kinds (the attachment, route and association kinds are parts
of a gateway's or a table's listing)."""


def filter_chunks(values: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(values), EC2_FILTER_VALUES):
        yield list(values[start : start + EC2_FILTER_VALUES])


def list_ec2(
    aws: AWSClients,
    listing: Ec2Listing[T],
    *,
    ids: Sequence[str] | None = None,
    vpc_ids: Sequence[str] | None = None,
) -> list[T]:
    """What a listing finds: everything, those with the given ids, or those in the given VPCs."""
    if ids is not None and not ids:
        return []
    if vpc_ids is not None and (not vpc_ids or listing.vpc_filter is None):
        return []
    calls: list[list[dict[str, Any]]] = [[]]
    if ids is not None and listing.id_filter is not None:
        calls = [[{"Name": listing.id_filter, "Values": chunk}] for chunk in filter_chunks(sorted(set(ids)))]
    elif vpc_ids is not None and listing.vpc_filter is not None:
        calls = [
            [{"Name": listing.vpc_filter, "Values": chunk}] for chunk in filter_chunks(sorted(set(vpc_ids)))
        ]
    found: list[T] = []
    for filters in calls:
        params = {listing.filter_param: filters} if filters else {}
        try:
            items = list(aws.ec2.pages(listing.operation, listing.result_key, **params))
        except NotFound:
            items = []
        for item in items:
            found.extend(listing.parse(item))
    if ids is not None and listing.id_filter is None:
        wanted = set(ids)
        found = [f for f in found if f.id in wanted]
    return found


# -- ELBv2: listed with ELBv2's own calls (which filter by neither tag nor VPC), parsed as the classes do --


def parse_load_balancer(item: Item, tags: Mapping[str, str]) -> Observed:
    observed = _observed_lb(item)
    observed.tags = dict(tags)
    return observed


def parse_target_group(item: Item, tags: Mapping[str, str]) -> Observed:
    observed = _observed_tg(item)
    observed.tags = dict(tags)
    return observed


def parse_listener(item: Item, tags: Mapping[str, str]) -> Observed:
    observed = _observed_listener(item)
    observed.tags = dict(tags)
    return observed


def parse_registration(target_group_arn: str, description: Item) -> Observed | None:
    """A target health description's registration; None when it names no target or one no longer
    registered."""
    if not description.get("Target", {}).get("Id"):
        return None
    return TargetRegistration._registration(target_group_arn, description)


# -- Auto Scaling: listed with its own call (by name, or every group), parsed as the class does ------------


def list_autoscaling_groups(aws: AWSClients, names: Sequence[str] | None = None) -> list[Observed]:
    """Every Auto Scaling group of the region (those being deleted included: they still hold instances),
    or those with the given names."""
    if names is not None and not names:
        return []
    params: dict[str, Any] = {}
    if names is not None:
        params["AutoScalingGroupNames"] = sorted(set(names))
    items = aws.autoscaling.pages("DescribeAutoScalingGroups", "AutoScalingGroups", **params)
    return [_autoscaling_group(item) for item in items]
