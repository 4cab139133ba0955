"""Ids a spec names that do not exist are fatal errors naming the field, not drift retried until the
timeout: the object gets a False condition with reason InvalidReference and failureReason set, and
``capa apply`` exits 1 saying which field, without waiting out ``--timeout``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.cli.cli_support import Cli
from tests.harness.manifests import cluster_documents
from tests.harness.moto_server import MotoServer, start_moto_server

REGION = "us-east-1"
MISSING_VPC = "vpc-0abc1234567890def"
MISSING_SUBNET = "subnet-0abc1234567890def"
MISSING_GROUP = "sg-0abc1234567890def"

_MACHINE = """\
---
apiVersion: v1
kind: Secret
metadata: {{name: {machine}-bootstrap, namespace: default}}
stringData: {{value: "#cloud-config"}}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata:
  name: {machine}
  namespace: default
  labels: {{cluster.x-k8s.io/cluster-name: {name}}}
spec:
  clusterName: {name}
  bootstrap: {{dataSecretName: {machine}-bootstrap}}
  infrastructureRef:
    {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: AWSMachine, name: {machine}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: AWSMachine
metadata:
  name: {machine}
  namespace: default
  labels: {{cluster.x-k8s.io/cluster-name: {name}}}
spec:
  instanceType: t3.medium
  ami: {{id: ami-785db401}}
{extra}
"""

_MANAGED_NETWORK = """\
    vpc: {cidrBlock: 10.9.0.0/16}
    subnets:
      - {availabilityZone: us-east-1a, cidrBlock: 10.9.0.0/20, isPublic: true}
      - {availabilityZone: us-east-1a, cidrBlock: 10.9.64.0/18}"""


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto_server(load_default_amis=True)
    yield server
    server.stop()


def _ec2(server: MotoServer) -> Any:
    return boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=server.url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _object(cli: Cli, state: Path, kind: str, name: str) -> dict[str, Any]:
    result = cli("get", kind, name, "-o", "json", state_path=state)
    assert result.exit_code == 0, str(result)
    return dict(json.loads(result.stdout))


def _assert_refused(
    cli: Cli, moto: MotoServer, state: Path, manifest: Path, target: tuple[str, str, str], message: str
) -> None:
    kind, name, condition = target
    result = cli(
        "apply", "-f", str(manifest), "--aws-endpoint", moto.url, "--timeout", "3m", state_path=state
    )
    assert result.exit_code == 1, f"apply should fail at once:\n{result}"
    assert "not ready after" not in result.stderr, f"apply waited out its timeout:\n{result}"
    assert message in result.stderr, f"the error should say {message!r}:\n{result}"
    status = _object(cli, state, kind, name)["status"]
    assert status.get("failureReason") == "InvalidReference", status
    assert message in status.get("failureMessage", ""), status
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    assert conditions[condition]["status"] == "False", conditions
    assert conditions[condition]["reason"] == "InvalidReference", conditions
    assert message in conditions[condition]["message"], conditions


def test_a_vpc_id_that_does_not_exist_is_a_named_fatal_error(
    cli: Cli, state: Path, moto: MotoServer, tmp_path: Path
) -> None:
    moto.reset()
    network = f"    vpc: {{id: {MISSING_VPC}}}\n    subnets:\n      - {{id: {MISSING_SUBNET}}}"
    manifest = tmp_path / "byo.yaml"
    manifest.write_text(cluster_documents("byo", network=network))
    _assert_refused(
        cli,
        moto,
        state,
        manifest,
        ("awscluster", "byo", "VpcReady"),
        f"spec.network.vpc.id: {MISSING_VPC} does not exist in {REGION}",
    )


def test_a_subnet_id_that_does_not_exist_is_a_named_fatal_error(
    cli: Cli, state: Path, moto: MotoServer, tmp_path: Path
) -> None:
    moto.reset()
    vpc = _ec2(moto).create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    network = f"    vpc: {{id: {vpc}}}\n    subnets:\n      - {{id: {MISSING_SUBNET}}}"
    manifest = tmp_path / "byo.yaml"
    manifest.write_text(cluster_documents("byo", network=network))
    _assert_refused(
        cli,
        moto,
        state,
        manifest,
        ("awscluster", "byo", "SubnetsReady"),
        f"spec.network.subnets[0].id: {MISSING_SUBNET} does not exist in {REGION}",
    )


@pytest.fixture(scope="module")
def cluster_state(moto: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store the machine cases share, with a managed one-zone cluster applied by the first of them."""
    moto.reset()
    return tmp_path_factory.mktemp("references") / "state.db"


@pytest.mark.parametrize(
    ("case", "extra", "message"),
    [
        ("subnet", f"  subnet: {{id: {MISSING_SUBNET}}}", f"spec.subnet.id: {MISSING_SUBNET} does not exist"),
        (
            "group",
            f"  additionalSecurityGroups: [{{id: {MISSING_GROUP}}}]",
            f"spec.additionalSecurityGroups[0].id: {MISSING_GROUP} does not exist",
        ),
        ("ami", "", "spec.ami.id: ami-0000000000000dead does not exist"),
        (
            "profile",
            "  iamInstanceProfile: no-such-profile",
            "spec.iamInstanceProfile: instance profile no-such-profile does not exist",
        ),
    ],
)
def test_a_machine_reference_that_does_not_exist_is_a_named_fatal_error(
    cli: Cli, moto: MotoServer, cluster_state: Path, tmp_path: Path, case: str, extra: str, message: str
) -> None:
    if not cluster_state.exists():  # the first case makes the cluster the others add machines to
        cluster = tmp_path / "cluster.yaml"
        cluster.write_text(cluster_documents("refs", network=_MANAGED_NETWORK))
        ready = cli(
            "apply",
            "-f",
            str(cluster),
            "--aws-endpoint",
            moto.url,
            "--timeout",
            "3m",
            state_path=cluster_state,
        )
        assert ready.exit_code == 0, str(ready)
    machine = f"refs-{case}"
    text = _MACHINE.format(name="refs", machine=machine, extra=extra)
    if case == "ami":
        text = text.replace("ami-785db401", "ami-0000000000000dead")
    manifest = tmp_path / f"{case}.yaml"
    manifest.write_text(text)
    _assert_refused(
        cli, moto, cluster_state, manifest, ("awsmachine", machine, "InstanceReady"), f"{message} in {REGION}"
    )
