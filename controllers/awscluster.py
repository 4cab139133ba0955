"""The AWSCluster controller: the cluster's network and API server load balancer.

Create graph (each step one ctrlkit action with its condition; :meth:`ClusterReconcile.create_workflow`):
VPC → subnets per availability zone → Join(security groups (control plane, nodes, and the load-balancer
group shared with the cloud provider); internet gateway and its attachment → Join(public route table;
elastic IPs → NAT gateways → wait for them → private route tables, routes, associations; network load
balancer, target group and listener → wait for it)) → ``status.ready`` and the control-plane endpoint.
A step waiting on AWS holds back only what depends on it, and polls only what is still pending
(:mod:`controllers.waits`); ``status.network`` is filled in as its parts become known, so machines launch
before the cluster is ready.
Delete runs the reverse, waits where AWS is slow, sweeps anything else tagged as the cluster's, and removes
the finalizer only when everything is gone. A bring-your-own VPC and subnets are unmanaged: read, recorded
in ``status.network``, never modified or deleted (and the gateways, NAT and route tables are then the
user's business too).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import ipaddress
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from capa_py.api.aws import (
    AWSCLUSTER_FINALIZER,
    AWSCluster,
    AWSMachine,
    LoadBalancerStatus,
    RecordedResource,
    SecurityGroupStatus,
    SubnetSpec,
    SubnetStatus,
)
from capa_py.api.cluster import CLUSTER_NAME_LABEL, APIEndpoint, Cluster
from capa_py.api.conditions import READY, set_condition
from capa_py.aws.errors import AWSError, DependencyViolation, InvalidReference, InvalidRequest, Retryable
from capa_py.aws.errors import NotFound as AWSNotFound
from capa_py.aws.session import ClientPool
from capa_py.ctrlkit.action import Action, Context
from capa_py.ctrlkit.combinators import Join, Sequential
from capa_py.ctrlkit.result import Result, ignore_exit, no_requeue, requeue_after
from capa_py.engine.engine import Engine
from capa_py.engine.errors import Waiting
from capa_py.engine.recorder import StatusRecorder
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.tags import CLUSTER_TAG_PREFIX, OWNED, foreign_store, tagging_store_uid
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.aws_scope import ReconcileScope, step
from controllers.base import (
    add_finalizer,
    cluster_view,
    fetch,
    left_alone,
    mark_paused,
    pause_reason,
    record_store_uid,
    remove_finalizer,
    settle,
)
from controllers.events import DELETION_BLOCKED
from controllers.references import missing
from controllers.waits import LOAD_BALANCER_AVAILABLE, NAT_GATEWAY_AVAILABLE, just_created
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from resources.instance import Instance
from resources.internet_gateway import (
    InternetGateway,
    InternetGatewayAttachment,
    InternetGatewayAttachmentDesired,
    InternetGatewayDesired,
    attachment_id,
)
from resources.load_balancer import (
    Listener,
    ListenerDesired,
    LoadBalancer,
    LoadBalancerDesired,
    TargetGroup,
    TargetGroupDesired,
)
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.route_table import (
    Route,
    RouteDesired,
    RouteTable,
    RouteTableAssociation,
    RouteTableAssociationDesired,
    RouteTableDesired,
)
from resources.security_group import SELF, IngressRule, SecurityGroup, SecurityGroupDesired
from resources.subnet import Subnet, SubnetDesired
from resources.vpc import Vpc, VpcDesired

VPC_READY = "VpcReady"
SUBNETS_READY = "SubnetsReady"
INTERNET_GATEWAY_READY = "InternetGatewayReady"
NAT_GATEWAYS_READY = "NatGatewaysReady"
ROUTE_TABLES_READY = "RouteTablesReady"
SECURITY_GROUPS_READY = "ClusterSecurityGroupsReady"
LOAD_BALANCER_READY = "LoadBalancerReady"
CLUSTER_CONDITIONS = (
    VPC_READY,
    SUBNETS_READY,
    INTERNET_GATEWAY_READY,
    NAT_GATEWAYS_READY,
    ROUTE_TABLES_READY,
    SECURITY_GROUPS_READY,
    LOAD_BALANCER_READY,
)
API_SERVER_PORT = 6443
ZONES_FRESHNESS = 3600.0
"""How long the region's available zones are reused by the processes sharing observations."""
SG_ROLES = ("controlplane", "node", "lb")
_log = get_logger("controller.awscluster")
_ELB_INVALID = re.compile(r"[^A-Za-z0-9-]+")


def subnet_roles(subnets: Iterable[SubnetSpec]) -> list[str]:
    """Stable roles for declared subnets: ``subnet-public-us-east-1a`` (``-2``… for more in one zone)."""
    roles: list[str] = []
    for subnet in subnets:
        base = f"subnet-{'public' if subnet.is_public else 'private'}-{subnet.availability_zone or subnet.id}"
        role, n = base, 2
        while role in roles:
            role, n = f"{base}-{n}", n + 1
        roles.append(role)
    return roles


def aws_name(cluster: str, suffix: str, limit: int = 32) -> str:
    """An ELB-style name (load balancers, target groups): at most ``limit`` alphanumerics and hyphens, no
    leading or trailing hyphen, not starting with ``internal-``; the same for the same cluster, and unique
    per cluster.

    ``<cluster>-<suffix>`` when that is already such a name (so existing resources keep theirs); otherwise
    invalid characters (a cluster name may hold dots) become hyphens, and a short hash of the original name
    is appended, so ``my.cluster`` and ``my-cluster`` still get different names.
    """
    name = f"{cluster}-{suffix}"
    clean = _ELB_INVALID.sub("-", name).strip("-")
    if clean.lower().startswith("internal-"):
        clean = "int-" + clean[len("internal-") :]
    if clean == name and len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{clean[: limit - 7].rstrip('-')}-{digest}"


