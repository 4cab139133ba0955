"""An AWSCluster whose VPC lookup finds a VPC with another CIDR refuses to adopt it, says why, never
becomes Ready, and changes nothing on that VPC."""

from __future__ import annotations

from collections.abc import Callable

from capa_py.api.aws import AWSCluster
from capa_py.api.cluster import Cluster
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.engine.resource import tag_list
from capa_py.engine.tags import managed_tags
from tests.controllers.conftest import Harness


def test_an_awscluster_adopting_a_vpc_with_another_cidr_gets_a_false_condition_naming_both(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    tags = managed_tags("demo", "vpc", store_uid=harness.store.uid)
    vpc = harness.aws.ec2.call(
        "CreateVpc",
        CidrBlock="10.1.0.0/16",
        TagSpecifications=[{"ResourceType": "vpc", "Tags": tag_list(tags)}],
    )["Vpc"]
    objects = harness.apply(example())

    result = harness.converge([o for o in objects if not isinstance(o, Secret)], timeout=30)

    assert not result.converged
    awscluster = harness.store.get(AWSCluster, "demo", "default")
    assert awscluster.spec.network.vpc.cidr_block == "10.0.0.0/16"
    conditions = {c.type: c for c in awscluster.status.conditions}
    vpc_ready = conditions["VpcReady"]
    assert (vpc_ready.status, vpc_ready.reason) == ("False", "AdoptionRefused")
    assert vpc["VpcId"] in vpc_ready.message
    assert "10.1.0.0/16" in vpc_ready.message
    assert "10.0.0.0/16" in vpc_ready.message
    assert conditions.get("Ready") is None or conditions["Ready"].status != "True"
    assert not awscluster.status.ready
    assert "vpc" not in awscluster.status.resources
    assert harness.store.get(Cluster, "demo", "default").status.phase != "Provisioned"
    (after,) = harness.aws.ec2.call("DescribeVpcs", VpcIds=[vpc["VpcId"]])["Vpcs"]
    assert {t["Key"]: t["Value"] for t in after.get("Tags", [])} == tags, "the refused VPC is not retagged"
    subnets = harness.aws.ec2.call("DescribeSubnets", Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])
    assert subnets["Subnets"] == [], "nothing is built in the refused VPC"
