"""The scope of one AWSCluster reconcile: what its services share.

A :class:`ClusterScope` is the reconcile's :class:`~controllers.aws_scope.ReconcileScope` together with the
cluster's resource classes (:class:`ClusterResources`), what this pass has learnt of the network
(:class:`NetworkFacts`, written to ``status.network`` by :meth:`ClusterScope.record_network`) and what it
waits for (:class:`PendingNatGateways`, :class:`PendingLoadBalancer`). It lives for one pass.

A service's delete is a list of :class:`Deletion` steps: the recorded roles of one resource kind each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from capa_py.api.aws import (
    AWSCluster,
    LoadBalancerStatus,
    RecordedResource,
    SecurityGroupStatus,
    SubnetStatus,
)
from capa_py.aws.session import AWSClients
from capa_py.cache.front import ReadThrough
from capa_py.engine.errors import Waiting
from capa_py.engine.resource import Observed, ResourceClass
from controllers.aws_scope import ReconcileScope
from controllers.waits import just_created
from resources.elastic_ip import ElasticIp
from resources.hosted_zone import HostedZone
from resources.internet_gateway import InternetGateway, InternetGatewayAttachment
from resources.listener import Listener
from resources.load_balancer import LoadBalancer
from resources.nat_gateway import NatGateway
from resources.record_set import RecordSet
from resources.route import Route
from resources.route_table import RouteTable, RouteTableAssociation
from resources.security_group import SecurityGroup
from resources.subnet import Subnet
from resources.target_group import TargetGroup
from resources.vpc import Vpc

API_SERVER_PORT = 6443
D = TypeVar("D")


@dataclass
class SubnetInfo:
    role: str
    id: str
    cidr_block: str
    availability_zone: str
    is_public: bool
    managed: bool


@dataclass(frozen=True)
class ClusterResources:
    """The resource classes of a cluster's infrastructure, over the clients of its region."""

    vpc: Vpc
    subnet: Subnet
    internet_gateway: InternetGateway
    internet_gateway_attachment: InternetGatewayAttachment
    elastic_ip: ElasticIp
    nat_gateway: NatGateway
    route_table: RouteTable
    route: Route
    route_table_association: RouteTableAssociation
    security_group: SecurityGroup
    load_balancer: LoadBalancer
    target_group: TargetGroup
    listener: Listener
    hosted_zone: HostedZone
    record_set: RecordSet

    @classmethod
    def of(cls, aws: AWSClients) -> ClusterResources:
        return cls(
            Vpc(aws),
            Subnet(aws),
            InternetGateway(aws),
            InternetGatewayAttachment(aws),
            ElasticIp(aws),
            NatGateway(aws),
            RouteTable(aws),
            Route(aws),
            RouteTableAssociation(aws),
            SecurityGroup(aws),
            LoadBalancer(aws),
            TargetGroup(aws),
            Listener(aws),
            HostedZone(aws),
            RecordSet(aws),
        )


@dataclass
class NetworkFacts:
    """What this pass has learnt of the cluster's network (what it has not learnt stays as recorded)."""

    vpc_id: str | None = None
    internet_gateway_id: str | None = None
    subnets: list[SubnetInfo] = field(default_factory=list)
    nat_by_zone: dict[str, str] = field(default_factory=dict)
    route_table_by_subnet: dict[str, str] = field(default_factory=dict)
    security_groups: dict[str, SecurityGroupStatus] = field(default_factory=dict)
    load_balancer: LoadBalancerStatus | None = None


@dataclass
class PendingNatGateways:
    """The NAT gateways this pass waits for."""

    to_poll: dict[str, str] = field(default_factory=dict)
    """zone → NAT gateway id recorded as pending, not observed yet in this pass."""
    unready: dict[str, str] = field(default_factory=dict)
    """zone → NAT gateway id observed in this pass and not available yet."""
    created: bool = False
    """Whether one of them was created (or adopted) in this pass."""
    created_at: datetime | None = None
    """When the youngest of those not available yet was created, as AWS says."""


@dataclass
class PendingLoadBalancer:
    """The load balancer this pass waits for."""

    to_poll: str | None = None
    """Its ARN, when recorded as provisioning and not observed yet in this pass."""
    unready: str | None = None
    """Its state, when observed in this pass and not active yet."""
    created: bool = False
    """Whether it was created (or adopted) in this pass."""
    created_at: datetime | None = None
    """When it was created, as AWS says."""


