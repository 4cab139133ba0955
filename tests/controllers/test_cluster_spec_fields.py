"""Every AWSCluster spec field takes effect on AWS, read back from moto: VPC and subnet tags, cross-zone
load balancing (on create and on change), the load balancer's additional security groups, and the zones
default subnets use (``availabilityZoneUsageLimit``, ``availabilityZoneSelection``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, SubnetSpec
from capa_py.api.cluster import Cluster
from capa_py.api.loader import ManifestError, load_manifests
from capa_py.api.meta import KubeObject
from capa_py.engine.tags import CAPA_PY_ROLE_TAG, ROLE_TAG, cluster_tag_key
from capa_py.operations import apply_objects
from controllers.services.zones import choose_zones
from tests.controllers.conftest import EXAMPLE, Harness

CROSS_ZONE = "load_balancing.cross_zone.enabled"


def _awscluster(objects: list[KubeObject]) -> AWSCluster:
    found = next(o for o in objects if isinstance(o, AWSCluster))
    assert isinstance(found, AWSCluster)
    return found


def _cluster_only(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if isinstance(o, Cluster | AWSCluster)]


def _tags(item: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in item.get("Tags", [])}


def _cross_zone(harness: Harness) -> str:
    lb = harness.store.get(AWSCluster, "demo", "default").status.network.api_server_load_balancer
    assert lb is not None
    assert lb.arn
    attributes = harness.aws.elbv2.call("DescribeLoadBalancerAttributes", LoadBalancerArn=lb.arn)
    return str(next(a["Value"] for a in attributes["Attributes"] if a["Key"] == CROSS_ZONE))


def _subnets(harness: Harness) -> list[dict[str, Any]]:
    vpc_id = harness.store.get(AWSCluster, "demo", "default").status.network.vpc_id
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}]
    return list(harness.aws.ec2.call("DescribeSubnets", Filters=filters)["Subnets"])


def test_vpc_and_subnet_tags_and_cross_zone_take_effect_and_follow_changes(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    def declared(vpc_tag: str, cross_zone: bool) -> list[KubeObject]:
        objects = _cluster_only(example())
        spec = _awscluster(objects).spec
        spec.network.vpc.tags = {"cost-center": vpc_tag}
        spec.network.subnets[0].tags = {"tier": f"edge-{vpc_tag}"}
        spec.additional_tags = {"team": f"team-{vpc_tag}"}
        spec.control_plane_load_balancer.cross_zone_load_balancing = cross_zone
        spec.control_plane_load_balancer.scheme = "internal"
        spec.control_plane_load_balancer.name = "demo-internal-api"
        return objects

    stored = harness.apply(declared("42", True))
    assert harness.converge(stored).converged
    status = harness.store.get(AWSCluster, "demo", "default").status.network
    vpc = harness.aws.ec2.call("DescribeVpcs", VpcIds=[status.vpc_id])["Vpcs"][0]
    assert _tags(vpc).get("cost-center") == "42", _tags(vpc)
    assert _tags(vpc).get(cluster_tag_key("demo")) == "owned", "a spec tag displaced a managed tag"
    assert _tags(vpc).get(CAPA_PY_ROLE_TAG) == "vpc", _tags(vpc)
    assert _tags(vpc).get(ROLE_TAG) == "common", _tags(vpc)
    by_cidr = {s["CidrBlock"]: _tags(s) for s in _subnets(harness)}
    assert by_cidr["10.0.0.0/20"].get("tier") == "edge-42", by_cidr["10.0.0.0/20"]
    assert _tags(vpc).get("team") == "team-42", _tags(vpc)
    assert "tier" not in by_cidr["10.0.16.0/20"], "a subnet's tags went to another subnet"
    assert "cost-center" not in by_cidr["10.0.0.0/20"], "the VPC's tags went to a subnet"
    assert _cross_zone(harness) == "true"
    described = harness.aws.elbv2.call("DescribeLoadBalancers", Names=["demo-internal-api"])["LoadBalancers"]
    assert described[0]["Scheme"] == "internal", described[0]
    private = {s.id for s in status.subnets if not s.is_public}
    lb_subnets = {z["SubnetId"] for z in described[0]["AvailabilityZones"]}
    assert lb_subnets, described[0]
    assert lb_subnets <= private, f"an internal load balancer in {lb_subnets}, not {private}"

    outcomes = {a.object.ref(): a.outcome for a in apply_objects(harness.store, declared("43", False))}
    assert outcomes["AWSCluster default/demo"] == "configured", outcomes
    assert harness.converge(stored).converged
    vpc = harness.aws.ec2.call("DescribeVpcs", VpcIds=[status.vpc_id])["Vpcs"][0]
    assert _tags(vpc).get("cost-center") == "43", _tags(vpc)
    assert _tags(vpc).get("team") == "team-43", "a changed additionalTags value did not reach the VPC"
    by_cidr = {s["CidrBlock"]: _tags(s) for s in _subnets(harness)}
    assert by_cidr["10.0.0.0/20"].get("tier") == "edge-43", by_cidr["10.0.0.0/20"]
    assert _cross_zone(harness) == "false"
    assert len(_subnets(harness)) == 6, "a tag change made new subnets"


def test_load_balancer_additional_security_groups_are_attached_at_create(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    ec2 = harness.aws.ec2
    vpc_id = ec2.call("CreateVpc", CidrBlock="10.60.0.0/16")["Vpc"]["VpcId"]
    subnet_ids = [
        ec2.call("CreateSubnet", VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
        for cidr, zone in (("10.60.0.0/20", "us-east-1a"), ("10.60.16.0/20", "us-east-1b"))
    ]
    group = ec2.call("CreateSecurityGroup", GroupName="api-clients", Description="x", VpcId=vpc_id)["GroupId"]
    objects = _cluster_only(example())
    spec = _awscluster(objects).spec
    spec.network.vpc.id, spec.network.vpc.cidr_block = vpc_id, None
    spec.network.subnets = [SubnetSpec(id=subnet_ids[0], is_public=True), SubnetSpec(id=subnet_ids[1])]
    spec.control_plane_load_balancer.additional_security_groups = [group]
    assert harness.converge(harness.apply(objects)).converged
    lb = harness.store.get(AWSCluster, "demo", "default").status.network.api_server_load_balancer
    assert lb is not None
    described = harness.aws.elbv2.call("DescribeLoadBalancers", LoadBalancerArns=[lb.arn])
    assert described["LoadBalancers"][0].get("SecurityGroups") == [group], described["LoadBalancers"][0]


def _zones(harness: Harness) -> list[str]:
    answer = harness.aws.ec2.call("DescribeAvailabilityZones")["AvailabilityZones"]
    return [z["ZoneName"] for z in answer]


@pytest.mark.parametrize("selection", ["Ordered", "Random"])
def test_default_subnets_use_the_selected_zones_and_keep_them(
    selection: str, harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _cluster_only(example())
    vpc = _awscluster(objects).spec.network
    _awscluster(objects).spec.network.subnets = []
    vpc.vpc.availability_zone_usage_limit = 2
    vpc.vpc.availability_zone_selection = selection  # type: ignore[assignment]
    stored = harness.apply(objects)
    assert harness.converge(stored).converged
    awscluster = harness.store.get(AWSCluster, "demo", "default")
    expected = choose_zones(_zones(harness), 2, selection, awscluster.uid)
    if selection == "Ordered":
        assert expected == sorted(_zones(harness))[:2]
    created = sorted({s["AvailabilityZone"] for s in _subnets(harness)})
    assert created == expected, f"{selection}: subnets in {created}, expected {expected}"
    assert len(_subnets(harness)) == 4, "two zones, a public and a private subnet in each"

    assert harness.converge(stored).converged
    assert sorted({s["AvailabilityZone"] for s in _subnets(harness)}) == expected
    assert len(_subnets(harness)) == 4, "a second reconcile chose other zones"


ZONES = [f"us-east-1{letter}" for letter in "abcdef"]


def test_choose_zones_ordered_takes_the_first_zones_by_name() -> None:
    assert choose_zones(reversed(ZONES), 3, "Ordered", "any-uid") == ZONES[:3]


def test_choose_zones_random_is_stable_per_cluster_and_differs_between_clusters() -> None:
    choices = {tuple(choose_zones(ZONES, 2, "Random", f"uid-{n}")) for n in range(20)}
    assert len(choices) > 3, f"Random picked the same zones for 20 clusters: {choices}"
    for n in range(20):
        assert choose_zones(ZONES, 2, "Random", f"uid-{n}") == choose_zones(ZONES, 2, "Random", f"uid-{n}")


def test_choose_zones_keeps_zones_whose_subnets_are_recorded() -> None:
    recorded = ["us-east-1f"]
    assert choose_zones(ZONES[:5], 2, "Ordered", "uid", recorded) == ["us-east-1a", "us-east-1f"]


def test_tags_for_a_bring_your_own_vpc_or_subnet_are_refused(tmp_path: Any) -> None:
    text = EXAMPLE.read_text().replace(
        "      cidrBlock: 10.0.0.0/16\n", "      id: vpc-0123456789abcdef0\n      tags: {a: b}\n"
    )
    manifest = tmp_path / "byo.yaml"
    manifest.write_text(text)
    with pytest.raises(ManifestError, match=r"vpc.tags: a bring-your-own VPC"):
        load_manifests([manifest])
