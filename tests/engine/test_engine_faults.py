"""The fault injection the engine tests rely on behaves like the faults it stands for.

An injected error response must reach the code as the same classified error a real one would (and be
retried or not as AWSClient.call decides); a simulated crash must pass through botocore, tenacity and the
engine untouched; and hooks must come off after the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.aws.errors import PermissionDenied, Transient
from capa_py.aws.session import AWSClients, register_client_hook
from tests.engine.support import Faults, SimulatedCrash
from tests.harness.moto_server import MotoServer
from tests.resources.builders import clients_for


def test_injected_error_is_classified_like_a_real_one(aws: AWSClients, faults: Faults) -> None:
    vpc_id = aws.ec2.call("CreateVpc", CidrBlock="10.70.0.0/16")["Vpc"]["VpcId"]
    refused = faults.fail(aws, "CreateTags")

    with pytest.raises(PermissionDenied) as failure:
        aws.ec2.call("CreateTags", Resources=[vpc_id], Tags=[{"Key": "k", "Value": "v"}])

    assert failure.value.code == "UnauthorizedOperation"
    assert refused.fired == 1


def test_injected_5xx_on_a_create_without_token_is_not_retried(aws: AWSClients, faults: Faults) -> None:
    refused = faults.fail(aws, "CreateVpc", code="InternalError", status=500)

    with pytest.raises(Transient):
        aws.ec2.call("CreateVpc", CidrBlock="10.70.0.0/16")

    assert refused.seen == 1, "the create may have happened: AWSClient.call must not repeat it"


def test_injected_faults_come_off_with_clear(aws: AWSClients, faults: Faults) -> None:
    faults.fail(aws, "DescribeVpcs")
    faults.crash_after(aws, "CreateVpc")
    faults.clear()

    aws.ec2.call("CreateVpc", CidrBlock="10.70.0.0/16")
    assert aws.ec2.call("DescribeVpcs")["Vpcs"]


def test_simulated_crash_passes_through_the_client_layer(aws: AWSClients, faults: Faults) -> None:
    faults.crash_after(aws, "CreateVpc")

    with pytest.raises(SimulatedCrash):
        aws.ec2.call("CreateVpc", CidrBlock="10.70.0.0/16")

    vpcs = aws.ec2.call("DescribeVpcs", Filters=[{"Name": "cidr", "Values": ["10.70.0.0/16"]}])["Vpcs"]
    assert len(vpcs) == 1, "the crash came after AWS created the VPC"


def test_register_client_hook_reaches_clients_made_afterwards(
    moto_server: MotoServer, tmp_path: Path
) -> None:
    seen: list[str] = []
    unregister = register_client_hook(lambda client, service: seen.append(service))
    try:
        clients_for(moto_server, tmp_path)
    finally:
        unregister()
    assert "ec2" in seen, "the hook must run on every client made while registered"

    seen.clear()
    clients_for(moto_server, tmp_path)
    assert seen == [], "an unregistered hook must not run again"