def default_subnets(vpc_cidr: str, zones: list[str]) -> list[SubnetSpec]:
    """A public and a private subnet per zone, splitting the VPC block evenly."""
    network = ipaddress.ip_network(vpc_cidr)
    count = 2 * len(zones)
    extra_bits = max(1, (count - 1).bit_length())
    blocks = list(network.subnets(prefixlen_diff=extra_bits))
    specs: list[SubnetSpec] = []
    for index, zone in enumerate(zones):
        specs.append(SubnetSpec(cidr_block=str(blocks[2 * index]), availability_zone=zone, is_public=True))
        specs.append(
            SubnetSpec(cidr_block=str(blocks[2 * index + 1]), availability_zone=zone, is_public=False)
        )
    return specs


_DEFAULT_SUBNET_ROLE = re.compile(r"^subnet-(public|private)-([a-z0-9-]+[a-z])$")


def choose_zones(
    zones: Iterable[str], limit: int, selection: str, seed: str, recorded: Iterable[str] = ()
) -> list[str]:
    """The zones default subnets use (``availabilityZoneSelection``, at most ``availabilityZoneUsageLimit``).

    ``Ordered`` takes zones in name order; ``Random`` in an order shuffled by a generator seeded with the
    AWSCluster's uid, so every reconcile of one cluster makes the same choice. Zones whose subnets are
    already recorded come first: once subnets exist, the choice stays fixed (as Cluster API Provider AWS
    fixes the subnets it picked), even if the region's zones change.
    """
    ranked = sorted(set(zones))
    if selection == "Random":
        random.Random(seed).shuffle(ranked)
    kept = list(dict.fromkeys(sorted(recorded)))
    chosen = kept + [z for z in ranked if z not in kept]
    return sorted(chosen[: max(limit, len(kept))])


@dataclass
class SubnetInfo:
    role: str
    id: str
    cidr_block: str
    availability_zone: str
    is_public: bool
    managed: bool


