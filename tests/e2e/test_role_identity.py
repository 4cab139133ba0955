"""A cluster in a second account through a role identity, with the real CLI: ``capa apply`` of
``examples/aws-cluster-role-identity.yaml`` builds everything in account 222222222222 (moto's STS hands
out that account's credentials for the role's ARN, and its server keeps each account's resources apart),
``capa delete`` removes it all (the identity last, once nothing uses it), and ``capa audit --identity``
of that account finds nothing left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.e2e.e2e_support import ROOT, Capa, MotoInspector

pytestmark = pytest.mark.slow(minutes=1)

EXAMPLE = ROOT / "examples" / "aws-cluster-role-identity.yaml"
SECOND = "222222222222"
CLUSTER_TAG = "sigs.k8s.io/cluster-api-provider-aws/cluster/tenant-a"


def _second_account(endpoint: str, service: str) -> Any:
    base = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    issued = boto3.client(
        "sts", **base, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).assume_role(RoleArn=f"arn:aws:iam::{SECOND}:role/inspector", RoleSessionName="inspector")["Credentials"]
    return boto3.client(  # type: ignore[call-overload]
        service,
        **base,
        aws_access_key_id=issued["AccessKeyId"],
        aws_secret_access_key=issued["SecretAccessKey"],
        aws_session_token=issued["SessionToken"],
    )


def _live(endpoint: str) -> dict[str, list[str]]:
    """What is left of the cluster in the second account, kind by kind (gone states left out)."""
    ec2 = _second_account(endpoint, "ec2")
    elbv2 = _second_account(endpoint, "elbv2")
    tagged = [{"Name": "tag-key", "Values": [CLUSTER_TAG]}]
    return {
        "vpcs": [v["VpcId"] for v in ec2.describe_vpcs(Filters=tagged)["Vpcs"]],
        "subnets": [s["SubnetId"] for s in ec2.describe_subnets(Filters=tagged)["Subnets"]],
        "instances": [
            i["InstanceId"]
            for r in ec2.describe_instances(
                Filters=[*tagged, {"Name": "instance-state-name", "Values": ["pending", "running"]}]
            )["Reservations"]
            for i in r["Instances"]
        ],
        "nat-gateways": [
            n["NatGatewayId"]
            for n in ec2.describe_nat_gateways(
                Filter=[*tagged, {"Name": "state", "Values": ["pending", "available"]}]
            )["NatGateways"]
        ],
        "load-balancers": [lb["LoadBalancerName"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]],
    }


def test_the_role_identity_example_converges_in_the_second_account_and_deletes_clean(
    capa: Capa, endpoint: str, inspector: MotoInspector, tmp_path: Path
) -> None:
    applied = capa.ok("apply", "-f", str(EXAMPLE), "--timeout", "2m", "-o", "json").json()

    assert applied["converged"] is True
    built = _live(endpoint)
    assert len(built["vpcs"]) == 1
    assert len(built["subnets"]) == 2
    assert len(built["instances"]) == 1
    assert built["load-balancers"] == ["tenant-a-apiserver"]
    assert inspector.tagging_api_arns(CLUSTER_TAG) == [], "nothing of the cluster in the controller's account"
    [awscluster] = capa.get("awsclusters")
    assert awscluster["status"]["network"]["vpcId"] == built["vpcs"][0]
    conditions = {c["type"]: c["status"] for c in awscluster["status"]["conditions"]}
    assert conditions["PrincipalUsageAllowed"] == "True"
    assert conditions["PrincipalCredentialRetrieved"] == "True"

    deleted = capa.ok("delete", "-f", str(EXAMPLE), "--wait", "--timeout", "2m")

    lines = deleted.stdout.splitlines()
    assert lines[-1] == "awsclusterroleidentity/tenant-a deleted", "the identity goes last"
    assert _live(endpoint) == {k: [] for k in built}
    assert capa.get("awsclusters") == []

    # The identity again (alone) to look into its account: nothing of the cluster is left there.
    identity = next(
        d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "AWSClusterRoleIdentity"
    )
    alone = tmp_path / "identity.yaml"
    alone.write_text(yaml.safe_dump(identity))
    capa.ok("apply", "-f", str(alone))
    audit = capa.ok(
        "audit", "--identity", "AWSClusterRoleIdentity/tenant-a", "--aws-endpoint", endpoint, "-o", "json"
    ).json()
    assert audit["leaks"] == 0, audit
    assert audit["rows"] == [], audit
