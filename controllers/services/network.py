"""The network service: VPC, subnets and zones, internet gateway, NAT gateways, route tables.

Its steps, in the order the create graph runs them (:mod:`controllers.awscluster`):

1. :func:`reconcile_vpc` — the managed VPC, or the one the spec names (read, never changed);
2. :func:`reconcile_subnets` — the declared subnets, or a public and a private one per chosen zone;
3. :func:`reconcile_internet_gateway` — the gateway and its attachment (a managed VPC only);
4. :func:`reconcile_public_route_table` — the public table, its default route and associations;
5. :func:`reconcile_nat_gateways` then :func:`wait_for_nat_gateways` — an elastic IP and a NAT gateway
   per zone with both a public and a private subnet, created, then polled while pending;
6. :func:`reconcile_private_route_tables` — a table per private zone, routed through the zone's NAT.

A bring-your-own VPC and subnets are unmanaged: the gateways, NAT and route tables are then the user's
business too. :data:`DELETION` deletes the kinds this service creates, the VPC last.
"""

from __future__ import annotations

from capa_py.api.aws import SubnetSpec
from capa_py.aws.errors import InvalidReference, InvalidRequest
from capa_py.cache.known import known_of
from capa_py.engine.errors import Waiting
from capa_py.logging import get_logger
from controllers.references import missing
from controllers.services.cluster_scope import ClusterScope, Deletion, SubnetInfo, recorded, roles
from controllers.services.zones import (
    ZONES_FRESHNESS,
    choose_zones,
    default_subnets,
    recorded_zones,
    subnet_roles,
)
from controllers.waits import NAT_GATEWAY_AVAILABLE, youngest
from resources.elastic_ip import ElasticIpDesired
from resources.internet_gateway import InternetGatewayAttachmentDesired, InternetGatewayDesired
from resources.nat_gateway import NatGatewayDesired
from resources.route import RouteDesired
from resources.route_table import RouteTableAssociationDesired, RouteTableDesired
from resources.subnet import SubnetDesired
from resources.vpc import VpcDesired

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:DeleteInternetGateway",
    "ec2:DeleteVpc",
    "ec2:DescribeAvailabilityZones",
    "ec2:DetachInternetGateway",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

VPC_READY = "VpcReady"
SUBNETS_READY = "SubnetsReady"
INTERNET_GATEWAY_READY = "InternetGatewayReady"
NAT_GATEWAYS_READY = "NatGatewaysReady"
ROUTE_TABLES_READY = "RouteTablesReady"
CONDITIONS = (VPC_READY, SUBNETS_READY, INTERNET_GATEWAY_READY, NAT_GATEWAYS_READY, ROUTE_TABLES_READY)
_log = get_logger("controller.awscluster")


def reconcile_vpc(scope: ClusterScope) -> None:
    spec = scope.obj.spec.network.vpc
    if spec.id is not None:
        observed = scope.resources.vpc.describe_by_id(spec.id)
        if observed is None:
            raise missing("spec.network.vpc.id", spec.id, scope.aws.region)
        scope.network.vpc_id = observed.id
        return
    assert spec.cidr_block is not None
    observed = scope.ensure(
        scope.resources.vpc, "vpc", VpcDesired(cidr_block=spec.cidr_block), extra_tags=spec.tags
    )
    scope.network.vpc_id = observed.id


def zones(scope: ClusterScope) -> list[str]:
    """The zones default subnets use: the region's available zones (shared by the processes sharing
    observations), as ``availabilityZoneSelection`` and the recorded subnets choose them."""
    vpc = scope.obj.spec.network.vpc

    def available() -> list[str]:
        return [
            z["ZoneName"]
            for z in scope.aws.ec2.call(
                "DescribeAvailabilityZones", Filters=[{"Name": "state", "Values": ["available"]}]
            ).get("AvailabilityZones", [])
            if z.get("ZoneType", "availability-zone") == "availability-zone"
        ]

    # A region's zones change about never; once subnets are recorded the choice is fixed anyway.
    found = known_of(scope.aws).value(("availability-zones",), ZONES_FRESHNESS, available)
    return choose_zones(
        found,
        vpc.availability_zone_usage_limit,
        vpc.availability_zone_selection,
        scope.obj.uid,
        recorded_zones(scope.obj.status.resources),
    )


def subnet_specs(scope: ClusterScope) -> list[SubnetSpec]:
    declared = scope.obj.spec.network.subnets
    if declared or not scope.managed_vpc:
        return list(declared)
    cidr = scope.obj.spec.network.vpc.cidr_block
    assert cidr is not None
    return default_subnets(cidr, zones(scope))


