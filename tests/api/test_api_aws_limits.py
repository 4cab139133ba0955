"""Validation refuses what AWS would refuse: block sizes, zones of the region, instance types, names."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from capa_py.api.aws import (
    AMIReference,
    AWSCluster,
    AWSClusterSpec,
    AWSLoadBalancerSpec,
    AWSMachine,
    AWSMachineSpec,
    NetworkSpec,
    SubnetSpec,
    VPCSpec,
    known_instance_types,
    known_regions,
)
from capa_py.api.cluster import Cluster, cluster_name_issues
from capa_py.api.meta import ObjectMeta, utcnow
from capa_py.api.zones import ZONE_LETTERS, zone_issue, zones_of


def _cluster(vpc: str = "10.0.0.0/16", subnet: str = "10.0.0.0/24", zone: str = "us-east-1a") -> AWSCluster:
    return AWSCluster(
        metadata=ObjectMeta(name="demo"),
        spec=AWSClusterSpec(
            region="us-east-1",
            network=NetworkSpec(
                vpc=VPCSpec(cidr_block=vpc),
                subnets=[SubnetSpec(cidr_block=subnet, availability_zone=zone)],
            ),
        ),
    )


def _issues(obj: AWSCluster | AWSMachine) -> dict[str, str]:
    return {issue.path: issue.message for issue in obj.semantic_issues()}


@pytest.mark.parametrize("prefix", [16, 20, 28])
def test_vpc_and_subnet_blocks_from_16_to_28_are_accepted(prefix: int) -> None:
    assert _issues(_cluster(vpc=f"10.0.0.0/{prefix}", subnet=f"10.0.0.0/{prefix}")) == {}


@pytest.mark.parametrize("prefix", [8, 15, 29, 32])
def test_vpc_and_subnet_blocks_outside_16_to_28_are_refused(prefix: int) -> None:
    issues = _issues(_cluster(vpc=f"10.0.0.0/{prefix}", subnet=f"10.0.0.0/{prefix}"))
    assert issues["spec.network.vpc.cidrBlock"] == (
        f"10.0.0.0/{prefix}: a VPC block must be between /16 and /28 (AWS refuses /{prefix})"
    )
    assert issues["spec.network.subnets[0].cidrBlock"].startswith(
        f"10.0.0.0/{prefix}: a subnet block must be between /16 and /28"
    )


def test_objects_stored_before_a_rule_stay_readable_and_deletable() -> None:
    # Reads validate fields only: what AWS refuses is a semantic issue, so an older store still loads.
    stored = _cluster(vpc="10.0.0.0/8", subnet="10.0.0.0/16", zone="us-east-1h").to_dict()
    assert AWSCluster.model_validate(stored).spec.network.vpc.cidr_block == "10.0.0.0/8"
    machine = AWSMachine.model_validate({"metadata": {"name": "m"}, "spec": {"instanceType": "t3.gigantic"}})
    assert "spec.instanceType" in _issues(machine)
    machine.metadata.deletion_timestamp = utcnow()
    assert _issues(machine) == {}, "a machine being deleted must be writable (its finalizer removed)"


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
    machine = AWSMachine(
        metadata=ObjectMeta(name="m"),
        spec=AWSMachineSpec(instance_type="m5.large", ami=AMIReference(id="ami-785db401")),
    )
    assert _issues(machine) == {}


@pytest.mark.parametrize("instance_type", ["t3.gigantic", "x9.large", "T3.medium", "t3", "m5.large "])
def test_instance_types_ec2_does_not_offer_are_refused(instance_type: str) -> None:
    machine = AWSMachine(
        metadata=ObjectMeta(name="m"),
        spec=AWSMachineSpec(instance_type=instance_type, ami=AMIReference(id="ami-785db401")),
    )
    assert _issues(machine)["spec.instanceType"].startswith(f"not an EC2 instance type: {instance_type!r}")


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


def test_a_machine_without_an_ami_is_accepted_alone_its_image_is_looked_up() -> None:
    """Without ``ami.id`` an AMI is looked up by its Machine's version: the AWSMachine alone is valid
    (a Machine without a version beside it is refused, tests/api/test_api_image_lookup.py)."""
    machine = AWSMachine(metadata=ObjectMeta(name="m"), spec=AWSMachineSpec(instance_type="m5.large"))
    assert _issues(machine) == {}


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        ({"team": "a\x07b"}, "tag value for 'team': character '\\x07' (U+0007) is not allowed"),
        ({"bad key!": "x"}, "tag key 'bad key!': character '!' (U+0021) is not allowed"),
        ({f"k{i}": "v" for i in range(45)}, "45 tags: at most 44 (AWS allows 50 per resource"),
    ],
)
def test_tags_aws_would_refuse_are_refused_when_the_manifest_loads(
    tags: dict[str, str], expected: str
) -> None:
    """Before, they passed validation and failed at AWS after the first resources were made (ELBv2's and
    IAM's tag pattern; 50 tags per resource, capa-py's own included)."""
    with pytest.raises(ValidationError, match=re.escape(expected)):
        AWSClusterSpec(region="us-east-1", additional_tags=tags)
    with pytest.raises(ValidationError, match=re.escape(expected)):
        AWSMachineSpec(instance_type="t3.medium", additional_tags=tags)


def test_tags_of_letters_numbers_spaces_and_aws_punctuation_in_any_script_load() -> None:
    tags = {"Team Name": "platform", "cost:center/id": "a+b=c@d-e_f.g", "équipe": "données 2"}
    assert AWSClusterSpec(region="us-east-1", additional_tags=tags).additional_tags == tags
