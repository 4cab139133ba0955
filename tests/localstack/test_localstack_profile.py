"""The LOCALSTACK endpoint profile against a running LocalStack: the facts it encodes, measured, and the
engine over the EC2 part of a cluster with that profile.

The profile lowers ``client_token`` for every kind, because LocalStack serves EC2 from moto and ignores
``ClientToken``: a repeated create makes a second resource. These tests check that fact where it matters
(RunInstances, CreateRouteTable, CreateNatGateway), that the free edition has no ELBv2, and that the
engine under the profile makes exactly one of each network resource, records them in a real store, and
makes no mutating call when nothing changed — nor after the status was lost.

They run only with ``CAPA_TEST_AWS_ENDPOINT`` set (``make localstack-test``); otherwise they are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSClusterSpec, NetworkSpec, VPCSpec
from capa_py.api.meta import ObjectMeta
from capa_py.aws.accounting import call_scope
from capa_py.aws.errors import AWSError
from capa_py.aws.session import AWSClients
from capa_py.engine.engine import Engine, Scope
from capa_py.engine.profiles import LOCALSTACK
from capa_py.engine.recorder import StatusRecorder
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.tags import cluster_tag_key, lookup_tags, managed_tags
from capa_py.engine.traits import StrategyClass, choose_strategy
from capa_py.store import SQLiteStore
from resources import RESOURCE_CLASSES
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from resources.instance import Instance, InstanceDesired
from resources.internet_gateway import (
    InternetGateway,
    InternetGatewayAttachment,
    InternetGatewayAttachmentDesired,
    InternetGatewayDesired,
)
from resources.nat_gateway import NatGateway, NatGatewayDesired
from resources.route import Route, RouteDesired
from resources.route_table import (
    RouteTable,
    RouteTableAssociation,
    RouteTableAssociationDesired,
    RouteTableDesired,
)
from resources.security_group import SELF, IngressRule, SecurityGroup, SecurityGroupDesired
from resources.subnet import Subnet, SubnetDesired
from resources.vpc import Vpc, VpcDesired
from tests.localstack.endpoint import NEEDS_LOCALSTACK, REGION, endpoint_url

pytestmark = [
    pytest.mark.localstack,
    pytest.mark.skipif(endpoint_url() is None, reason=NEEDS_LOCALSTACK),
]

CLUSTER = "lsk"
ZONE = f"{REGION}a"
VPC_CIDR = "10.0.0.0/16"
TOKEN_STRATEGIES = (StrategyClass.TOKEN_SEPARATE_TAGGING, StrategyClass.TOKEN_NO_TAGS)


def _tags(role: str) -> dict[str, str]:
    return managed_tags(CLUSTER, role)


def _count(aws: AWSClients, operation: str, key: str, **params: Any) -> int:
    return len(list(aws.ec2.pages(operation, key, **params)))


def _image(aws: AWSClients) -> str:
    # LocalStack runs with moto's bundled AMIs off (as the moto harness does): register one.
    response = aws.ec2.call(
        "RegisterImage", Name="capa-localstack-node", RootDeviceName="/dev/sda1", Architecture="x86_64"
    )
    return str(response["ImageId"])


# -- the facts the profile encodes ----------------------------------------------------------------------


def test_profile_lowers_client_tokens_for_every_kind() -> None:
    for cls in RESOURCE_CLASSES:
        traits = LOCALSTACK.effective(cls.kind, cls.traits)
        assert not traits.client_token, cls.kind
        assert choose_strategy(traits) not in TOKEN_STRATEGIES, cls.kind


def test_run_instances_ignores_client_token(aws: AWSClients) -> None:
    vpc = Vpc(aws).create(VpcDesired(VPC_CIDR), _tags("vpc"), None)
    subnet = Subnet(aws).create(SubnetDesired(vpc.id, "10.0.1.0/24", ZONE), _tags("subnet"), None)
    desired = InstanceDesired(image_id=_image(aws), instance_type="t3.medium", subnet_id=subnet.id)
    instances = Instance(aws)

    first = instances.create(desired, _tags("node"), "same-token")
    second = instances.create(desired, _tags("node"), "same-token")

    assert Instance.traits.client_token, "AWS honours the token: RunInstances declares it"
    assert first.id != second.id, "LocalStack starts a second instance for a repeated ClientToken"
    reservations = aws.ec2.call("DescribeInstances")["Reservations"]
    assert sum(len(r["Instances"]) for r in reservations) == 2


def test_create_route_table_ignores_client_token(aws: AWSClients) -> None:
    vpc = Vpc(aws).create(VpcDesired(VPC_CIDR), None, None)
    tables = RouteTable(aws)

    first = tables.create(RouteTableDesired(vpc.id), None, "rtb-token")
    second = tables.create(RouteTableDesired(vpc.id), None, "rtb-token")

    assert first.id != second.id, "a repeated ClientToken makes a second route table"


def test_create_nat_gateway_does_not_return_the_original_for_a_repeated_token(aws: AWSClients) -> None:
    vpc = Vpc(aws).create(VpcDesired(VPC_CIDR), None, None)
    subnet = Subnet(aws).create(SubnetDesired(vpc.id, "10.0.1.0/24", ZONE, is_public=True), None, None)
    address = ElasticIp(aws).create(ElasticIpDesired(), None, None)
    desired = NatGatewayDesired(subnet.id, address.id)
    gateways = NatGateway(aws)

    first = gateways.create(desired, None, "nat-token")
    try:
        again: Observed | None = gateways.create(desired, None, "nat-token")
    except AWSError:  # measured: Resource.AlreadyAssociated, the address is taken by the first one
        again = None
    assert again is None or again.id != first.id, "AWS would return the first gateway"


def test_free_edition_has_no_elbv2(aws: AWSClients) -> None:
    with pytest.raises(AWSError) as failure:
        aws.elbv2.call("DescribeLoadBalancers")
    assert failure.value.code == "InternalFailure"
    assert "license" in str(failure.value) or "not yet been emulated" in str(failure.value)


# -- the engine over the EC2 part of a cluster ------------------------------------------------------------


@dataclass
class Owner:
    """The AWSCluster whose status the engine records into, persisted in a real SQLite store."""

    store: SQLiteStore
    name: str = CLUSTER
    namespace: str = "default"

    def persisted(self) -> AWSCluster:
        return self.store.get(AWSCluster, self.name, self.namespace)

    def scope(self) -> Scope:
        """What a fresh reconcile works with: the object as persisted."""
        obj = self.persisted()
        return Scope(cluster=CLUSTER, owner_uid=obj.uid, recorder=StatusRecorder(self.store, obj))


@pytest.fixture
def owner(store: SQLiteStore) -> Owner:
    store.create(
        AWSCluster(
            metadata=ObjectMeta(name=CLUSTER, namespace="default"),
            spec=AWSClusterSpec(region=REGION, network=NetworkSpec(vpc=VPCSpec(cidr_block=VPC_CIDR))),
        )
    )
    return Owner(store)


def ensure_network(engine: Engine, aws: AWSClients, scope: Scope) -> dict[str, str]:
    """What the AWSCluster controller makes for one zone, without NAT gateways or the load balancer:
    role → id."""

    def ensure(rc: ResourceClass[Any], role: str, desired: Any) -> str:
        observed = engine.ensure(rc, role, desired, scope, name=f"{CLUSTER}-{role}")
        return observed.id

    ids: dict[str, str] = {}
    ids["vpc"] = vpc = ensure(Vpc(aws), "vpc", VpcDesired(VPC_CIDR))
    ids["subnet-public"] = public = ensure(
        Subnet(aws), "subnet-public", SubnetDesired(vpc, "10.0.0.0/24", ZONE, is_public=True)
    )
    ids["subnet-private"] = private = ensure(
        Subnet(aws), "subnet-private", SubnetDesired(vpc, "10.0.1.0/24", ZONE)
    )
    ids["internet-gateway"] = igw = ensure(InternetGateway(aws), "internet-gateway", InternetGatewayDesired())
    ids["internet-gateway-attachment"] = ensure(
        InternetGatewayAttachment(aws),
        "internet-gateway-attachment",
        InternetGatewayAttachmentDesired(igw, vpc),
    )
    ids["eip-nat"] = ensure(ElasticIp(aws), "eip-nat", ElasticIpDesired())
    ids["route-table-public"] = public_rt = ensure(
        RouteTable(aws), "route-table-public", RouteTableDesired(vpc)
    )
    ids["route-table-private"] = private_rt = ensure(
        RouteTable(aws), "route-table-private", RouteTableDesired(vpc)
    )
    ids["route-public-default"] = ensure(
        Route(aws), "route-public-default", RouteDesired(public_rt, "0.0.0.0/0", igw)
    )
    ids["rtassoc-public"] = ensure(
        RouteTableAssociation(aws), "rtassoc-public", RouteTableAssociationDesired(public_rt, public)
    )
    ids["rtassoc-private"] = ensure(
        RouteTableAssociation(aws), "rtassoc-private", RouteTableAssociationDesired(private_rt, private)
    )
    groups = SecurityGroup(aws)
    names = {"controlplane": "control plane", "node": "nodes"}
    # First the groups, then their rules, which name each other (as the controller does).
    for role, purpose in names.items():
        recorded = scope.recorder.recorded(f"sg-{role}")
        if recorded is None:
            ensure(groups, f"sg-{role}", SecurityGroupDesired(vpc, f"{CLUSTER}-{role}", purpose))
    node = scope.recorder.recorded("sg-node")
    controlplane = scope.recorder.recorded("sg-controlplane")
    assert node is not None
    assert controlplane is not None
    rules = {
        "controlplane": (
            IngressRule("tcp", 6443, 6443, cidr_block="0.0.0.0/0", description="Kubernetes API"),
            IngressRule("tcp", 2379, 2380, source_group_id=SELF, description="etcd"),
            IngressRule("tcp", 10250, 10250, source_group_id=node.id, description="kubelet"),
        ),
        "node": (
            IngressRule("tcp", 30000, 32767, cidr_block="0.0.0.0/0", description="NodePort services"),
            IngressRule("-1", source_group_id=SELF, description="node to node"),
            IngressRule("tcp", 10250, 10250, source_group_id=controlplane.id, description="kubelet"),
        ),
    }
    for role, purpose in names.items():
        ids[f"sg-{role}"] = ensure(
            groups, f"sg-{role}", SecurityGroupDesired(vpc, f"{CLUSTER}-{role}", purpose, rules[role])
        )
    return ids


def what_exists(aws: AWSClients, vpc_id: str) -> dict[str, int]:
    """How many of each kind the account holds (the default VPC's own resources left out)."""
    in_vpc = [{"Name": "vpc-id", "Values": [vpc_id]}]
    owned = [{"Name": f"tag:{cluster_tag_key(CLUSTER)}", "Values": ["owned"]}]
    tables = list(aws.ec2.pages("DescribeRouteTables", "RouteTables", Filters=in_vpc))
    non_main = [t for t in tables if not any(a.get("Main") for a in t.get("Associations", []))]
    public = [t for t in non_main if any(r.get("GatewayId", "").startswith("igw-") for r in t["Routes"])]
    return {
        "vpc": _count(aws, "DescribeVpcs", "Vpcs", Filters=owned),
        "all-vpcs": _count(
            aws, "DescribeVpcs", "Vpcs", Filters=[{"Name": "is-default", "Values": ["false"]}]
        ),
        "subnet": _count(aws, "DescribeSubnets", "Subnets", Filters=in_vpc),
        "internet-gateway": _count(aws, "DescribeInternetGateways", "InternetGateways"),
        "attached-gateway": _count(
            aws,
            "DescribeInternetGateways",
            "InternetGateways",
            Filters=[{"Name": "attachment.vpc-id", "Values": [vpc_id]}],
        ),
        "elastic-ip": len(aws.ec2.call("DescribeAddresses").get("Addresses", [])),
        "route-table": len(non_main),
        "default-route": sum(
            1 for t in public for r in t["Routes"] if r.get("DestinationCidrBlock") == "0.0.0.0/0"
        ),
        "association": sum(
            1 for t in non_main for a in t.get("Associations", []) if a.get("SubnetId") and not a.get("Main")
        ),
        # Every VPC has a default group the engine does not make.
        "security-group": _count(aws, "DescribeSecurityGroups", "SecurityGroups", Filters=in_vpc) - 1,
    }


ONE_OF_EACH = {
    "vpc": 1,
    "all-vpcs": 1,
    "subnet": 2,
    "internet-gateway": 1,
    "attached-gateway": 1,
    "elastic-ip": 1,
    "route-table": 2,
    "default-route": 1,
    "association": 2,
    "security-group": 2,
}


def test_engine_makes_one_of_each_and_a_second_ensure_changes_nothing(aws: AWSClients, owner: Owner) -> None:
    engine = Engine(LOCALSTACK)

    with call_scope() as first:
        ids = ensure_network(engine, aws, owner.scope())

    assert what_exists(aws, ids["vpc"]) == ONE_OF_EACH
    status = owner.persisted().status
    assert {role: r.id for role, r in status.resources.items()} == ids, "every id recorded in the store"
    assert not status.intents, "no intent left behind"
    assert all(r.strategy for r in status.resources.values())
    assert first.total(mutating=True) > 0
    for role in ("vpc", "subnet-public", "internet-gateway", "eip-nat", "route-table-public", "sg-node"):
        tags = aws.ec2.call("DescribeTags", Filters=[{"Name": "resource-id", "Values": [ids[role]]}]).get(
            "Tags", []
        )
        assert lookup_tags(CLUSTER, role).items() <= {t["Key"]: t["Value"] for t in tags}.items(), role

    with call_scope() as second:
        again = ensure_network(engine, aws, owner.scope())

    assert again == ids
    assert second.mutating_operations() == {}, "nothing changed: no mutating call"
    assert second.total(mutating=True) == 0
    assert what_exists(aws, ids["vpc"]) == ONE_OF_EACH


def _ingress(aws: AWSClients, group_ids: list[str]) -> dict[str, int]:
    groups = aws.ec2.call("DescribeSecurityGroups", GroupIds=group_ids)["SecurityGroups"]
    return {g["GroupId"]: len(g.get("IpPermissions", [])) for g in groups}


CREATING = ("Create", "Allocate", "Attach", "Associate", "Run")


def test_engine_adopts_everything_after_the_status_is_lost(aws: AWSClients, owner: Owner) -> None:
    """A status lost after the creates (a restored store, say): under the LOCALSTACK profile the engine
    finds every resource again, by its tags or its natural key, and creates nothing.

    (The security groups go through the controller's two passes — first without rules, so that rules
    can name each other — and an adopted group's rules are revoked by the first pass and authorized
    again by the second: they end as they were.)"""
    engine = Engine(LOCALSTACK)
    ids = ensure_network(engine, aws, owner.scope())
    groups = [ids["sg-controlplane"], ids["sg-node"]]
    rules_before = _ingress(aws, groups)

    obj = owner.persisted()
    obj.status.resources.clear()
    owner.store.update_status(obj)
    assert not owner.persisted().status.resources

    with call_scope() as calls:
        adopted = ensure_network(engine, aws, owner.scope())

    assert adopted == ids
    mutating = calls.mutating_operations()
    assert [op for op in mutating if op.split(":", 1)[1].startswith(CREATING)] == [], mutating
    assert what_exists(aws, ids["vpc"]) == ONE_OF_EACH
    assert _ingress(aws, groups) == rules_before
    assert {role: r.id for role, r in owner.persisted().status.resources.items()} == ids