@dataclass
class ClusterScope(ReconcileScope[AWSCluster]):
    """One reconcile of one AWSCluster: the scope its services' steps run over."""

    resources: ClusterResources = field(init=False)
    network: NetworkFacts = field(init=False, default_factory=NetworkFacts)
    nat_gateways: PendingNatGateways = field(init=False, default_factory=PendingNatGateways)
    load_balancer: PendingLoadBalancer = field(init=False, default_factory=PendingLoadBalancer)
    waiting_before: frozenset[str] = field(init=False)
    """The conditions that said Waiting when the last pass ended: this pass polls just those resources in
    the wait steps instead of describing them again in the create steps."""
    kinds_before: Mapping[str, str] = field(init=False)
    """The kind of every role recorded (or intended) when the pass began: what a delete goes through."""
    routing_prefetched: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.resources = ClusterResources.of(self.aws)
        status = self.obj.status
        self.waiting_before = frozenset(
            c.type for c in status.conditions if c.status == "False" and c.reason == "Waiting"
        )
        kinds = {role: record.kind for role, record in status.intents.items()}
        kinds.update({role: record.kind for role, record in status.resources.items()})
        self.kinds_before = kinds

    @property
    def managed_vpc(self) -> bool:
        return self.obj.spec.network.vpc.id is None

    def prefetch(self, rc: ResourceClass[Any], roles: Iterable[str]) -> None:
        self.engine.prefetch(rc, roles, self.engine_scope)

    def reads(self, rc: ResourceClass[D]) -> ReadThrough[D]:
        """``rc`` through the region's shared observations: what a wait step's poll teaches them, what a
        sweep deletes."""
        return ReadThrough.of(rc, self.engine_scope.reads)

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
        scope = self.engine_scope
        if extra_tags:
            scope = dataclasses.replace(scope, additional_tags={**scope.additional_tags, **extra_tags})
        return self.engine.ensure(
            rc, role, desired, scope, name=f"{self.cluster_name}-{role}", shared_with_cloud_provider=shared
        )

    @staticmethod
    def created(before: RecordedResource | None, observed: Observed) -> bool:
        """Whether ``ensure`` just created (or adopted) ``observed`` — its role recorded nothing, or another
        id, before — or AWS says it was created moments ago (a reconcile right after the create's)."""
        return before is None or before.id != observed.id or just_created(observed.created_at)

    def kind_of(self, role: str) -> str | None:
        record = self.obj.status.resources.get(role) or self.obj.status.intents.get(role)
        return record.kind if record is not None else None

    def delete_roles(self, rc: ResourceClass[Any], roles: list[str]) -> None:
        waiting: list[str] = []
        for role in roles:
            if self.kind_of(role) not in (rc.kind, None):
                continue
            try:
                self.engine.remove(rc, role, self.engine_scope)
            except Waiting as exc:
                waiting.append(str(exc))
        if waiting:
            raise Waiting("; ".join(waiting), 10.0)

    def record_network(self) -> None:
        """Write what this pass knows of the network to ``status.network`` (in the status patch of this
        pass): called after each step that learns a part, so machines see subnets and security groups, and
        the target group's ARN, without waiting for the cluster to be ready. What this pass has not
        learnt (a private subnet's route table while its NAT gateway is pending) keeps its recorded
        value."""
        facts = self.network
        vpc_id, igw_id, managed = facts.vpc_id, facts.internet_gateway_id, self.managed_vpc
        infos = list(facts.subnets)
        tables = dict(facts.route_table_by_subnet)
        nats = dict(facts.nat_by_zone)
        groups = {k: v.model_copy() for k, v in facts.security_groups.items()}
        lb = facts.load_balancer.model_copy() if facts.load_balancer is not None else None

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

        self.change_status(network)


RoleList = Callable[[ClusterScope], list[str]]


def roles(*names: str) -> RoleList:
    """The given roles (each deleted only if what is recorded under it is of the step's kind)."""
    return lambda scope: list(names)


def recorded(prefix: str, kind: str) -> RoleList:
    """Every role starting with ``prefix`` recorded as ``kind`` when the pass began."""
    return lambda scope: sorted(
        role for role, found in scope.kinds_before.items() if role.startswith(prefix) and found == kind
    )


@dataclass(frozen=True)
class Deletion:
    """One step of a service's delete: the roles of one resource kind, removed through the engine."""

    description: str
    resource: Callable[[ClusterResources], ResourceClass[Any]]
    roles: RoleList

    def __call__(self, scope: ClusterScope) -> None:
        scope.delete_roles(self.resource(scope.resources), self.roles(scope))
