"""The fewest AWS API calls that create the example cluster: a plain boto3 script, no capa-py reconciler.

It reads a manifest (``examples/aws-cluster-machines.yaml`` by default: the quick start's cluster, its
machines one by one) and creates what capa-py creates for it — the VPC, subnets, internet gateway, elastic
IPs, NAT gateways, route tables, routes and associations, the three security groups with their ingress rules,
the network load balancer with its target group and listener, the instances, and the control plane's
registration with the target group — with the same tags, spending exactly one call per create, attach,
associate, route, rule batch and attribute change.

The only read is the AMI's root device name, which the control plane's root-volume mapping has to name and
the manifest does not give. Everything is tagged in the create call itself (``TagSpecifications`` /
``Tags``), so tags cost nothing extra. There are no lookups, waits, retries or checks: this is a floor to
compare a reconciler against, not a reconciler. It is not idempotent, cannot resume after a failure, and on
real AWS eventual consistency would sometimes cost a retry that is not counted here.

Every call is counted with a botocore ``after-call`` hook into :class:`capa_py.aws.accounting.CallCounter`
(the counter capa-py itself uses, so both sides classify calls as mutating the same way). Before creating
anything the script derives, from the manifest alone, how many calls of each operation the cluster needs;
after creating it checks that the calls it made are exactly that derivation.

    python -m benchmarks.minimal --endpoint http://127.0.0.1:PORT [--manifest FILE] [--json] [--derivation]

``--json`` prints the calls, the derivation and the time spent in API calls as one JSON document;
``--derivation`` prints the derivation and exits without calling anything.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import yaml
from botocore.config import Config

from capa_py.aws.accounting import CallCounter, is_mutating

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = REPO / "examples" / "aws-cluster-machines.yaml"
API_SERVER_PORT = 6443
OWNED_KEY = "sigs.k8s.io/cluster-api-provider-aws/cluster/{cluster}"
ROLE_KEY = "sigs.k8s.io/cluster-api-provider-aws/role"
CLOUD_PROVIDER_KEY = "kubernetes.io/cluster/{cluster}"
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
EMULATOR_KEY = "testing"
SECRET_CHUNK = 7000
"""Bytes of gzipped bootstrap data per Secrets Manager secret (Cluster API Provider AWS's figure)."""


# -- the manifest --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubnetPlan:
    role: str
    cidr_block: str
    zone: str
    public: bool


@dataclass(frozen=True)
class MachinePlan:
    name: str
    control_plane: bool
    instance_type: str
    ami: str
    root_volume_size: int | None
    root_volume_type: str
    extra_tags: dict[str, str]
    secrets_manager: bool = True
    """Whether the bootstrap data goes through Secrets Manager (no ``insecureSkipSecretsManager``)."""


@dataclass
class ClusterPlan:
    """What the manifest asks for, in the terms the calls need."""

    name: str
    region: str
    vpc_cidr: str
    subnets: list[SubnetPlan]
    scheme: str
    additional_tags: dict[str, str]
    machines: list[MachinePlan]
    user_data: bytes = field(repr=False)

    @property
    def secret_chunks(self) -> list[bytes]:
        """The bootstrap data gzipped, in the chunks one secret each holds."""
        packed = gzip.compress(self.user_data, mtime=0)
        return [packed[i : i + SECRET_CHUNK] for i in range(0, len(packed), SECRET_CHUNK)]

    @property
    def nat_zones(self) -> list[str]:
        """Zones with a public and a private subnet get a NAT gateway (in the public one)."""
        public = {s.zone for s in self.subnets if s.public}
        private = {s.zone for s in self.subnets if not s.public}
        return sorted(public & private)

    @property
    def private_zones(self) -> list[str]:
        return sorted({s.zone for s in self.subnets if not s.public})


def load_plan(path: Path) -> ClusterPlan:
    """Read the one Cluster, AWSCluster, bootstrap Secret and Machine/AWSMachine pairs of a manifest."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for document in documents:
        by_kind.setdefault(document["kind"], []).append(document)
    (cluster,) = by_kind["Cluster"]
    (aws_cluster,) = by_kind["AWSCluster"]
    spec = aws_cluster["spec"]
    network = spec.get("network", {})
    subnets: list[SubnetPlan] = []
    for subnet in network.get("subnets", []):
        public = bool(subnet.get("isPublic", False))
        base = f"subnet-{'public' if public else 'private'}-{subnet['availabilityZone']}"
        role, n = base, 2
        while role in {s.role for s in subnets}:
            role, n = f"{base}-{n}", n + 1
        subnets.append(SubnetPlan(role, subnet["cidrBlock"], subnet["availabilityZone"], public))
    if not subnets:
        raise SystemExit("minimal.py needs a manifest that declares its subnets")
    aws_machines = {m["metadata"]["name"]: m for m in by_kind.get("AWSMachine", [])}
    secrets = {s["metadata"]["name"]: s for s in by_kind.get("Secret", [])}
    machines: list[MachinePlan] = []
    user_data = b""
    for machine in by_kind.get("Machine", []):
        infra = aws_machines[machine["spec"]["infrastructureRef"]["name"]]
        infra_spec = infra["spec"]
        root = infra_spec.get("rootVolume") or {}
        machines.append(
            MachinePlan(
                name=infra["metadata"]["name"],
                control_plane=CONTROL_PLANE_LABEL in machine["metadata"].get("labels", {}),
                instance_type=infra_spec["instanceType"],
                ami=infra_spec["ami"]["id"],
                root_volume_size=root.get("size"),
                root_volume_type=root.get("type", "gp3"),
                extra_tags=dict(infra_spec.get("additionalTags", {})),
                secrets_manager=not (infra_spec.get("cloudInit") or {}).get("insecureSkipSecretsManager"),
            )
        )
        secret = secrets[machine["spec"]["bootstrap"]["dataSecretName"]]
        user_data = str(secret.get("stringData", {}).get("value", "")).encode()
    return ClusterPlan(
        name=cluster["metadata"]["name"],
        region=spec.get("region", "us-east-1"),
        vpc_cidr=network["vpc"]["cidrBlock"],
        subnets=subnets,
        scheme=spec.get("controlPlaneLoadBalancer", {}).get("scheme", "internet-facing"),
        additional_tags=dict(spec.get("additionalTags", {})),
        machines=machines,
        user_data=user_data,
    )


# -- security group rules (the same set capa-py's AWSCluster controller authorizes) --------------------------


def rule(
    protocol: str,
    description: str,
    ports: tuple[int, int] | None = None,
    cidr: str | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """One ``IpPermissions`` element: a protocol and port range from one CIDR or one security group."""
    permission: dict[str, Any] = {"IpProtocol": protocol}
    if ports is not None:
        permission["FromPort"], permission["ToPort"] = ports
    if cidr is not None:
        permission["IpRanges"] = [{"CidrIp": cidr, "Description": description}]
    else:
        permission["UserIdGroupPairs"] = [{"GroupId": group, "Description": description}]
    return permission


def ingress_rules(ids: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """``IpPermissions`` per group role: control plane, nodes, and the (rule-less) load-balancer group."""
    cp, node = ids["controlplane"], ids["node"]
    anywhere = "0.0.0.0/0"
    return {
        "controlplane": [
            rule("tcp", "Kubernetes API", (API_SERVER_PORT, API_SERVER_PORT), cidr=anywhere),
            rule("tcp", "etcd", (2379, 2380), group=cp),
            rule("tcp", "kubelet", (10250, 10250), group=node),
        ],
        "node": [
            rule("tcp", "NodePort services", (30000, 32767), cidr=anywhere),
            rule("-1", "node to node", group=node),
            rule("tcp", "kubelet", (10250, 10250), group=cp),
        ],
        "lb": [],
    }


SG_ROLES = ("controlplane", "node", "lb")
SG_PURPOSE = {"controlplane": "control plane", "node": "nodes", "lb": "load balancers (cloud provider)"}


# -- the derivation ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    what: str
    operation: str
    count: int


def derivation(plan: ClusterPlan) -> list[Step]:
    secret_count = len(plan.secret_chunks) * sum(1 for m in plan.machines if m.secrets_manager)
    """How many calls of each operation creating the cluster needs, from the manifest alone."""
    public = [s for s in plan.subnets if s.public]
    rule_groups = sum(1 for rules in ingress_rules({r: r for r in SG_ROLES}).values() if rules)
    amis_with_root_volume = {m.ami for m in plan.machines if m.root_volume_size is not None}
    control_planes = [m for m in plan.machines if m.control_plane]
    tables = 1 + len(plan.private_zones)
    steps = [
        Step("VPC", "ec2:CreateVpc", 1),
        Step("VPC DNS hostnames on (DNS support is on by default)", "ec2:ModifyVpcAttribute", 1),
        Step(
            f"subnets ({len(public)} public, {len(plan.subnets) - len(public)} private)",
            "ec2:CreateSubnet",
            len(plan.subnets),
        ),
        Step("public subnets: MapPublicIpOnLaunch on", "ec2:ModifySubnetAttribute", len(public)),
        Step("internet gateway", "ec2:CreateInternetGateway", 1),
        Step("internet gateway attached to the VPC", "ec2:AttachInternetGateway", 1),
        Step("elastic IPs, one per NAT gateway", "ec2:AllocateAddress", len(plan.nat_zones)),
        Step(
            "NAT gateways, one per zone with public + private subnets",
            "ec2:CreateNatGateway",
            len(plan.nat_zones),
        ),
        Step("route tables (1 public + 1 per private zone)", "ec2:CreateRouteTable", tables),
        Step("default routes (public -> IGW, private -> NAT)", "ec2:CreateRoute", tables),
        Step("route table associations, one per subnet", "ec2:AssociateRouteTable", len(plan.subnets)),
        Step("security groups (control plane, nodes, lb)", "ec2:CreateSecurityGroup", len(SG_ROLES)),
        Step(
            "ingress rules, one batch per group that has rules",
            "ec2:AuthorizeSecurityGroupIngress",
            rule_groups,
        ),
        Step("API server network load balancer", "elbv2:CreateLoadBalancer", 1),
        Step("API server target group (TCP 6443)", "elbv2:CreateTargetGroup", 1),
        Step("listener TCP 6443 -> target group", "elbv2:CreateListener", 1),
        Step(
            "AMI root device name, for the root volume mapping (read)",
            "ec2:DescribeImages",
            len(amis_with_root_volume),
        ),
        Step(
            "bootstrap data stored in Secrets Manager before each instance (gzipped, 7000-byte chunks)",
            "secretsmanager:CreateSecret",
            secret_count,
        ),
        Step("instances, one per machine", "ec2:RunInstances", len(plan.machines)),
        Step(
            "the bootstrap data's secrets deleted once each instance runs",
            "secretsmanager:DeleteSecret",
            secret_count,
        ),
        Step(
            "control plane registered with the target group",
            "elbv2:RegisterTargets",
            1 if control_planes else 0,
        ),
    ]
    return [s for s in steps if s.count]


# -- the calls -----------------------------------------------------------------------------------------------


class Creator:
    """Creates the planned cluster with one call per resource (or batch), counting every call."""

    def __init__(self, plan: ClusterPlan, endpoint: str, counter: CallCounter) -> None:
        self.plan = plan
        self.counter = counter
        # An emulator endpoint: emulator credentials, never the user's; botocore's retries off, as capa-py's.
        session = boto3.session.Session(
            region_name=plan.region, aws_access_key_id=EMULATOR_KEY, aws_secret_access_key=EMULATOR_KEY
        )
        config = Config(region_name=plan.region, retries={"total_max_attempts": 1, "mode": "standard"})
        self.ec2: Any = session.client("ec2", endpoint_url=endpoint, config=config)
        self.elbv2: Any = session.client("elbv2", endpoint_url=endpoint, config=config)
        self.secrets: Any = session.client("secretsmanager", endpoint_url=endpoint, config=config)
        for service, client in (("ec2", self.ec2), ("elbv2", self.elbv2), ("secretsmanager", self.secrets)):
            self._count(service, client)

    def _count(self, service: str, client: Any) -> None:
        counter = self.counter

        def after_call(http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
            code = parsed.get("Error", {}).get("Code") if isinstance(parsed, dict) else None
            counter.add(service, model.name, code or ("ok" if http_response.status_code < 300 else "error"))

        def after_call_error(context: dict[str, Any], exception: Exception, **_: Any) -> None:
            counter.add(service, str(context.get("operation_name", "?")), type(exception).__name__)

        client.meta.events.register("after-call", after_call)
        client.meta.events.register("after-call-error", after_call_error)

    # tags ------------------------------------------------------------------------------------------------
    def tags(
        self, role: str, name: str | None = None, shared: bool = False, extra: dict[str, str] | None = None
    ) -> list[dict[str, str]]:
        cluster = self.plan.name
        values = {**self.plan.additional_tags, **(extra or {})}
        values["Name"] = name or f"{cluster}-{role}"
        values[OWNED_KEY.format(cluster=cluster)] = "owned"
        values[ROLE_KEY] = role
        if shared:
            values[CLOUD_PROVIDER_KEY.format(cluster=cluster)] = "owned"
        return [{"Key": k, "Value": v} for k, v in values.items()]

    def spec(self, resource_types: str | tuple[str, ...], role: str, **kwargs: Any) -> list[dict[str, Any]]:
        types = (resource_types,) if isinstance(resource_types, str) else resource_types
        return [{"ResourceType": t, "Tags": self.tags(role, **kwargs)} for t in types]

    # the cluster -----------------------------------------------------------------------------------------
    def create(self) -> dict[str, Any]:
        plan, ec2, elbv2 = self.plan, self.ec2, self.elbv2
        vpc_id = ec2.create_vpc(CidrBlock=plan.vpc_cidr, TagSpecifications=self.spec("vpc", "vpc"))["Vpc"][
            "VpcId"
        ]
        ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})

        subnet_ids: dict[str, str] = {}
        for subnet in plan.subnets:
            subnet_ids[subnet.role] = ec2.create_subnet(
                VpcId=vpc_id,
                CidrBlock=subnet.cidr_block,
                AvailabilityZone=subnet.zone,
                TagSpecifications=self.spec("subnet", subnet.role),
            )["Subnet"]["SubnetId"]
        for subnet in plan.subnets:
            if subnet.public:
                ec2.modify_subnet_attribute(
                    SubnetId=subnet_ids[subnet.role], MapPublicIpOnLaunch={"Value": True}
                )

        igw_id = ec2.create_internet_gateway(
            TagSpecifications=self.spec("internet-gateway", "internet-gateway")
        )["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=igw_id, VpcId=vpc_id)

        nat_by_zone: dict[str, str] = {}
        for zone in plan.nat_zones:
            allocation = ec2.allocate_address(
                Domain="vpc", TagSpecifications=self.spec("elastic-ip", f"eip-nat-{zone}")
            )["AllocationId"]
            public = next(s for s in plan.subnets if s.public and s.zone == zone)
            nat_by_zone[zone] = ec2.create_nat_gateway(
                SubnetId=subnet_ids[public.role],
                AllocationId=allocation,
                ConnectivityType="public",
                TagSpecifications=self.spec("natgateway", f"nat-gateway-{zone}"),
            )["NatGateway"]["NatGatewayId"]

        def route_table(role: str) -> str:
            response = ec2.create_route_table(VpcId=vpc_id, TagSpecifications=self.spec("route-table", role))
            return str(response["RouteTable"]["RouteTableId"])

        public_rt = route_table("route-table-public")
        ec2.create_route(RouteTableId=public_rt, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw_id)
        private_rt: dict[str, str] = {}
        for zone in plan.private_zones:
            private_rt[zone] = route_table(f"route-table-private-{zone}")
            nat = nat_by_zone.get(zone) or next(iter(nat_by_zone.values()))
            ec2.create_route(
                RouteTableId=private_rt[zone], DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat
            )
        route_table_of: dict[str, str] = {}
        for subnet in plan.subnets:
            table = public_rt if subnet.public else private_rt[subnet.zone]
            ec2.associate_route_table(RouteTableId=table, SubnetId=subnet_ids[subnet.role])
            route_table_of[subnet.role] = table

        groups: dict[str, str] = {}
        for role in SG_ROLES:
            groups[role] = ec2.create_security_group(
                VpcId=vpc_id,
                GroupName=f"{plan.name}-{role}",
                Description=f"{plan.name} {SG_PURPOSE[role]}",
                TagSpecifications=self.spec("security-group", f"sg-{role}", shared=role == "lb"),
            )["GroupId"]
        for role, rules in ingress_rules(groups).items():
            if rules:
                ec2.authorize_security_group_ingress(GroupId=groups[role], IpPermissions=rules)

        wanted_public = plan.scheme == "internet-facing"
        lb_subnets: dict[str, str] = {}
        for subnet in plan.subnets:
            if subnet.public == wanted_public:
                lb_subnets.setdefault(subnet.zone, subnet_ids[subnet.role])
        lb = elbv2.create_load_balancer(
            Name=f"{plan.name}-apiserver",
            Type="network",
            Scheme=plan.scheme,
            Subnets=[lb_subnets[z] for z in sorted(lb_subnets)],
            IpAddressType="ipv4",
            Tags=self.tags("apiserver-lb"),
        )["LoadBalancers"][0]
        tg_arn = elbv2.create_target_group(
            Name=f"{plan.name}-apiserver-tg",
            Protocol="TCP",
            Port=API_SERVER_PORT,
            VpcId=vpc_id,
            TargetType="instance",
            HealthCheckEnabled=True,
            HealthCheckProtocol="TCP",
            HealthCheckPort="traffic-port",
            Tags=self.tags("apiserver-tg"),
        )["TargetGroups"][0]["TargetGroupArn"]
        listener_arn = elbv2.create_listener(
            LoadBalancerArn=lb["LoadBalancerArn"],
            Protocol="TCP",
            Port=API_SERVER_PORT,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": tg_arn}],
            Tags=self.tags("apiserver-listener"),
        )["Listeners"][0]["ListenerArn"]

        root_devices: dict[str, str] = {}
        for ami in sorted({m.ami for m in plan.machines if m.root_volume_size is not None}):
            (image,) = ec2.describe_images(ImageIds=[ami])["Images"]
            root_devices[ami] = image["RootDeviceName"]
        # Machines go to the private subnets, spread over zones by a hash of their name (as capa-py does).
        private = sorted((s for s in plan.subnets if not s.public), key=lambda s: s.zone)
        instances: dict[str, str] = {}
        for machine in plan.machines:
            index = int(hashlib.sha256(machine.name.encode()).hexdigest(), 16) % len(private)
            user_data = plan.user_data
            secret_names: list[str] = []
            if machine.secrets_manager:
                # The data in secrets; the instance gets a script naming them (its text does not matter here).
                for n, chunk in enumerate(plan.secret_chunks):
                    name = f"aws.cluster.x-k8s.io/{plan.name}-{machine.name}-{n}"
                    self.secrets.create_secret(
                        Name=name,
                        SecretBinary=chunk,
                        Tags=self.tags(f"bootstrap-secret-{machine.name}-{n}", name=machine.name),
                    )
                    secret_names.append(name)
                user_data = f"#!/bin/bash\n# fetch {len(secret_names)} secrets\n".encode()
            roles = SG_ROLES if machine.control_plane else ("node", "lb")
            params: dict[str, Any] = {
                "ImageId": machine.ami,
                "InstanceType": machine.instance_type,
                "MinCount": 1,
                "MaxCount": 1,
                "SubnetId": subnet_ids[private[index].role],
                "SecurityGroupIds": [groups[r] for r in roles],
                "UserData": user_data,
                "TagSpecifications": self.spec(
                    ("instance", "volume"),
                    f"instance-{machine.name}",
                    name=machine.name,
                    extra=machine.extra_tags,
                ),
            }
            if machine.root_volume_size is not None:
                params["BlockDeviceMappings"] = [
                    {
                        "DeviceName": root_devices[machine.ami],
                        "Ebs": {
                            "VolumeSize": machine.root_volume_size,
                            "VolumeType": machine.root_volume_type,
                            "DeleteOnTermination": True,
                        },
                    }
                ]
            instances[machine.name] = ec2.run_instances(**params)["Instances"][0]["InstanceId"]
            for name in secret_names:
                self.secrets.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
        control_planes = [instances[m.name] for m in plan.machines if m.control_plane]
        if control_planes:
            elbv2.register_targets(TargetGroupArn=tg_arn, Targets=[{"Id": i} for i in control_planes])
        return {
            "vpc": vpc_id,
            "subnets": subnet_ids,
            "internetGateway": igw_id,
            "natGateways": nat_by_zone,
            "routeTables": route_table_of,
            "securityGroups": groups,
            "loadBalancer": lb["LoadBalancerArn"],
            "targetGroup": tg_arn,
            "listener": listener_arn,
            "instances": instances,
        }


def calls_summary(counter: CallCounter) -> dict[str, Any]:
    return {
        "total": counter.total(),
        "mutating": counter.total(mutating=True),
        "byOperation": counter.by_operation(),
        "byOutcome": counter.by_outcome(),
    }


def check(steps: list[Step], counter: CallCounter) -> list[str]:
    """Differences between the calls made and the derivation (empty when they agree)."""
    derived: Counter[str] = Counter()
    for s in steps:
        derived[s.operation] += s.count
    made = counter.by_operation()
    return [
        f"{op}: derived {derived.get(op, 0)}, made {made.get(op, 0)}"
        for op in sorted(set(derived) | set(made))
        if derived.get(op, 0) != made.get(op, 0)
    ]


def print_derivation(steps: list[Step]) -> None:
    width = max(len(s.what) for s in steps)
    op_width = max(len(s.operation) for s in steps)
    for s in steps:
        print(f"{s.what.ljust(width)}   {s.operation.ljust(op_width)}   {s.count:>3}")
    total = sum(s.count for s in steps)
    mutating = sum(s.count for s in steps if is_mutating(s.operation.split(":", 1)[1]))
    print(f"{'total'.ljust(width)}   {''.ljust(op_width)}   {total:>3}  ({mutating} mutating)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="an AWS-compatible endpoint URL (a moto server)")
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON document")
    parser.add_argument("--derivation", action="store_true", help="print the derivation and exit")
    args = parser.parse_args(argv)
    plan = load_plan(args.manifest)
    steps = derivation(plan)
    if args.derivation:
        print_derivation(steps)
        return 0
    if not args.endpoint:
        parser.error("--endpoint is required (this script is meant for an emulator)")
    counter = CallCounter()
    creator = Creator(plan, args.endpoint, counter)
    started = time.perf_counter()
    created = creator.create()
    elapsed = time.perf_counter() - started
    mismatches = check(steps, counter)
    if args.json:
        document = {
            "calls": calls_summary(counter),
            "elapsedSeconds": round(elapsed, 4),
            "derivation": [{"what": s.what, "operation": s.operation, "count": s.count} for s in steps],
            "mismatches": mismatches,
            "created": created,
        }
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print_derivation(steps)
        print(f"made {counter.total()} calls ({counter.total(mutating=True)} mutating) in {elapsed:.3f} s")
    if mismatches:
        print("the calls made differ from the derivation:\n  " + "\n  ".join(mismatches), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