def reconcile_subnets(scope: ClusterScope) -> None:
    vpc_id = scope.network.vpc_id
    assert vpc_id is not None
    specs = subnet_specs(scope)
    subnets: list[SubnetInfo] = []
    scope.network.subnets = subnets
    rc = scope.resources.subnet
    scope.prefetch(rc, subnet_roles(specs))
    for index, (role, spec) in enumerate(zip(subnet_roles(specs), specs, strict=True)):
        if spec.id is not None:
            observed = rc.describe_by_id(spec.id)
            if observed is None:
                raise missing(f"spec.network.subnets[{index}].id", spec.id, scope.aws.region)
            if observed.attributes.get("vpc_id") not in (None, vpc_id):
                raise InvalidReference(
                    f"spec.network.subnets[{index}].id",
                    f"{spec.id} is in {observed.attributes['vpc_id']}, not in the cluster's VPC {vpc_id}",
                )
            subnets.append(
                SubnetInfo(
                    role,
                    observed.id,
                    str(observed.attributes["cidr_block"]),
                    str(observed.attributes["availability_zone"]),
                    bool(observed.attributes.get("map_public_ip_on_launch")) or spec.is_public,
                    managed=False,
                )
            )
            continue
        assert spec.cidr_block is not None
        assert spec.availability_zone is not None
        desired = SubnetDesired(vpc_id, spec.cidr_block, spec.availability_zone, spec.is_public)
        observed = scope.ensure(rc, role, desired, extra_tags=spec.tags)
        subnets.append(
            SubnetInfo(
                role, observed.id, spec.cidr_block, spec.availability_zone, spec.is_public, managed=True
            )
        )
    if not subnets:
        raise InvalidRequest("the cluster has no subnets", code="NoSubnets")
    scope.record_network()


def reconcile_internet_gateway(scope: ClusterScope) -> None:
    if not scope.managed_vpc:
        return
    vpc_id = scope.network.vpc_id
    assert vpc_id is not None
    gateway = scope.ensure(
        scope.resources.internet_gateway, "internet-gateway", InternetGatewayDesired(vpc_id)
    )
    scope.network.internet_gateway_id = gateway.id
    scope.ensure(
        scope.resources.internet_gateway_attachment,
        "internet-gateway-attachment",
        InternetGatewayAttachmentDesired(gateway.id, vpc_id),
    )


def nat_zones(scope: ClusterScope) -> list[str]:
    """The zones with both a public and a private subnet: each gets a NAT gateway."""
    public = {s.availability_zone for s in scope.network.subnets if s.is_public}
    private = {s.availability_zone for s in scope.network.subnets if not s.is_public}
    return sorted(public & private) if private else []


def reconcile_nat_gateways(scope: ClusterScope) -> None:
    """Elastic IPs and NAT gateways, created but not waited for (:func:`wait_for_nat_gateways` waits).

    A gateway still pending at the end of the last pass is not described here: the wait step polls
    the pending ones in one call."""
    if not scope.managed_vpc:
        return
    known_pending = NAT_GATEWAYS_READY in scope.waiting_before
    rc = scope.resources.nat_gateway
    to_ensure: list[str] = []
    for zone in nat_zones(scope):
        before = scope.recorder.recorded(f"nat-gateway-{zone}")
        if known_pending and before is not None and before.kind == rc.kind:
            scope.network.nat_by_zone[zone] = before.id
            scope.nat_gateways.to_poll[zone] = before.id
        else:
            to_ensure.append(zone)
    scope.prefetch(scope.resources.elastic_ip, [f"eip-nat-{z}" for z in to_ensure])
    scope.prefetch(rc, [f"nat-gateway-{z}" for z in to_ensure])
    for zone in to_ensure:
        _ensure_nat_gateway(scope, zone)


def _ensure_nat_gateway(scope: ClusterScope, zone: str) -> None:
    public = next(s for s in scope.network.subnets if s.is_public and s.availability_zone == zone)
    address = scope.ensure(
        scope.resources.elastic_ip, f"eip-nat-{zone}", ElasticIpDesired(scope.network.vpc_id)
    )
    role = f"nat-gateway-{zone}"
    before = scope.recorder.recorded(role)
    rc = scope.resources.nat_gateway
    nat = scope.ensure(rc, role, NatGatewayDesired(public.id, address.id))
    scope.network.nat_by_zone[zone] = nat.id
    if not rc.is_ready(nat):
        pending = scope.nat_gateways
        pending.unready[zone] = nat.id
        pending.created = pending.created or scope.created(before, nat)
        pending.created_at = youngest(pending.created_at, nat.created_at)