class ClusterReconcile:
    """One reconcile of one AWSCluster: the steps as ctrlkit actions over a shared scope."""

    def __init__(self, scope: ReconcileScope[AWSCluster]) -> None:
        self.scope = scope
        self.engine = scope.engine
        aws = scope.aws
        self.vpc_rc = Vpc(aws)
        self.subnet_rc = Subnet(aws)
        self.igw_rc = InternetGateway(aws)
        self.igw_attach_rc = InternetGatewayAttachment(aws)
        self.eip_rc = ElasticIp(aws)
        self.nat_rc = NatGateway(aws)
        self.rt_rc = RouteTable(aws)
        self.route_rc = Route(aws)
        self.assoc_rc = RouteTableAssociation(aws)
        self.sg_rc = SecurityGroup(aws)
        self.lb_rc = LoadBalancer(aws)
        self.tg_rc = TargetGroup(aws)
        self.listener_rc = Listener(aws)
        self.vpc_id: str | None = None
        self.subnets: list[SubnetInfo] = []
        self.nat_by_zone: dict[str, str] = {}
        self.route_table_by_subnet: dict[str, str] = {}
        self.security_groups: dict[str, SecurityGroupStatus] = {}
        self.load_balancer: LoadBalancerStatus | None = None
        self.igw_id: str | None = None
        # What was still pending when the last pass ended (its condition says Waiting): this pass polls
        # just those resources in the wait steps instead of describing them again in the create steps.
        self.waiting_before = frozenset(
            c.type for c in scope.obj.status.conditions if c.status == "False" and c.reason == "Waiting"
        )
        self.nats_to_poll: dict[str, str] = {}
        """zone → NAT gateway id recorded as pending, not observed yet in this pass."""
        self.nats_unready: dict[str, str] = {}
        """zone → NAT gateway id observed in this pass and not available yet."""
        self.nat_created = False
        self.lb_to_poll: str | None = None
        self.lb_unready: str | None = None
        """The load balancer's state, when observed in this pass and not active yet."""
        self.lb_created = False
        self.routing_prefetched = False

    @property
    def obj(self) -> AWSCluster:
        return self.scope.obj

    @property
    def cluster(self) -> str:
        return self.scope.cluster_name

    @property
    def managed_vpc(self) -> bool:
        return self.obj.spec.network.vpc.id is None

    def prefetch(self, rc: ResourceClass[Any], roles: Iterable[str]) -> None:
        self.engine.prefetch(rc, roles, self.scope.engine_scope)

    def recorded_roles(self, prefix: str) -> list[str]:
        return [role for role in self.obj.status.resources if role.startswith(prefix)]

    def ensure(
        self,
        rc: ResourceClass[Any],
        role: str,
        desired: Any,
        shared: bool = False,
        extra_tags: Mapping[str, str] | None = None,
    ) -> Observed:
        """``extra_tags``: the resource's own spec tags (a VPC's, a subnet's), over the cluster's
        additional tags; managed tags still win, so lookups never miss it."""
        scope = self.scope.engine_scope
        if extra_tags:
            scope = dataclasses.replace(scope, additional_tags={**scope.additional_tags, **extra_tags})
        return self.engine.ensure(
            rc, role, desired, scope, name=f"{self.cluster}-{role}", shared_with_cloud_provider=shared
        )

    # -- create steps ---------------------------------------------------------------------------------
    def reconcile_vpc(self) -> None:
        spec = self.obj.spec.network.vpc
        if spec.id is not None:
            observed = self.vpc_rc.describe_by_id(spec.id)
            if observed is None:
                raise missing("spec.network.vpc.id", spec.id, self.scope.aws.region)
            self.vpc_id = observed.id
            return
        assert spec.cidr_block is not None
        observed = self.ensure(
            self.vpc_rc, "vpc", VpcDesired(cidr_block=spec.cidr_block), extra_tags=spec.tags
        )
        self.vpc_id = observed.id

    def _zones(self) -> list[str]:
        vpc = self.obj.spec.network.vpc

        def available() -> list[str]:
            return [
                z["ZoneName"]
                for z in self.scope.aws.ec2.call(
                    "DescribeAvailabilityZones", Filters=[{"Name": "state", "Values": ["available"]}]
                ).get("AvailabilityZones", [])
                if z.get("ZoneType", "availability-zone") == "availability-zone"
            ]

        # A region's zones change about never; once subnets are recorded the choice is fixed anyway.
        zones = self.scope.aws.observations.fact(("availability-zones",), ZONES_FRESHNESS, available)
        recorded = [
            match.group(2)
            for role, record in self.obj.status.resources.items()
            if record.kind == "subnet" and (match := _DEFAULT_SUBNET_ROLE.match(role))
        ]
        return choose_zones(
            zones, vpc.availability_zone_usage_limit, vpc.availability_zone_selection, self.obj.uid, recorded
        )

    def subnet_specs(self) -> list[SubnetSpec]:
        declared = self.obj.spec.network.subnets
        if declared or not self.managed_vpc:
            return list(declared)
        cidr = self.obj.spec.network.vpc.cidr_block
        assert cidr is not None
        return default_subnets(cidr, self._zones())

    def reconcile_subnets(self) -> None:
        assert self.vpc_id is not None
        specs = self.subnet_specs()
        self.subnets = []
        self.prefetch(self.subnet_rc, subnet_roles(specs))
        for index, (role, spec) in enumerate(zip(subnet_roles(specs), specs, strict=True)):
            if spec.id is not None:
                observed = self.subnet_rc.describe_by_id(spec.id)
                if observed is None:
                    raise missing(f"spec.network.subnets[{index}].id", spec.id, self.scope.aws.region)
                if observed.attributes.get("vpc_id") not in (None, self.vpc_id):
                    raise InvalidReference(
                        f"spec.network.subnets[{index}].id",
                        f"{spec.id} is in {observed.attributes['vpc_id']}, "
                        f"not in the cluster's VPC {self.vpc_id}",
                    )
                self.subnets.append(
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
            desired = SubnetDesired(self.vpc_id, spec.cidr_block, spec.availability_zone, spec.is_public)
            observed = self.ensure(self.subnet_rc, role, desired, extra_tags=spec.tags)
            self.subnets.append(
                SubnetInfo(
                    role, observed.id, spec.cidr_block, spec.availability_zone, spec.is_public, managed=True
                )
            )
        if not self.subnets:
            raise InvalidRequest("the cluster has no subnets", code="NoSubnets")
        self.record_network()

    def reconcile_internet_gateway(self) -> None:
        if not self.managed_vpc:
            return
        assert self.vpc_id is not None
        gateway = self.ensure(self.igw_rc, "internet-gateway", InternetGatewayDesired())
        self.igw_id = gateway.id
        self.ensure(
            self.igw_attach_rc,
            "internet-gateway-attachment",
            InternetGatewayAttachmentDesired(gateway.id, self.vpc_id),
        )

    def nat_zones(self) -> list[str]:
        public = {s.availability_zone for s in self.subnets if s.is_public}
        private = {s.availability_zone for s in self.subnets if not s.is_public}
        return sorted(public & private) if private else []

    @staticmethod
    def _created(before: RecordedResource | None, observed: Observed) -> bool:
        """Whether ``ensure`` just created (or adopted) ``observed`` — its role recorded nothing, or another
        id, before — or AWS says it was created moments ago (a reconcile right after the create's)."""
        return before is None or before.id != observed.id or just_created(observed.created_at)

    def reconcile_nat_gateways(self) -> None:
        """Elastic IPs and NAT gateways, created but not waited for (:meth:`wait_for_nat_gateways` waits).

        A gateway still pending at the end of the last pass is not described here: the wait step polls
        the pending ones in one call."""
        if not self.managed_vpc:
            return
        known_pending = NAT_GATEWAYS_READY in self.waiting_before
        to_ensure: list[str] = []
        for zone in self.nat_zones():
            recorded = self.scope.recorder.recorded(f"nat-gateway-{zone}")
            if known_pending and recorded is not None and recorded.kind == self.nat_rc.kind:
                self.nat_by_zone[zone] = recorded.id
                self.nats_to_poll[zone] = recorded.id
            else:
                to_ensure.append(zone)
        self.prefetch(self.eip_rc, [f"eip-nat-{z}" for z in to_ensure])
        self.prefetch(self.nat_rc, [f"nat-gateway-{z}" for z in to_ensure])
        for zone in to_ensure:
            self._ensure_nat_gateway(zone)

    def _ensure_nat_gateway(self, zone: str) -> None:
        public = next(s for s in self.subnets if s.is_public and s.availability_zone == zone)
        address = self.ensure(self.eip_rc, f"eip-nat-{zone}", ElasticIpDesired())
        role = f"nat-gateway-{zone}"
        before = self.scope.recorder.recorded(role)
        nat = self.ensure(self.nat_rc, role, NatGatewayDesired(public.id, address.id))
        self.nat_by_zone[zone] = nat.id
        if not self.nat_rc.is_ready(nat):
            self.nats_unready[zone] = nat.id
            self.nat_created = self.nat_created or self._created(before, nat)

    def wait_for_nat_gateways(self) -> None:
        """Poll the NAT gateways still pending (one describe for all), at the NatGatewayAvailable waiter's
        cadence; one that is gone (deleted, or failed) is created again."""
        if self.nats_to_poll:
            found = self.nat_rc.describe_many(sorted(set(self.nats_to_poll.values())))
            for polled in found.values():
                self.engine.learn(self.nat_rc, polled)
            for zone, nat_id in sorted(self.nats_to_poll.items()):
                observed = found.get(nat_id)
                if observed is None:
                    _log.warning("a pending NAT gateway is gone; creating it again", nat_gateway_id=nat_id)
                    self._ensure_nat_gateway(zone)
                elif not self.nat_rc.is_ready(observed):
                    self.nats_unready[zone] = nat_id
        if self.nats_unready:
            pending = ", ".join(sorted(set(self.nats_unready.values())))
            self.scope.condition(
                ROUTE_TABLES_READY,
                False,
                "WaitingForNatGateways",
                f"the private route tables route through NAT gateways {pending}, not available yet",
                "Info",
            )
            raise Waiting(
                f"NAT gateways {pending} are not available yet",
                NAT_GATEWAY_AVAILABLE.requeue(self.nat_created),
            )

    def prefetch_routing(self) -> None:
        """Route tables, routes and associations of every recorded role, one batch per kind and pass:
        the public step's batch serves the private step too."""
        if self.routing_prefetched:
            return
        self.routing_prefetched = True
        self.prefetch(self.rt_rc, self.recorded_roles("route-table-"))
        self.prefetch(self.route_rc, self.recorded_roles("route-"))
        self.prefetch(self.assoc_rc, self.recorded_roles("rtassoc-"))

    def reconcile_public_route_table(self) -> None:
        """The public route table, its default route to the internet gateway, and the public subnets'
        associations."""
        if not self.managed_vpc:
            return
        assert self.vpc_id is not None
        assert self.igw_id is not None
        self.prefetch_routing()
        public_rt = self.ensure(self.rt_rc, "route-table-public", RouteTableDesired(self.vpc_id))
        self.ensure(
            self.route_rc, "route-public-default", RouteDesired(public_rt.id, "0.0.0.0/0", self.igw_id)
        )
        for subnet in self.subnets:
            if subnet.managed and subnet.is_public:
                self.ensure(
                    self.assoc_rc,
                    f"rtassoc-{subnet.role}",
                    RouteTableAssociationDesired(public_rt.id, subnet.id),
                )
                self.route_table_by_subnet[subnet.id] = public_rt.id
        self.record_network()

    def reconcile_private_route_tables(self) -> None:
        """A route table per private zone, its default route through the zone's NAT gateway, and the
        private subnets' associations: after the NAT gateways are available."""
        if not self.managed_vpc:
            return
        assert self.vpc_id is not None
        zones = sorted({s.availability_zone for s in self.subnets if not s.is_public})
        self.prefetch_routing()
        private_tables: dict[str, str] = {}
        for zone in zones:
            nat = self.nat_by_zone.get(zone) or next(iter(self.nat_by_zone.values()), None)
            table = self.ensure(self.rt_rc, f"route-table-private-{zone}", RouteTableDesired(self.vpc_id))
            private_tables[zone] = table.id
            if nat is not None:
                self.ensure(
                    self.route_rc, f"route-private-{zone}-default", RouteDesired(table.id, "0.0.0.0/0", nat)
                )
        for subnet in self.subnets:
            if subnet.managed and not subnet.is_public:
                table_id = private_tables[subnet.availability_zone]
                self.ensure(
                    self.assoc_rc, f"rtassoc-{subnet.role}", RouteTableAssociationDesired(table_id, subnet.id)
                )
                self.route_table_by_subnet[subnet.id] = table_id
        self.record_network()

    def security_group_rules(self, ids: dict[str, str]) -> dict[str, tuple[IngressRule, ...]]:
        node = ids.get("node")
        controlplane = ids.get("controlplane")
        rules: dict[str, list[IngressRule]] = {role: [] for role in SG_ROLES}
        rules["controlplane"] += [
            IngressRule(
                "tcp", API_SERVER_PORT, API_SERVER_PORT, cidr_block="0.0.0.0/0", description="Kubernetes API"
            ),
            IngressRule("tcp", 2379, 2380, source_group_id=SELF, description="etcd"),
        ]
        if node:
            rules["controlplane"].append(
                IngressRule("tcp", 10250, 10250, source_group_id=node, description="kubelet")
            )
        rules["node"] += [
            IngressRule("tcp", 30000, 32767, cidr_block="0.0.0.0/0", description="NodePort services"),
            IngressRule("-1", source_group_id=SELF, description="node to node"),
        ]
        if controlplane:
            rules["node"].append(
                IngressRule("tcp", 10250, 10250, source_group_id=controlplane, description="kubelet")
            )
        return {role: tuple(r) for role, r in rules.items()}

    def reconcile_security_groups(self) -> None:
        assert self.vpc_id is not None
        roles = [f"sg-{role}" for role in SG_ROLES]
        self.prefetch(self.sg_rc, roles)
        # First the groups themselves (found, adopted or re-created after drift), rules left alone, so
        # that rules name the groups' current ids; then the rules, on the groups just observed.
        observed: dict[str, Observed] = {}
        for role in SG_ROLES:
            observed[role] = self.ensure(
                self.sg_rc, f"sg-{role}", self._sg_desired(role, (), manage_rules=False), shared=role == "lb"
            )
        rules = self.security_group_rules({role: o.id for role, o in observed.items()})
        for role in SG_ROLES:
            if role != "lb":  # shared with the cloud provider: create/delete only
                self.engine.update(self.sg_rc, observed[role], self._sg_desired(role, rules[role]))
            self.security_groups[role] = SecurityGroupStatus(
                id=observed[role].id, name=f"{self.cluster}-{role}"
            )
        self.record_network()

    def _sg_desired(
        self, role: str, rules: tuple[IngressRule, ...], manage_rules: bool = True
    ) -> SecurityGroupDesired:
        assert self.vpc_id is not None
        purpose = {"controlplane": "control plane", "node": "nodes", "lb": "load balancers (cloud provider)"}[
            role
        ]
        return SecurityGroupDesired(
            self.vpc_id, f"{self.cluster}-{role}", f"{self.cluster} {purpose}", rules, manage_rules
        )

    def lb_subnets(self) -> tuple[str, ...]:
        scheme = self.obj.spec.control_plane_load_balancer.scheme
        wanted_public = scheme == "internet-facing"
        by_zone: dict[str, str] = {}
        for subnet in self.subnets:
            if subnet.is_public == wanted_public:
                by_zone.setdefault(subnet.availability_zone, subnet.id)
        if not by_zone:
            by_zone = {s.availability_zone: s.id for s in self.subnets}
        return tuple(by_zone[z] for z in sorted(by_zone))

    def reconcile_load_balancer(self) -> None:
        """The load balancer, its target group and listener, created but not waited for
        (:meth:`wait_for_load_balancer` waits); the target group's ARN goes to ``status.network`` at once,
        so control-plane machines register while the load balancer still provisions.

        A load balancer still provisioning at the end of the last pass, with all three recorded, is not
        described here: the wait step polls it alone."""
        assert self.vpc_id is not None
        spec = self.obj.spec.control_plane_load_balancer
        name = spec.name or aws_name(self.cluster, "apiserver")
        recorded = self.obj.status.network.api_server_load_balancer
        records = [
            self.scope.recorder.recorded(r) for r in ("apiserver-lb", "apiserver-tg", "apiserver-listener")
        ]
        if (
            LOAD_BALANCER_READY in self.waiting_before
            and recorded is not None
            and recorded.name == name
            and [r.id if r is not None else None for r in records]
            == [recorded.arn, recorded.target_group_arn, recorded.listener_arn]
        ):
            self.load_balancer = recorded.model_copy()
            self.lb_to_poll = recorded.arn
            return
        self._ensure_load_balancer(name)

    def _ensure_load_balancer(self, name: str) -> None:
        assert self.vpc_id is not None
        spec = self.obj.spec.control_plane_load_balancer
        before = self.scope.recorder.recorded("apiserver-lb")
        lb = self.ensure(
            self.lb_rc,
            "apiserver-lb",
            LoadBalancerDesired(
                name,
                self.lb_subnets(),
                spec.scheme,
                cross_zone=spec.cross_zone_load_balancing,
                security_group_ids=tuple(spec.additional_security_groups),
            ),
        )
        tg = self.ensure(
            self.tg_rc,
            "apiserver-tg",
            TargetGroupDesired(aws_name(self.cluster, "apiserver-tg"), self.vpc_id),
        )
        listener = self.ensure(
            self.listener_rc, "apiserver-listener", ListenerDesired(lb.id, tg.id, API_SERVER_PORT)
        )
        self.load_balancer = LoadBalancerStatus(
            name=name,
            arn=lb.id,
            dns_name=lb.attributes.get("dns_name"),
            target_group_arn=tg.id,
            listener_arn=listener.id,
        )
        self.record_network()
        if not self.lb_rc.is_ready(lb) and lb.state is not None:
            self.lb_unready = lb.state
            self.lb_created = self._created(before, lb)

    def wait_for_load_balancer(self) -> None:
        """Poll the load balancer alone while it provisions, at the LoadBalancerAvailable waiter's cadence;
        one that is gone is created again."""
        assert self.load_balancer is not None
        if self.lb_to_poll is not None:
            observed = self.lb_rc.describe_by_id(self.lb_to_poll)
            if observed is not None:
                self.engine.learn(self.lb_rc, observed)
            if observed is None:
                _log.warning("the provisioning load balancer is gone; creating it again", arn=self.lb_to_poll)
                self._ensure_load_balancer(self.load_balancer.name or "")
            else:
                dns_name = observed.attributes.get("dns_name") or self.load_balancer.dns_name
                self.load_balancer = self.load_balancer.model_copy(update={"dns_name": dns_name})
                if not self.lb_rc.is_ready(observed) and observed.state is not None:
                    self.lb_unready = observed.state
        if self.lb_unready is not None:
            raise Waiting(
                f"load balancer {self.load_balancer.name} is {self.lb_unready}",
                LOAD_BALANCER_AVAILABLE.requeue(self.lb_created),
            )

    def mark_ready(self) -> Result | None:
        assert self.load_balancer is not None
        endpoint = self.obj.spec.control_plane_endpoint
        if not endpoint.is_set and self.load_balancer.dns_name:
            host = self.load_balancer.dns_name

            def set_endpoint(o: AWSCluster) -> None:
                o.spec.control_plane_endpoint = APIEndpoint(host=host, port=API_SERVER_PORT)

            self.scope.update_spec(set_endpoint)
        self.record_network()
        self.scope.mark_ready()
        return None

    def record_network(self) -> None:
        """Write what this pass knows of the network to ``status.network`` (in the status patch of this
        pass): called after each step that learns a part, so machines see subnets and security groups, and
        the target group's ARN, without waiting for the cluster to be ready. What this pass has not
        learnt (a private subnet's route table while its NAT gateway is pending) keeps its recorded
        value."""
        vpc_id, igw_id, managed = self.vpc_id, self.igw_id, self.managed_vpc
        infos = list(self.subnets)
        tables = dict(self.route_table_by_subnet)
        nats = dict(self.nat_by_zone)
        groups = {k: v.model_copy() for k, v in self.security_groups.items()}
        lb = self.load_balancer.model_copy() if self.load_balancer is not None else None

        def network(o: AWSCluster) -> None:
            net = o.status.network
            if vpc_id is not None:
                net.vpc_id = vpc_id
            if igw_id is not None or not managed:
                net.internet_gateway_id = igw_id
            if infos:
                before = {s.id: s for s in net.subnets}
                net.subnets = [
                    SubnetStatus(
                        id=s.id,
                        cidr_block=s.cidr_block,
                        availability_zone=s.availability_zone,
                        is_public=s.is_public,
                        route_table_id=tables.get(s.id)
                        or (before[s.id].route_table_id if s.id in before else None),
                        nat_gateway_id=(
                            nats.get(s.availability_zone)
                            or (before[s.id].nat_gateway_id if s.id in before else None)
                        )
                        if s.is_public
                        else None,
                    )
                    for s in infos
                ]
            if groups:
                net.security_groups = {k: v.model_copy() for k, v in groups.items()}
            if lb is not None:
                net.api_server_load_balancer = lb.model_copy()

        self.scope.change_status(network)

    def create_workflow(self) -> Action:
        """VPC → subnets → Join(internet gateway → Join(public route table; EIPs and NAT gateways → wait →
        private route tables; load balancer → wait); security groups) → MarkReady.

        The internet gateway comes before the NAT gateways and the load balancer because AWS refuses a
        public NAT gateway, and an internet-facing load balancer, in a VPC without one; it takes no wait.
        A step waiting on AWS holds back only what depends on it."""
        s = self.scope

        def run(fn: Callable[[], Any]) -> Callable[[], Result | None]:
            def call() -> Result | None:
                fn()
                return None

            return call

        def created_then_waited(
            create: str, create_fn: Callable[[], Any], wait: str, wait_fn: Callable[[], Any], condition: str
        ) -> Action:
            # The wait step says whether the condition is true; the create step only reports failures.
            return Sequential(
                step(s, create, run(create_fn), condition, condition_on_success=False),
                step(s, wait, run(wait_fn), condition),
            )

        return Sequential(
            step(s, "ReconcileVpc", run(self.reconcile_vpc), VPC_READY),
            step(s, "ReconcileSubnets", run(self.reconcile_subnets), SUBNETS_READY),
            Join(
                Sequential(
                    step(
                        s,
                        "ReconcileInternetGateway",
                        run(self.reconcile_internet_gateway),
                        INTERNET_GATEWAY_READY,
                        condition_on_success=False,
                    ),
                    Join(
                        step(
                            s,
                            "ReconcilePublicRouteTable",
                            run(self.reconcile_public_route_table),
                            INTERNET_GATEWAY_READY,
                        ),
                        Sequential(
                            created_then_waited(
                                "ReconcileNatGateways",
                                self.reconcile_nat_gateways,
                                "WaitForNatGateways",
                                self.wait_for_nat_gateways,
                                NAT_GATEWAYS_READY,
                            ),
                            step(
                                s,
                                "ReconcilePrivateRouteTables",
                                run(self.reconcile_private_route_tables),
                                ROUTE_TABLES_READY,
                            ),
                        ),
                        created_then_waited(
                            "ReconcileLoadBalancer",
                            self.reconcile_load_balancer,
                            "WaitForLoadBalancer",
                            self.wait_for_load_balancer,
                            LOAD_BALANCER_READY,
                        ),
                    ),
                ),
                # Last in the pass: machines launch once the groups are recorded, and by then so is the
                # target group's ARN, so a machine is woken once for both.
                step(
                    s, "ReconcileSecurityGroups", run(self.reconcile_security_groups), SECURITY_GROUPS_READY
                ),
            ),
            step(s, "MarkReady", self.mark_ready),
        )

    # -- delete ------------------------------------------------------------------------------------------
    def deletion_plan(self) -> list[tuple[str, ResourceClass[Any], list[str]]]:
        """(description, resource class, roles) in the order they are deleted."""
        recorded = set(self.obj.status.resources) | set(self.obj.status.intents)

        def roles(prefix: str, kind: str) -> list[str]:
            return sorted(r for r in recorded if r.startswith(prefix) and self._kind_of(r) in (kind, None))

        return [
            ("DeleteListener", self.listener_rc, ["apiserver-listener"]),
            ("DeleteLoadBalancer", self.lb_rc, ["apiserver-lb"]),
            ("DeleteTargetGroup", self.tg_rc, ["apiserver-tg"]),
            ("DeleteSecurityGroups", self.sg_rc, [f"sg-{r}" for r in SG_ROLES]),
            ("DeleteRouteTableAssociations", self.assoc_rc, roles("rtassoc-", "route-table-association")),
            ("DeleteRoutes", self.route_rc, roles("route-", "route")),
            ("DeleteRouteTables", self.rt_rc, roles("route-table-", "route-table")),
            ("DeleteNatGateways", self.nat_rc, roles("nat-gateway-", "nat-gateway")),
            ("DeleteElasticIps", self.eip_rc, roles("eip-", "elastic-ip")),
            ("DetachInternetGateway", self.igw_attach_rc, ["internet-gateway-attachment"]),
            ("DeleteInternetGateway", self.igw_rc, ["internet-gateway"]),
            ("DeleteSubnets", self.subnet_rc, roles("subnet-", "subnet")),
            ("DeleteVpc", self.vpc_rc, ["vpc"]),
        ]

    def _kind_of(self, role: str) -> str | None:
        record = self.obj.status.resources.get(role) or self.obj.status.intents.get(role)
        return record.kind if record is not None else None

    def delete_roles(self, rc: ResourceClass[Any], roles: list[str]) -> None:
        waiting: list[str] = []
        for role in roles:
            if self._kind_of(role) not in (rc.kind, None):
                continue
            try:
                self.engine.remove(rc, role, self.scope.engine_scope)
            except Waiting as exc:
                waiting.append(str(exc))
        if waiting:
            raise Waiting("; ".join(waiting), 10.0)

    def sweep_cluster_resources(self) -> None:
        """Delete whatever else carries the cluster's owned tag and this store's tag (duplicates from lost
        records); another store's resources, and those with no capa-py store tag, are left alone."""
        tag = {CLUSTER_TAG_PREFIX + self.cluster: OWNED}
        store_uid = tagging_store_uid(self.scope.obj.metadata.annotations, self.scope.store.uid)
        machines_left = list(
            self.scope.store.list(
                AWSMachine,
                namespace=self.obj.namespace,
                label_selector=f"{CLUSTER_NAME_LABEL}={self.cluster}",
            )
        )
        classes: list[ResourceClass[Any]] = [
            self.listener_rc,
            self.lb_rc,
            self.tg_rc,
            self.nat_rc,
            self.eip_rc,
            self.rt_rc,
            self.igw_rc,
            self.subnet_rc,
            self.sg_rc,
            self.vpc_rc,
        ]
        if not machines_left:
            classes.insert(0, Instance(self.scope.aws))
        waiting: list[str] = []
        for rc in classes:
            for observed in rc.describe_by_tags(tag, None):
                if foreign_store(observed.tags, store_uid) is not None:
                    # Another store's (or not capa-py's) resource under this cluster's name: never ours.
                    _log.warning(
                        "not sweeping a resource tagged with the cluster that another store owns",
                        kind=rc.kind,
                        resource_id=observed.id,
                        cluster=self.cluster,
                    )
                    continue
                self._release_dependents(rc, observed)
                try:
                    rc.delete(observed.id)
                    self.engine.forget(rc, observed.id, self.cluster)
                    if self.scope.engine_scope.events is not None:
                        self.scope.engine_scope.events.deleted(rc.kind, "stray", observed.id)
                    _log.warning(
                        "deleted a stray resource tagged with the cluster",
                        kind=rc.kind,
                        resource_id=observed.id,
                        cluster=self.cluster,
                    )
                except AWSNotFound:
                    continue
                except (Retryable, DependencyViolation) as exc:
                    waiting.append(f"{rc.kind} {observed.id}: {exc}")
                except AWSError as exc:
                    # Not something waiting fixes (a permission, a resource another cluster still uses):
                    # reported prominently and left for `capa audit`, not a finalizer stuck forever.
                    _log.error(
                        "could not delete a stray resource tagged with the cluster; `capa audit` lists it",
                        kind=rc.kind,
                        resource_id=observed.id,
                        cluster=self.cluster,
                        error=str(exc),
                    )
                    continue
                if rc.deletion_is_slow and rc.describe_by_id(observed.id) is not None:
                    waiting.append(f"{rc.kind} {observed.id} deleting")
        if waiting:
            raise Waiting("sweeping stray cluster resources: " + "; ".join(waiting[:5]), 10.0)

    def _release_dependents(self, rc: ResourceClass[Any], observed: Observed) -> None:
        """What AWS refuses to delete while attached: detach gateways, disassociate route tables."""
        if rc is self.igw_rc:
            for attachment in observed.attributes.get("attachments", []):
                self._detach(observed.id, str(attachment["vpc_id"]))
        elif rc is self.rt_rc:
            for association in observed.attributes.get("associations", []):
                if not association.get("main") and association.get("id"):
                    with contextlib.suppress(AWSNotFound):
                        self.assoc_rc.delete(str(association["id"]))

    def _detach(self, gateway_id: str, vpc_id: str) -> None:
        with contextlib.suppress(AWSNotFound):
            self.igw_attach_rc.delete(attachment_id(gateway_id, vpc_id))

    def delete_workflow(self) -> Action:
        s = self.scope
        actions: list[Action] = []
        for description, rc, roles in self.deletion_plan():

            def delete(rc: ResourceClass[Any] = rc, roles: list[str] = roles) -> Result | None:
                self.delete_roles(rc, roles)
                return None

            actions.append(step(s, description, delete))

        def sweep() -> Result | None:
            self.sweep_cluster_resources()
            return None

        actions.append(step(s, "SweepStrayResources", sweep))
        return Sequential(*actions)


class AWSClusterController:
    name = "awscluster"
    kind = AWSCluster
    watched_kinds = (Cluster, AWSMachine)
    status_kinds = ()

    def __init__(
        self, store: ObjectStore, pool: ClientPool, engine: Engine, events: EventRecorder | None = None
    ) -> None:
        self.store = store
        self.pool = pool
        self.engine = engine
        self.events = events if events is not None else EventRecorder(store)
        # What an AWSCluster needs of its Cluster: that it exists, its uid and whether it is paused.
        self.views = {"Cluster": cluster_view}

    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        obj = event.object
        if isinstance(obj, AWSMachine):
            # A deleting AWSCluster waits for its machines; their removal is what it waits for.
            if event.type != "DELETED":
                return []
            cluster = obj.metadata.labels.get(CLUSTER_NAME_LABEL)
            return (
                [
                    ObjectKey("AWSCluster", o.metadata.namespace or "", o.name)
                    for o in self.store.list(
                        AWSCluster,
                        namespace=obj.metadata.namespace,
                        label_selector=f"{CLUSTER_NAME_LABEL}={cluster}",
                    )
                    if o.being_deleted
                ]
                if cluster
                else []
            )
        if (
            isinstance(obj, Cluster)
            and obj.spec.infrastructure_ref
            and obj.spec.infrastructure_ref.kind == "AWSCluster"
        ):
            return [
                ObjectKey("AWSCluster", obj.metadata.namespace or "", obj.spec.infrastructure_ref.name or "")
            ]
        return []

    def owner_cluster(self, obj: AWSCluster) -> Cluster | None:
        owner = next((r for r in obj.metadata.owner_references if r.kind == "Cluster"), None)
        if owner is None:
            return None
        return get_or_none(self.store, Cluster, owner.name, obj.namespace)

    def reconcile(self, key: ObjectKey) -> Result:
        obj = fetch(self.store, AWSCluster, key)
        if obj is None:
            return no_requeue()
        cluster = self.owner_cluster(obj)
        if not obj.being_deleted:
            if cluster is None:
                return (
                    no_requeue()
                )  # Cluster API core has not claimed it yet; its owner-reference write wakes us
            paused = pause_reason(obj, cluster)
            if paused is not None:
                mark_paused(self.store, obj, paused)
                return no_requeue()
            obj = add_finalizer(self.store, obj, AWSCLUSTER_FINALIZER)
            obj = record_store_uid(self.store, obj)
        elif AWSCLUSTER_FINALIZER not in obj.metadata.finalizers or left_alone(obj, cluster):
            return no_requeue()
        cluster_name = (
            cluster.name if cluster is not None else obj.metadata.labels.get(CLUSTER_NAME_LABEL, obj.name)
        )
        aws = self.pool.for_region(obj.spec.region)
        scope = ReconcileScope(
            self.store,
            StatusRecorder(self.store, obj),
            self.engine,
            aws,
            cluster_name,
            dict(obj.spec.additional_tags),
            events=self.events,
        )
        work = ClusterReconcile(scope)
        if obj.being_deleted:
            return self._delete(work)
        result = ignore_exit(work.create_workflow().run(Context()))
        scope.summarize(CLUSTER_CONDITIONS)
        settle(self, key, scope.obj)
        scope.patch()
        return result

    def _delete(self, work: ClusterReconcile) -> Result:
        scope = work.scope

        def deleting(o: AWSCluster) -> None:
            o.status.ready = False
            set_condition(o.status, READY, False, "Deleting", "deleting the cluster's AWS resources", "Info")

        scope.change_status(deleting)
        machines = [
            m.name
            for m in self.store.list(
                AWSMachine,
                namespace=scope.obj.namespace,
                label_selector=f"{CLUSTER_NAME_LABEL}={scope.cluster_name}",
            )
        ]
        if machines:
            # Instances sit in the cluster's subnets and security groups: they go first.
            scope.waiting_on = (
                f"waiting for {len(machines)} AWSMachine(s) to be deleted: {', '.join(sorted(machines))}"
            )
            result = requeue_after(5.0)
        else:
            result = work.delete_workflow().run(Context())
        if result.interrupts and scope.waiting_on:
            message = scope.waiting_on
            self.events.normal(scope.obj, DELETION_BLOCKED, message)

            def waiting(o: AWSCluster) -> None:
                set_condition(o.status, READY, False, "Deleting", message, "Info")

            scope.change_status(waiting)
        scope.patch()
        if result.interrupts:
            return result
        remove_finalizer(self.store, scope.obj, AWSCLUSTER_FINALIZER)
        _log.info("cluster infrastructure deleted", cluster=scope.cluster_name)
        return no_requeue()
