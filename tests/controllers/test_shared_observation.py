"""Shared observations in the controllers: a pass describes each kind once, one describe serves every
cluster, creating needs no lookups inside what was just created, and drift is repaired once the freshness
bound has passed. Every assertion counts AWS calls (capa-py's own accounting); none times anything.

The harness is the one ``capa apply`` and ``capa controller`` use (``AWSSettings(observe=True)``), against
moto over HTTP. The observations' clock runs, and a test moves it past the freshness bound instead of waiting.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from capa_py.api.aws import AWSCluster
from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import CallCounter, call_scope
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSClients, AWSSettings, ClientPool
from capa_py.engine.engine import Engine
from capa_py.engine.profiles import MOTO
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore
from controllers import aws_controllers
from controllers.run import converge
from tests.controllers.conftest import EXAMPLE, FAST_RETRY
from tests.controllers.pending import reconcile_pass
from tests.harness.moto_server import MotoServer

# Kinds the AWSCluster pass describes, by the operation describing them.
CLUSTER_DESCRIBES = (
    "ec2:DescribeVpcs",
    "ec2:DescribeSubnets",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeAddresses",
    "ec2:DescribeNatGateways",
    "ec2:DescribeRouteTables",
    "ec2:DescribeSecurityGroups",
    "elbv2:DescribeLoadBalancers",
    "elbv2:DescribeTargetGroups",
    "elbv2:DescribeListeners",
)


class Clock:
    """The monotonic clock, plus whatever the test moved it forward by."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class Observing:
    """A store, a client pool sharing observations (as the CLI's), the AWS controllers, a test clock."""

    def __init__(self, store: SQLiteStore, server: MotoServer) -> None:
        self.store = store
        self.server = server
        self.pool = ClientPool(
            AWSSettings(region="us-east-1", endpoint_url=server.url, retry=FAST_RETRY, observe=True),
            limiter=RateLimiter(enabled=False),
        )
        self.engine = Engine(MOTO)
        self.clock = Clock()
        self.aws.observations.clock = self.clock

    @property
    def aws(self) -> AWSClients:
        return self.pool.for_region("us-east-1")

    def controllers(self) -> list:  # type: ignore[type-arg]
        return aws_controllers(self.store, self.pool, self.engine)

    def converge(self, objects: list[KubeObject]) -> None:
        targets = [a.object for a in apply_objects(self.store, objects) if a.object.KIND != "Secret"]
        result = converge(self.store, self.controllers(), targets, timeout=90.0)
        assert result.converged, result.states

    def awscluster_pass(self) -> CallCounter:
        """One reconcile of every AWSCluster, counted."""
        controllers = [c for c in self.controllers() if c.kind is AWSCluster]
        with call_scope() as calls:
            reconcile_pass(controllers, self.store)
        return calls

    def later(self, seconds: float) -> None:
        self.clock.offset += seconds


def cluster(tmp_path: Path, index: int) -> list[KubeObject]:
    """The example cluster as ``demo<index>`` on 10.<index>.0.0/16 (``demo`` itself for 0)."""
    if index == 0:
        return load_manifests([EXAMPLE])
    text = EXAMPLE.read_text().replace("demo", f"demo{index}").replace("10.0.", f"10.{index}.")
    path = tmp_path / f"cluster-{index}.yaml"
    path.write_text(text)
    return load_manifests([path])


@pytest.fixture
def observing(
    moto_with_amis: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Observing]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    moto_with_amis.reset()
    store = SQLiteStore(tmp_path / "state.db")
    yield Observing(store, moto_with_amis)
    store.close()


def _describes(calls: CallCounter) -> dict[str, int]:
    return {op: n for op, n in calls.by_operation().items() if ":Describe" in op}


def test_a_fresh_pass_makes_no_call_and_a_stale_pass_describes_each_kind_once(
    observing: Observing, tmp_path: Path
) -> None:
    observing.converge(cluster(tmp_path, 0))
    # Within the freshness bound, the pass is answered from what the process already knows.
    assert observing.awscluster_pass().total() == 0
    observing.later(120)
    calls = observing.awscluster_pass()
    describes = _describes(calls)
    assert calls.total(mutating=True) == 0
    for operation in CLUSTER_DESCRIBES:
        assert describes.get(operation, 0) <= 1, (operation, describes)
    # Route tables feed their routes and associations: one DescribeRouteTables for all three kinds.
    assert describes["ec2:DescribeRouteTables"] == 1
    # The load balancer, target group and listener: one DescribeTags for the three together.
    assert describes.get("elbv2:DescribeTags", 0) == 1
    # Attributes with a call of their own are reused for longer than one resync.
    assert "ec2:DescribeVpcAttribute" not in describes
    assert "elbv2:DescribeLoadBalancerAttributes" not in describes


