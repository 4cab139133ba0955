"""The AWS-like delay harness (tests/harness/moto_delays.py): over HTTP, a NAT gateway is pending, a load
balancer provisioning and an instance pending for their delay after creation, then ready."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.harness.moto_delays import Delays
from tests.harness.moto_server import MotoServer, start_moto_server
from tests.support.eventually import eventually

DELAY = 1.5
GIVE_UP = 60.0
"""A guard against a state that never changes (a failure, not a timing check)."""


@pytest.fixture(scope="module")
def delayed_server() -> Iterator[MotoServer]:
    server = start_moto_server(delays=Delays(nat_gateway=DELAY, load_balancer=DELAY, instance=DELAY))
    yield server
    server.stop()


@pytest.fixture
def clients(delayed_server: MotoServer) -> tuple[Any, Any]:
    delayed_server.reset()
    session = boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    config = Config(retries={"total_max_attempts": 1, "mode": "standard"})
    return (
        session.client("ec2", endpoint_url=delayed_server.url, config=config),
        session.client("elbv2", endpoint_url=delayed_server.url, config=config),
    )


def _network(ec2: Any) -> tuple[str, list[str]]:
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnets = []
    for i, zone in enumerate("ab"):
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i}.0/24", AvailabilityZone=f"us-east-1{zone}")
        subnets.append(subnet["Subnet"]["SubnetId"])
    return vpc, subnets


def _states_until(read: Callable[[], str], ready: str) -> list[str]:
    """Every state read, in order, until ``ready`` (distinct consecutive states only)."""
    seen: list[str] = []

    def reached() -> bool:
        state = read()
        if not seen or seen[-1] != state:
            seen.append(state)
        return state == ready

    eventually(reached, f"{ready}", timeout=GIVE_UP, interval=0.2, detail=lambda: f"states seen {seen}")
    return seen


def test_a_nat_gateway_is_pending_then_available(clients: tuple[Any, Any]) -> None:
    ec2, _ = clients
    _, subnets = _network(ec2)
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]

    created = ec2.create_nat_gateway(SubnetId=subnets[0], AllocationId=allocation)["NatGateway"]
    nat_id = created["NatGatewayId"]
    assert created["State"] == "pending"
    available = [{"Name": "state", "Values": ["available"]}]
    assert ec2.describe_nat_gateways(Filters=available)["NatGateways"] == []  # filters see the same state

    def state() -> str:
        return str(ec2.describe_nat_gateways(NatGatewayIds=[nat_id])["NatGateways"][0]["State"])

    assert _states_until(state, "available") == ["pending", "available"]
    now_available = ec2.describe_nat_gateways(Filters=available)["NatGateways"]
    assert [n["NatGatewayId"] for n in now_available] == [nat_id]


def test_a_load_balancer_is_provisioning_then_active(clients: tuple[Any, Any]) -> None:
    ec2, elbv2 = clients
    _, subnets = _network(ec2)

    created = elbv2.create_load_balancer(Name="delayed", Subnets=subnets, Type="network", Scheme="internal")
    arn = created["LoadBalancers"][0]["LoadBalancerArn"]
    assert created["LoadBalancers"][0]["State"]["Code"] == "provisioning"

    def state() -> str:
        described = elbv2.describe_load_balancers(LoadBalancerArns=[arn])["LoadBalancers"][0]
        return str(described["State"]["Code"])

    # moto alone answers "active" from the first describe on; the harness holds that back.
    assert _states_until(state, "active") == ["provisioning", "active"]


def test_an_instance_is_pending_then_running_and_cannot_be_registered_before(
    clients: tuple[Any, Any],
) -> None:
    ec2, elbv2 = clients
    vpc, subnets = _network(ec2)
    image = ec2.register_image(Name="delayed-node", RootDeviceName="/dev/sda1")["ImageId"]

    launched = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnets[0])["Instances"][0]
    instance_id = launched["InstanceId"]
    assert launched["State"] == {"Code": 0, "Name": "pending"}
    group = elbv2.create_target_group(Name="delayed", Protocol="TCP", Port=6443, VpcId=vpc)
    group_arn = group["TargetGroups"][0]["TargetGroupArn"]
    with pytest.raises(ClientError) as refused:  # as AWS: a target must be running to be registered
        elbv2.register_targets(TargetGroupArn=group_arn, Targets=[{"Id": instance_id}])
    assert refused.value.response["Error"]["Code"] == "InvalidTarget"

    def state() -> str:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        return str(reservations[0]["Instances"][0]["State"]["Name"])

    assert _states_until(state, "running") == ["pending", "running"]
    described = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert described["State"] == {"Code": 16, "Name": "running"}
    elbv2.register_targets(TargetGroupArn=group_arn, Targets=[{"Id": instance_id}])


def test_what_ends_during_the_delay_is_reported_at_once(clients: tuple[Any, Any]) -> None:
    ec2, _ = clients
    _, subnets = _network(ec2)
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=subnets[0], AllocationId=allocation)["NatGateway"]
    nat_id = nat["NatGatewayId"]
    image = ec2.register_image(Name="short-lived", RootDeviceName="/dev/sda1")["ImageId"]
    launched = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnets[1])
    instance_id = launched["Instances"][0]["InstanceId"]

    ec2.delete_nat_gateway(NatGatewayId=nat_id)
    ended = ec2.terminate_instances(InstanceIds=[instance_id])["TerminatingInstances"][0]

    assert ec2.describe_nat_gateways(NatGatewayIds=[nat_id])["NatGateways"][0]["State"] == "deleted"
    assert ended["PreviousState"]["Name"] == "pending"
    assert ended["CurrentState"]["Name"] != "pending"
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    assert reservations[0]["Instances"][0]["State"]["Name"] == "terminated"


def test_delays_scale_and_become_the_server_programs_options() -> None:
    delays = Delays(nat_gateway=90, load_balancer=150, instance=45, scale=0.1)
    assert delays.as_dict() == pytest.approx({"nat_gateway": 9.0, "load_balancer": 15.0, "instance": 4.5})
    assert delays.arguments() == [
        "--nat-delay", "90", "--lb-delay", "150", "--instance-delay", "45", "--scale", "0.1",
    ]  # fmt: skip
    assert Delays() == Delays(90, 150, 45, 1)  # AWS-like by default
    with pytest.raises(ValueError, match="scale must not be negative"):
        Delays(scale=-1)


def test_the_delays_combine_with_client_tokens_honoured() -> None:
    server = start_moto_server(honour_tokens=True, delays=Delays(nat_gateway=60))
    try:
        session = boto3.session.Session(
            region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        ec2 = session.client("ec2", endpoint_url=server.url)
        _, subnets = _network(ec2)
        allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
        first = ec2.create_nat_gateway(SubnetId=subnets[0], AllocationId=allocation, ClientToken="t-1")
        again = ec2.create_nat_gateway(SubnetId=subnets[0], AllocationId=allocation, ClientToken="t-1")
        assert again["NatGateway"]["NatGatewayId"] == first["NatGateway"]["NatGatewayId"]
        assert again["NatGateway"]["State"] == "pending"
        assert len(ec2.describe_nat_gateways()["NatGateways"]) == 1
    finally:
        server.stop()
