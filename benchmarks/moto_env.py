"""The benchmark's moto server: start it on loopback, reset it, measure it, and read back what exists.

The server process comes from the test harness (``tests/harness/moto_server.py``: a free port on
127.0.0.1, no ``AWS_*`` variables passed on). It is started with moto's bundled AMIs loaded, because the
example manifest launches ``ami-785db401``, one of them. Everything here talks to the server with its own
boto3 clients and emulator credentials; none of these calls is counted in any figure.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.harness.moto_delays import Delays  # noqa: E402
from tests.harness.moto_server import MotoServer, start_moto_server  # noqa: E402

REGION = "us-east-1"
EMULATOR_KEY = "testing"
LIVE_INSTANCE_STATES = ["pending", "running", "stopping", "stopped"]
MOTO_NAT_INTERFACES = "network interfaces moto keeps: of deleted NAT gateways"
MOTO_INSTANCE_INTERFACES = "network interfaces moto keeps: of terminated instances"
MOTO_LEFTOVERS = (MOTO_NAT_INTERFACES, MOTO_INSTANCE_INTERFACES)
"""What moto leaves behind where AWS would not: reported apart from what a delete left behind."""
NETWORK_INTERFACE_KINDS = (
    "network interfaces of NAT gateways",
    "network interfaces of instances",
    *MOTO_LEFTOVERS,
    "network interfaces, any other",
)


class MotoEnv:
    """One moto server subprocess for the whole benchmark."""

    def __init__(self, server: MotoServer) -> None:
        self.server = server
        self.url = server.url
        session = boto3.session.Session(
            region_name=REGION, aws_access_key_id=EMULATOR_KEY, aws_secret_access_key=EMULATOR_KEY
        )
        config = Config(region_name=REGION, retries={"total_max_attempts": 1, "mode": "standard"})
        self.ec2: Any = session.client("ec2", endpoint_url=self.url, config=config)
        self.elbv2: Any = session.client("elbv2", endpoint_url=self.url, config=config)

    @classmethod
    def start(cls, delays: Delays | None = None) -> MotoEnv:
        """The server, with moto's bundled AMIs; with ``delays``, NAT gateways, load balancers and instances
        take AWS-like time to become ready (``tests/harness/moto_delays.py``)."""
        return cls(start_moto_server(load_default_amis=True, delays=delays))

    def stop(self) -> None:
        self.server.stop()

    def reset(self) -> None:
        """Forget everything (POST /moto-api/reset), then warm up: moto rebuilds a region's backends — and
        its ~1300 bundled AMIs — on the first call after a reset, and neither side of a comparison should
        pay for that."""
        self.server.reset()
        self.ec2.describe_availability_zones()
        self.elbv2.describe_load_balancers()

    def throughput(self, calls: int) -> dict[str, float]:
        """``calls`` sequential DescribeVpcs from one client: moto's cost of a cheap call, HTTP included."""
        self.ec2.describe_vpcs()
        started = time.perf_counter()
        for _ in range(calls):
            self.ec2.describe_vpcs()
        elapsed = time.perf_counter() - started
        return {
            "calls": calls,
            "seconds": round(elapsed, 4),
            "callsPerSecond": round(calls / elapsed, 1),
            "msPerCall": round(1000 * elapsed / calls, 2),
        }

    def inventory(self) -> dict[str, int]:
        """How many of each thing exist: in the non-default VPCs, plus the account's addresses, load
        balancers, target groups and live instances (a reset server has none of those of its own)."""
        ec2, elbv2 = self.ec2, self.elbv2
        vpcs = [v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"] if not v.get("IsDefault")]
        in_vpcs = [{"Name": "vpc-id", "Values": vpcs}]
        counts: dict[str, int] = {"VPCs": len(vpcs)}
        counts["VPCs with DNS hostnames on"] = sum(
            bool(
                ec2.describe_vpc_attribute(VpcId=v, Attribute="enableDnsHostnames")["EnableDnsHostnames"][
                    "Value"
                ]
            )
            for v in vpcs
        )

        def in_vpc(method: Any, key: str, filters: list[dict[str, Any]] | None = None) -> list[Any]:
            return list(method(Filters=filters or in_vpcs)[key]) if vpcs else []

        subnets = in_vpc(ec2.describe_subnets, "Subnets")
        counts["subnets"] = len(subnets)
        counts["subnets mapping public IPs"] = sum(bool(s.get("MapPublicIpOnLaunch")) for s in subnets)
        attached = [{"Name": "attachment.vpc-id", "Values": vpcs}]
        counts["internet gateways attached"] = len(
            in_vpc(ec2.describe_internet_gateways, "InternetGateways", attached)
        )
        counts["elastic IPs"] = len(ec2.describe_addresses()["Addresses"])
        nats = in_vpc(ec2.describe_nat_gateways, "NatGateways")
        counts["NAT gateways (pending/available)"] = sum(
            n.get("State") in ("pending", "available") for n in nats
        )
        tables = in_vpc(ec2.describe_route_tables, "RouteTables")
        counts["route tables (not main)"] = sum(
            not any(a.get("Main") for a in t.get("Associations", [])) for t in tables
        )
        counts["routes (not local)"] = sum(
            r.get("GatewayId") != "local" for t in tables for r in t.get("Routes", [])
        )
        counts["subnet associations"] = sum(
            bool(a.get("SubnetId")) and not a.get("Main") for t in tables for a in t.get("Associations", [])
        )
        groups = [
            g for g in in_vpc(ec2.describe_security_groups, "SecurityGroups") if g["GroupName"] != "default"
        ]
        counts["security groups (not default)"] = len(groups)
        counts["ingress rules"] = sum(
            len(p.get(k, []))
            for g in groups
            for p in g.get("IpPermissions", [])
            for k in ("IpRanges", "Ipv6Ranges", "UserIdGroupPairs", "PrefixListIds")
        )
        lbs = elbv2.describe_load_balancers()["LoadBalancers"]
        tgs = elbv2.describe_target_groups()["TargetGroups"]
        counts["load balancers"] = len(lbs)
        counts["target groups"] = len(tgs)
        counts["listeners"] = sum(
            len(elbv2.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]) for lb in lbs
        )
        counts["registered targets"] = sum(
            len(elbv2.describe_target_health(TargetGroupArn=tg["TargetGroupArn"])["TargetHealthDescriptions"])
            for tg in tgs
        )
        live = [{"Name": "instance-state-name", "Values": LIVE_INSTANCE_STATES}]
        counts["instances (live)"] = sum(
            len(r["Instances"]) for r in ec2.describe_instances(Filters=live)["Reservations"]
        )
        counts.update(self.network_interfaces())
        return counts

    def network_interfaces(self) -> dict[str, int]:
        """Every network interface of the account, by what it belongs to.

        moto never deletes the interface it makes for a NAT gateway (not when the gateway is deleted), nor an
        instance's primary interface (not when the instance is terminated), and it still lists both after
        their VPC is deleted; AWS removes them with their owner. Those are counted apart, as moto's, so that
        an interface anything else left behind (``other``) stands out."""
        ec2 = self.ec2
        nat_interfaces: dict[str, bool] = {}  # interface id -> its gateway is deleted
        for nat in ec2.describe_nat_gateways()["NatGateways"]:
            for address in nat.get("NatGatewayAddresses", []):
                if address.get("NetworkInterfaceId"):
                    nat_interfaces[address["NetworkInterfaceId"]] = nat.get("State") in (
                        "deleting",
                        "deleted",
                    )
        instance_states = {
            i["InstanceId"]: i["State"]["Name"]
            for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        }
        counts = dict.fromkeys(NETWORK_INTERFACE_KINDS, 0)
        for interface in ec2.describe_network_interfaces()["NetworkInterfaces"]:
            owner = (interface.get("Attachment") or {}).get("InstanceId")
            if interface["NetworkInterfaceId"] in nat_interfaces:
                gone = nat_interfaces[interface["NetworkInterfaceId"]]
                kind = MOTO_NAT_INTERFACES if gone else "network interfaces of NAT gateways"
            elif owner in instance_states:
                gone = instance_states[owner] == "terminated"
                kind = MOTO_INSTANCE_INTERFACES if gone else "network interfaces of instances"
            else:
                kind = "network interfaces, any other"
            counts[kind] += 1
        return counts