def test_one_describe_per_kind_serves_every_cluster(observing: Observing, tmp_path: Path) -> None:
    observing.converge(cluster(tmp_path, 0))
    observing.converge(cluster(tmp_path, 1))
    observing.converge(cluster(tmp_path, 2))
    observing.later(120)
    calls = observing.awscluster_pass()  # three AWSClusters
    describes = _describes(calls)
    assert calls.total(mutating=True) == 0
    for operation in (*CLUSTER_DESCRIBES, "elbv2:DescribeTags"):
        assert describes.get(operation, 0) <= 1, (operation, describes)
    assert calls.total() <= 12, calls.by_operation()


def test_machines_of_a_cluster_share_one_describe_instances(observing: Observing, tmp_path: Path) -> None:
    observing.converge(cluster(tmp_path, 0))
    observing.later(120)
    machines = [c for c in observing.controllers() if c.kind.KIND == "AWSMachine"]
    with call_scope() as calls:
        reconcile_pass(machines, observing.store)
    assert calls.by_operation().get("ec2:DescribeInstances") == 1
    assert calls.total(mutating=True) == 0


def test_creating_looks_up_nothing_inside_what_it_just_created(observing: Observing, tmp_path: Path) -> None:
    with call_scope() as calls:
        observing.converge(cluster(tmp_path, 0))
    by_operation = calls.by_operation()
    # Subnets, route tables, routes, associations, security groups, NAT gateways and instances live in
    # the VPC and subnets this process just made: no lookup by tags or key for any of them.
    for operation in (
        "ec2:DescribeSubnets",
        "ec2:DescribeRouteTables",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeNatGateways",
        "ec2:DescribeVpcAttribute",
        "elbv2:DescribeListeners",
        "elbv2:DescribeTargetHealth",
    ):
        assert operation not in by_operation, (operation, by_operation)
    # The AMI's root device is asked once for the three machines.
    assert by_operation["ec2:DescribeImages"] == 1
    # Each machine's bootstrap data: one CreateSecret before its instance, one DeleteSecret once it runs.
    assert by_operation["secretsmanager:CreateSecret"] == 3
    assert by_operation["secretsmanager:DeleteSecret"] == 3
    assert calls.total(mutating=True) == 51
    # The secrets cost no reads: CreateSecret refuses a taken name (the name is described only then) and
    # a recorded name is deleted as it is.
    assert "secretsmanager:ListSecrets" not in by_operation
    assert "secretsmanager:DescribeSecret" not in by_operation
    # The load balancer's name is looked up in the listing the lookup by tags just made; the target group
    # is created first in the VPC this process made (a taken name is refused); the provisioning load
    # balancer's poll reads no tags.
    assert "elbv2:DescribeTargetGroups" not in by_operation
    assert by_operation["elbv2:DescribeLoadBalancers"] == 2
    assert "elbv2:DescribeTags" not in by_operation
    # The internet gateway and the elastic IPs are made only after the cluster's VPC, and deleted before
    # it: after this process made the VPC, none of the cluster's can exist but what it made since.
    assert "ec2:DescribeInternetGateways" not in by_operation
    assert "ec2:DescribeAddresses" not in by_operation
    reads = calls.total() - calls.total(mutating=True)
    assert reads <= 6, by_operation
    assert calls.total() <= 57, by_operation


def test_a_deleted_route_and_a_removed_tag_are_repaired_after_the_freshness_bound(
    observing: Observing, tmp_path: Path
) -> None:
    observing.converge(cluster(tmp_path, 0))
    obj = observing.store.get(AWSCluster, "demo", "default")
    vpc_id = obj.status.network.vpc_id
    table_id = obj.status.resources["route-table-public"].id
    ec2 = boto3.client(
        "ec2",
        region_name="us-east-1",
        endpoint_url=observing.server.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    ec2.delete_route(RouteTableId=table_id, DestinationCidrBlock="0.0.0.0/0")
    ec2.delete_tags(Resources=[vpc_id], Tags=[{"Key": "Name"}])
    # Within the bound the drift is not seen yet...
    assert observing.awscluster_pass().total() == 0
    # ...after it, one pass puts the route and the tag back, and nothing else.
    observing.later(120)
    mutating = {
        op: n for op, n in observing.awscluster_pass().by_operation().items() if ":Describe" not in op
    }
    assert mutating == {"ec2:CreateRoute": 1, "ec2:CreateTags": 1}
    tables = ec2.describe_route_tables(RouteTableIds=[table_id])["RouteTables"]
    assert any(r.get("DestinationCidrBlock") == "0.0.0.0/0" for r in tables[0]["Routes"])
    tags = {t["Key"] for t in ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0].get("Tags", [])}
    assert "Name" in tags
