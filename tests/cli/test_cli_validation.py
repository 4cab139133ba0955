"""What AWS would refuse is refused by ``capa apply`` first: exit 2 naming the field, no AWS call, store
unchanged. A cluster name AWS names cannot hold verbatim (``my.cluster``) gets sanitised derived names."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.cli.cli_support import Cli
from tests.harness.manifests import cluster_documents
from tests.harness.moto_server import MotoServer

KINDS = ("clusters", "awsclusters", "machines", "awsmachines", "secrets")


def manifest(
    name: str = "demo",
    vpc_cidr: str = "10.0.0.0/16",
    subnet_cidr: str = "10.0.0.0/20",
    zone: str = "us-east-1a",
    instance_type: str = "t3.medium",
    machine: bool = True,
) -> str:
    network = f"""\
    vpc: {{cidrBlock: {vpc_cidr}}}
    subnets:
      - {{availabilityZone: {zone}, cidrBlock: {subnet_cidr}, isPublic: true}}"""
    text = cluster_documents(name, network)
    if machine:
        text += f"""\
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachine
metadata: {{name: worker-0, namespace: default}}
spec:
  instanceType: {instance_type}
  ami: {{id: ami-785db401}}
"""
    return text


class Tripwire:
    """A loopback port that listens but never answers: any AWS call made to it is a queued connection."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def connections(self) -> int:
        self.sock.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1


@pytest.fixture
def tripwire() -> Iterator[Tripwire]:
    wire = Tripwire()
    yield wire
    wire.sock.close()


def _snapshot(cli: Cli) -> dict[str, Any]:
    snapshot = {}
    for kind in KINDS:
        result = cli("get", kind, "-A", "-o", "json")
        assert result.exit_code == 0, str(result)
        snapshot[kind] = json.loads(result.stdout)
    return snapshot


INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "name-starting-sg": (
        {"name": "sg-demo"},
        "document 1 (Cluster default/sg-demo): metadata.name: a cluster name must not start with 'sg-'",
    ),
    "name-too-long": (
        {"name": "c" * 64},
        "metadata.name: a cluster name is at most 63 characters",
    ),
    "vpc-slash-8": (
        {"vpc_cidr": "10.0.0.0/8"},
        "(AWSCluster default/demo): spec.network.vpc.cidrBlock: 10.0.0.0/8: a VPC block must be between "
        "/16 and /28",
    ),
    "subnet-slash-29": (
        {"subnet_cidr": "10.0.0.0/29"},
        "spec.network.subnets[0].cidrBlock: 10.0.0.0/29: a subnet block must be between /16 and /28",
    ),
    "zone-letter-not-in-region": (
        {"zone": "us-east-1h"},
        "spec.network.subnets[0].availabilityZone: unknown availability zone 'us-east-1h' for region "
        "us-east-1",
    ),
    "zone-of-another-region": (
        {"zone": "eu-west-1a"},
        "spec.network.subnets[0].availabilityZone: unknown availability zone 'eu-west-1a'",
    ),
    "unknown-instance-type": (
        {"instance_type": "t3.gigantic"},
        "(AWSMachine default/worker-0): spec.instanceType: not an EC2 instance type: 't3.gigantic'",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_input_aws_would_refuse_exits_2_with_no_aws_call_and_no_store_change(
    case: str, cli: Cli, tmp_path: Path, tripwire: Tripwire
) -> None:
    stored = cli("apply", "-f", str(_write(tmp_path / "valid.yaml", manifest())), "--no-wait")
    assert stored.exit_code == 0, str(stored)
    before = _snapshot(cli)
    overrides, message = INVALID[case]
    bad = _write(tmp_path / f"{case}.yaml", manifest(**overrides))

    result = cli("apply", "-f", str(bad), "--aws-endpoint", tripwire.url, "--timeout", "1m")

    assert result.exit_code == 2, f"{case} should exit 2:\n{result}"
    assert message in result.stderr, f"the error should say {message!r}:\n{result}"
    assert f"error: {bad}: " in result.stderr, str(result)
    assert tripwire.connections() == 0, f"{case}: capa reached for AWS before refusing the manifest"
    assert _snapshot(cli) == before, f"{case}: the refused manifest changed the store"


def test_refused_input_on_a_fresh_state_creates_no_store(
    cli: Cli, state: Path, tmp_path: Path, tripwire: Tripwire
) -> None:
    bad = _write(tmp_path / "bad.yaml", manifest(vpc_cidr="10.0.0.0/8"))
    result = cli("apply", "-f", str(bad), "--aws-endpoint", tripwire.url)
    assert result.exit_code == 2, str(result)
    assert tripwire.connections() == 0
    assert not state.exists(), "a refused apply created the store"


_ELB_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?$")


def test_a_dotted_cluster_name_gets_valid_load_balancer_and_target_group_names(
    cli: Cli, tmp_path: Path, cli_moto: MotoServer
) -> None:
    cli_moto.reset()
    text = manifest(name="my.cluster", machine=False)
    result = cli("apply", "-f", str(_write(tmp_path / "dotted.yaml", text)), "--aws-endpoint", cli_moto.url)
    assert result.exit_code == 0, f"a cluster named my.cluster should become ready:\n{result}"

    elbv2 = boto3.client(
        "elbv2",
        region_name="us-east-1",
        endpoint_url=cli_moto.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    lbs = [lb["LoadBalancerName"] for lb in elbv2.describe_load_balancers()["LoadBalancers"]]
    tgs = [tg["TargetGroupName"] for tg in elbv2.describe_target_groups()["TargetGroups"]]
    assert len(lbs) == 1, lbs
    assert len(tgs) == 1, tgs
    for name in (*lbs, *tgs):
        assert _ELB_NAME.match(name), (
            f"{name!r} is not a name AWS accepts for a load balancer or target group"
        )
    assert lbs[0].startswith("my-cluster-apiserver-"), lbs
    status = json.loads(cli("get", "awscluster", "my.cluster", "-o", "json").stdout)["status"]
    assert status["network"]["apiServerLoadBalancer"]["name"] == lbs[0]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
