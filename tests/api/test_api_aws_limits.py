"""Validation refuses what AWS would refuse: block sizes, zones of the region, instance types, names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from capa_py.api.aws import (
    AWSLoadBalancerSpec,
    AWSMachineSpec,
    SubnetSpec,
    VPCSpec,
    known_instance_types,
    known_regions,
)
from capa_py.api.cluster import Cluster, cluster_name_issues
from capa_py.api.meta import ObjectMeta
from capa_py.api.zones import ZONE_LETTERS, zone_issue, zones_of


@pytest.mark.parametrize("cidr", ["10.0.0.0/16", "10.0.0.0/20", "10.0.0.0/28"])
def test_vpc_and_subnet_blocks_from_16_to_28_are_accepted(cidr: str) -> None:
    assert VPCSpec(cidr_block=cidr).cidr_block == cidr
    assert SubnetSpec(cidr_block=cidr).cidr_block == cidr


@pytest.mark.parametrize("cidr", ["10.0.0.0/8", "10.0.0.0/15", "10.0.0.0/29", "10.0.0.0/32"])
def test_vpc_and_subnet_blocks_outside_16_to_28_are_refused(cidr: str) -> None:
    prefix = cidr.split("/")[1]
    with pytest.raises(
        ValidationError, match=f"a VPC block must be between /16 and /28 \\(AWS refuses /{prefix}\\)"
    ):
        VPCSpec(cidr_block=cidr)
    with pytest.raises(ValidationError, match="a subnet block must be between /16 and /28"):
        SubnetSpec(cidr_block=cidr)


def test_the_zone_table_covers_every_region_botocore_knows() -> None:
    missing = sorted(known_regions() - set(ZONE_LETTERS))
    assert not missing, f"regions with no zone table entry (every subnet there would be refused): {missing}"


@pytest.mark.parametrize(
    ("zone", "region", "ok"),
    [
        ("us-east-1a", "us-east-1", True),
        ("us-east-1f", "us-east-1", True),
        ("us-east-1g", "us-east-1", False),
        ("us-east-2d", "us-east-2", False),
        ("us-west-2d", "us-west-2", True),
        ("eu-west-1a", "us-east-1", False),
        ("us-east-1-bos-1a", "us-east-1", False),
        ("us-east-1", "us-east-1", False),
    ],
)
def test_zones_are_checked_against_the_region_table(zone: str, region: str, ok: bool) -> None:
    assert (zone_issue(zone, region) is None) is ok, zone_issue(zone, region)


def test_a_refused_zone_lists_the_zones_of_the_region() -> None:
    assert zone_issue("us-east-2h", "us-east-2") == (
        "unknown availability zone 'us-east-2h' for region us-east-2 "
        "(zones: us-east-2a, us-east-2b, us-east-2c)"
    )
    assert zones_of("mars-north-1") == ()


def test_instance_types_come_from_the_ec2_service_model() -> None:
    types = known_instance_types()
    assert {"t3.medium", "m5.large", "c7g.xlarge"} <= types
    assert AWSMachineSpec(instance_type="m5.large").instance_type == "m5.large"


@pytest.mark.parametrize("instance_type", ["t3.gigantic", "x9.large", "T3.medium", "t3", "m5.large "])
def test_instance_types_ec2_does_not_offer_are_refused(instance_type: str) -> None:
    with pytest.raises(ValidationError, match="not an EC2 instance type"):
        AWSMachineSpec(instance_type=instance_type)


def test_a_load_balancer_name_may_not_start_with_internal() -> None:
    with pytest.raises(ValidationError, match="must not start with 'internal-'"):
        AWSLoadBalancerSpec(name="internal-api")
    assert AWSLoadBalancerSpec(name="api-internal").name == "api-internal"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("sg-prod", "must not start with 'sg-'"),
        ("a" * 64, "at most 63 characters"),
    ],
)
def test_cluster_names_aws_names_cannot_hold_are_refused(name: str, message: str) -> None:
    issues = Cluster(metadata=ObjectMeta(name=name)).semantic_issues()
    assert [i.path for i in issues] == ["metadata.name"]
    assert message in issues[0].message


@pytest.mark.parametrize("name", ["demo", "my.cluster", "a" * 63, "prod-sg-1"])
def test_cluster_names_that_fit_are_accepted(name: str) -> None:
    assert cluster_name_issues(name) == []