def wait_for_nat_gateways(scope: ClusterScope) -> None:
    """Poll the NAT gateways still pending (one describe for all), at the NatGatewayAvailable waiter's
    cadence; one that is gone (deleted, or failed) is created again."""
    rc = scope.resources.nat_gateway
    pending = scope.nat_gateways
    if pending.to_poll:
        found = rc.describe_many(sorted(set(pending.to_poll.values())))
        for polled in found.values():
            scope.reads(rc).learn(polled)
        for zone, nat_id in sorted(pending.to_poll.items()):
            observed = found.get(nat_id)
            if observed is None:
                _log.warning("a pending NAT gateway is gone; creating it again", nat_gateway_id=nat_id)
                _ensure_nat_gateway(scope, zone)
            elif not rc.is_ready(observed):
                pending.unready[zone] = nat_id
                pending.created_at = youngest(pending.created_at, observed.created_at)
    if pending.unready:
        ids = ", ".join(sorted(set(pending.unready.values())))
        scope.condition(
            ROUTE_TABLES_READY,
            False,
            "WaitingForNatGateways",
            f"the private route tables route through NAT gateways {ids}, not available yet",
            "Info",
        )
        raise Waiting(
            f"NAT gateways {ids} are not available yet",
            NAT_GATEWAY_AVAILABLE.requeue(pending.created, pending.created_at),
        )


def _prefetch_routing(scope: ClusterScope) -> None:
    """Route tables, routes and associations of every recorded role, one batch per kind and pass:
    the public step's batch serves the private step too."""
    if scope.routing_prefetched:
        return
    scope.routing_prefetched = True
    scope.prefetch(scope.resources.route_table, scope.recorded_roles("route-table-"))
    scope.prefetch(scope.resources.route, scope.recorded_roles("route-"))
    scope.prefetch(scope.resources.route_table_association, scope.recorded_roles("rtassoc-"))


def reconcile_public_route_table(scope: ClusterScope) -> None:
    """The public route table, its default route to the internet gateway, and the public subnets'
    associations."""
    if not scope.managed_vpc:
        return
    facts = scope.network
    assert facts.vpc_id is not None
    assert facts.internet_gateway_id is not None
    _prefetch_routing(scope)
    rcs = scope.resources
    table = scope.ensure(rcs.route_table, "route-table-public", RouteTableDesired(facts.vpc_id))
    scope.ensure(
        rcs.route, "route-public-default", RouteDesired(table.id, "0.0.0.0/0", facts.internet_gateway_id)
    )
    for subnet in facts.subnets:
        if subnet.managed and subnet.is_public:
            scope.ensure(
                rcs.route_table_association,
                f"rtassoc-{subnet.role}",
                RouteTableAssociationDesired(table.id, subnet.id),
            )
            facts.route_table_by_subnet[subnet.id] = table.id
    scope.record_network()


def reconcile_private_route_tables(scope: ClusterScope) -> None:
    """A route table per private zone, its default route through the zone's NAT gateway, and the
    private subnets' associations: after the NAT gateways are available."""
    if not scope.managed_vpc:
        return
    facts = scope.network
    assert facts.vpc_id is not None
    private_zones = sorted({s.availability_zone for s in facts.subnets if not s.is_public})
    _prefetch_routing(scope)
    rcs = scope.resources
    tables: dict[str, str] = {}
    for zone in private_zones:
        nat = facts.nat_by_zone.get(zone) or next(iter(facts.nat_by_zone.values()), None)
        table = scope.ensure(rcs.route_table, f"route-table-private-{zone}", RouteTableDesired(facts.vpc_id))
        tables[zone] = table.id
        if nat is not None:
            scope.ensure(rcs.route, f"route-private-{zone}-default", RouteDesired(table.id, "0.0.0.0/0", nat))
    for subnet in facts.subnets:
        if subnet.managed and not subnet.is_public:
            table_id = tables[subnet.availability_zone]
            scope.ensure(
                rcs.route_table_association,
                f"rtassoc-{subnet.role}",
                RouteTableAssociationDesired(table_id, subnet.id),
            )
            facts.route_table_by_subnet[subnet.id] = table_id
    scope.record_network()


DELETION = (
    Deletion(
        "DeleteRouteTableAssociations",
        lambda r: r.route_table_association,
        recorded("rtassoc-", "route-table-association"),
    ),
    Deletion("DeleteRoutes", lambda r: r.route, recorded("route-", "route")),
    Deletion("DeleteRouteTables", lambda r: r.route_table, recorded("route-table-", "route-table")),
    Deletion("DeleteNatGateways", lambda r: r.nat_gateway, recorded("nat-gateway-", "nat-gateway")),
    Deletion("DeleteElasticIps", lambda r: r.elastic_ip, recorded("eip-", "elastic-ip")),
    Deletion(
        "DetachInternetGateway",
        lambda r: r.internet_gateway_attachment,
        roles("internet-gateway-attachment"),
    ),
    Deletion("DeleteInternetGateway", lambda r: r.internet_gateway, roles("internet-gateway")),
    Deletion("DeleteSubnets", lambda r: r.subnet, recorded("subnet-", "subnet")),
    Deletion("DeleteVpc", lambda r: r.vpc, roles("vpc")),
)
"""The network's delete, in order: what uses a route table, a gateway or a subnet goes before it."""
