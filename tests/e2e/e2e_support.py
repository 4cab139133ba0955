"""Running the real ``capa`` CLI as a subprocess, and counting what it left in a moto server.

* :func:`capa_env` — an environment with no AWS credential, config or endpoint of the developer's and
  instance metadata off, so a test never reaches real AWS and never shares the user's local endpoint
  (its record lives under the test's HOME);
* :class:`Capa` — ``capa --state … ARGS`` for one test (one store), optionally through
  ``tests/harness/crashing_capa.py`` with fault variables;
* :class:`Inventory` — what the moto server holds, per resource type, tagged with the cluster and in
  total, read with plain boto3 describe calls (not through capa's resource classes, which are under test);
* :func:`expected_counts` — how many of each resource a manifest should make, derived from the manifest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_templates import AWSMachineTemplate
from capa_py.api.loader import load_manifests
from capa_py.api.machinesets import MachineDeployment
from capa_py.aws.calllog import CALL_LOG_ENV
from tests.support.eventually import eventually

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "aws-cluster-machines.yaml"
QUICK_START = ROOT / "examples" / "aws-cluster.yaml"
"""The README's quick start: the same cluster, its workers a MachineDeployment of an AWSMachineTemplate."""
CRASHING_CAPA = ("-m", "tests.harness.crashing_capa")
"""The arguments of ``python`` running capa through the fault wrapper (``capa_env`` puts the root on
``PYTHONPATH``)."""
CLUSTER = "demo"
CLUSTER_TAG = f"sigs.k8s.io/cluster-api-provider-aws/cluster/{CLUSTER}"
REGION = "us-east-1"

# Resource types counted in moto, in creation order.
TYPES = (
    "vpc",
    "subnet",
    "internet-gateway",
    "elastic-ip",
    "nat-gateway",
    "route-table",
    "security-group",
    "load-balancer",
    "target-group",
    "listener",
    "instance",
    "secret",
)


def capa_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a capa subprocess: nothing AWS from the developer's, nothing of the harness."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "CAPA_", "BOTO_")) and k not in ("PYTHONPATH",)
    }
    # The suite's record of the AWS operations capa calls (tests/harness/iam_calls.py) includes these.
    if CALL_LOG_ENV in os.environ:
        env[CALL_LOG_ENV] = os.environ[CALL_LOG_ENV]
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "HOME": str(home),
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(home / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
            "NO_COLOR": "1",
            "COLUMNS": "250",
            # The capa under test is this checkout's, whatever else the interpreter has installed.
            "PYTHONPATH": str(ROOT),
            # The local AWS endpoint (``--aws-endpoint local``) of this test's HOME, not the user's.
            "CAPA_LOCAL_AWS_DIR": str(home / "local-aws"),
        }
    )
    env.update(extra or {})
    return env


@dataclass
class Run:
    """One finished capa process."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def json(self) -> Any:
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"`capa {' '.join(self.args)}` did not print JSON: {exc}\n{self}") from exc

    def __str__(self) -> str:
        def tail(text: str, limit: int = 3000) -> str:
            return text if len(text) <= limit else "…" + text[-limit:]

        return (
            f"$ capa {' '.join(self.args)}\n"
            f"exit {self.returncode} after {self.seconds:.1f}s\n"
            f"--- stdout ---\n{tail(self.stdout)}\n--- stderr ---\n{tail(self.stderr)}"
        )


@dataclass
class Capa:
    """``capa --state STATE …`` for one test, with its own store and an empty HOME."""

    state: Path
    endpoint: str | None = None
    home: Path | None = None
    env_extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.home is None:
            self.home = self.state.parent / "home"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        assert self.home is not None
        return capa_env(self.home, {**self.env_extra, **(extra or {})})

    def run(
        self,
        *args: str,
        faults: Mapping[str, str] | None = None,
        timeout: float = 240.0,
        endpoint: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Run:
        """Run ``capa --state STATE ARGS`` (``--aws-endpoint`` added to AWS commands unless ``endpoint``
        is False); with ``faults``, through the crashing wrapper with those ``CAPA_TEST_*`` variables."""
        argv = ["--state", str(self.state), *args]
        command = next((a for a in args if not a.startswith("-")), None)
        if endpoint and self.endpoint and command in ("apply", "delete", "resources"):
            argv += ["--aws-endpoint", self.endpoint]
        program = [*CRASHING_CAPA] if faults is not None else ["-m", "capa_app.cli"]
        started = time.monotonic()
        completed = subprocess.run(
            [sys.executable, *program, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else self.env(faults),
            cwd=self.state.parent,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        return Run(argv, completed.returncode, completed.stdout, completed.stderr, time.monotonic() - started)

    def ok(self, *args: str, **kwargs: Any) -> Run:
        """Run and assert exit 0."""
        result = self.run(*args, **kwargs)
        assert result.returncode == 0, f"expected exit 0:\n{result}"
        return result

    def get(self, kind: str) -> list[dict[str, Any]]:
        """Every object of a kind in every namespace, as ``capa get KIND -A -o json`` prints them."""
        document = self.ok("get", kind, "-A", "-o", "json").json()
        assert document.get("kind") == "List", f"capa get {kind} -A -o json is not a List: {document}"
        return list(document["items"])


# -- what the manifest should make ----------------------------------------------------------------------
def expected_counts(manifest: Path = EXAMPLE) -> dict[str, int]:
    """Exactly how many of each resource the manifest's cluster should have (one AWSCluster): an instance
    per AWSMachine and per replica of a MachineDeployment of AWSMachineTemplates."""
    objects = load_manifests([manifest])
    clusters = [o for o in objects if isinstance(o, AWSCluster)]
    assert len(clusters) == 1, "expected_counts handles manifests with exactly one AWSCluster"
    subnets = clusters[0].spec.network.subnets
    assert subnets, "expected_counts needs declared subnets"
    public = {s.availability_zone for s in subnets if s.is_public}
    private = {s.availability_zone for s in subnets if not s.is_public}
    nat_zones = public & private if private else set()
    return {
        "vpc": 1,
        "subnet": len(subnets),
        "internet-gateway": 1,
        "elastic-ip": len(nat_zones),
        "nat-gateway": len(nat_zones),
        "route-table": 1 + len(private),  # one public, one per private zone (never the VPC's main table)
        "security-group": 3,  # control plane, nodes, load balancers (never the VPC's default group)
        "load-balancer": 1,
        "target-group": 1,
        "listener": 1,
        "secret": 0,  # every machine's bootstrap data secrets are deleted once its instance runs
        "instance": sum(isinstance(o, AWSMachine) for o in objects)
        + sum(
            d.spec.replicas or 0
            for d in objects
            if isinstance(d, MachineDeployment)
            and d.spec.template.spec.infrastructure_ref.kind == AWSMachineTemplate.KIND
        ),
    }


# -- what moto holds ----------------------------------------------------------------------------------
def _tags(items: Sequence[Mapping[str, Any]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in items or []}


@dataclass
class Inventory:
    """Live resources in the server, by type: ``tagged[type]`` carry the cluster's owned tag,
    ``total[type]`` are every resource of the type that is not a default (default VPC and its subnets,
    main route tables, default security groups) and not deleted/terminated."""

    tagged: dict[str, list[str]]
    total: dict[str, list[str]]

    def counts(self, which: str = "tagged") -> dict[str, int]:
        source = self.tagged if which == "tagged" else self.total
        return {kind: len(ids) for kind, ids in source.items()}

    def tagged_ids(self) -> dict[str, str]:
        """``{id: type}`` of every tagged resource."""
        return {resource_id: kind for kind, ids in self.tagged.items() for resource_id in ids}


class MotoInspector:
    """Plain boto3 clients on the test's moto server, reading what is there."""

    def __init__(self, endpoint: str, region: str = REGION) -> None:
        credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        session = boto3.session.Session(region_name=region, **credentials)
        self.ec2 = session.client("ec2", endpoint_url=endpoint)
        self.elbv2 = session.client("elbv2", endpoint_url=endpoint)
        self.tagging = session.client("resourcegroupstaggingapi", endpoint_url=endpoint)
        self.secrets = session.client("secretsmanager", endpoint_url=endpoint)

    def close(self) -> None:
        for client in (self.ec2, self.elbv2, self.tagging, self.secrets):
            client.close()

    def _elb_tags(self, arns: list[str]) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for start in range(0, len(arns), 20):
            response = self.elbv2.describe_tags(ResourceArns=arns[start : start + 20])
            for description in response.get("TagDescriptions", []):
                found[description["ResourceArn"]] = _tags(description.get("Tags"))
        return found

    def inventory(self, tag_key: str = CLUSTER_TAG, tag_value: str = "owned") -> Inventory:
        ec2 = self.ec2
        owned = [{"Name": f"tag:{tag_key}", "Values": [tag_value]}]
        tagged: dict[str, list[str]] = {kind: [] for kind in TYPES}
        total: dict[str, list[str]] = {kind: [] for kind in TYPES}

        vpcs = ec2.describe_vpcs()["Vpcs"]
        default_vpcs = {v["VpcId"] for v in vpcs if v.get("IsDefault")}
        total["vpc"] = [v["VpcId"] for v in vpcs if not v.get("IsDefault")]
        tagged["vpc"] = [v["VpcId"] for v in ec2.describe_vpcs(Filters=owned)["Vpcs"]]

        subnets = ec2.describe_subnets()["Subnets"]
        total["subnet"] = [s["SubnetId"] for s in subnets if s["VpcId"] not in default_vpcs]
        tagged["subnet"] = [s["SubnetId"] for s in ec2.describe_subnets(Filters=owned)["Subnets"]]

        gateways = ec2.describe_internet_gateways()["InternetGateways"]
        total["internet-gateway"] = [
            g["InternetGatewayId"]
            for g in gateways
            if not any(a.get("VpcId") in default_vpcs for a in g.get("Attachments", []))
        ]
        tagged["internet-gateway"] = [
            g["InternetGatewayId"] for g in ec2.describe_internet_gateways(Filters=owned)["InternetGateways"]
        ]

        total["elastic-ip"] = [a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]]
        tagged["elastic-ip"] = [a["AllocationId"] for a in ec2.describe_addresses(Filters=owned)["Addresses"]]

        live_nat = {"Name": "state", "Values": ["pending", "available", "deleting", "failed"]}
        total["nat-gateway"] = [
            n["NatGatewayId"]
            for n in ec2.describe_nat_gateways(Filter=[live_nat])["NatGateways"]
            if n.get("State") != "deleted"
        ]
        tagged["nat-gateway"] = [
            n["NatGatewayId"]
            for n in ec2.describe_nat_gateways(Filter=[*owned, live_nat])["NatGateways"]
            if n.get("State") != "deleted"
        ]

        def non_main(tables: list[dict[str, Any]]) -> list[str]:
            return [
                t["RouteTableId"]
                for t in tables
                if not any(a.get("Main") for a in t.get("Associations", []))
                and t.get("VpcId") not in default_vpcs
            ]

        total["route-table"] = non_main(ec2.describe_route_tables()["RouteTables"])
        tagged["route-table"] = non_main(ec2.describe_route_tables(Filters=owned)["RouteTables"])

        groups = ec2.describe_security_groups()["SecurityGroups"]
        total["security-group"] = [
            g["GroupId"] for g in groups if g["GroupName"] != "default" and g.get("VpcId") not in default_vpcs
        ]
        tagged["security-group"] = [
            g["GroupId"]
            for g in ec2.describe_security_groups(Filters=owned)["SecurityGroups"]
            if g["GroupName"] != "default"
        ]

        for secret in self.secrets.list_secrets().get("SecretList", []):
            total["secret"].append(secret["Name"])
            if _tags(secret.get("Tags")).get(tag_key) == tag_value:
                tagged["secret"].append(secret["Name"])

        live = {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}
        for reservation in ec2.describe_instances(Filters=[live])["Reservations"]:
            total["instance"] += [i["InstanceId"] for i in reservation["Instances"]]
        for reservation in ec2.describe_instances(Filters=[*owned, live])["Reservations"]:
            tagged["instance"] += [i["InstanceId"] for i in reservation["Instances"]]

        load_balancers = [
            lb["LoadBalancerArn"] for lb in self.elbv2.describe_load_balancers()["LoadBalancers"]
        ]
        target_groups = [tg["TargetGroupArn"] for tg in self.elbv2.describe_target_groups()["TargetGroups"]]
        listeners = [
            listener["ListenerArn"]
            for arn in load_balancers
            for listener in self.elbv2.describe_listeners(LoadBalancerArn=arn)["Listeners"]
        ]
        elb_tags = self._elb_tags([*load_balancers, *target_groups, *listeners])
        for kind, arns in (
            ("load-balancer", load_balancers),
            ("target-group", target_groups),
            ("listener", listeners),
        ):
            total[kind] = arns
            tagged[kind] = [a for a in arns if elb_tags.get(a, {}).get(tag_key) == tag_value]
        return Inventory(tagged, total)

    def tagging_api_arns(self, tag_key: str = CLUSTER_TAG) -> list[str]:
        """What the Resource Groups Tagging API lists with the cluster's tag (moto's misses EIPs)."""
        arns: list[str] = []
        token = ""
        while True:
            page = self.tagging.get_resources(
                TagFilters=[{"Key": tag_key}], **({"PaginationToken": token} if token else {})
            )
            arns += [m["ResourceARN"] for m in page.get("ResourceTagMappingList", [])]
            token = page.get("PaginationToken") or ""
            if not token:
                return arns


def recorded_ids(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``{resource id: "AWSCluster default/demo role"}`` for every resource recorded in statuses."""
    found: dict[str, str] = {}
    for obj in objects:
        meta = obj["metadata"]
        owner = f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}"
        for role, record in (obj.get("status", {}).get("resources") or {}).items():
            found[record["id"]] = f"{owner} {role}"
    return found


def problems_with_cluster(
    inventory: Inventory,
    expected: Mapping[str, int],
    baseline: Mapping[str, int],
    recorded: Mapping[str, str],
) -> list[str]:
    """Everything wrong with what the server holds: duplicates or missing resources (tagged and in total,
    over what was there before the cluster) and tagged resources no status records (orphans)."""
    problems: list[str] = []
    for kind in TYPES:
        want = expected[kind]
        tagged = inventory.tagged[kind]
        if len(tagged) != want:
            problems.append(
                f"{kind}: {len(tagged)} tagged with the cluster, expected exactly {want}: {tagged}"
            )
        extra = len(inventory.total[kind]) - baseline.get(kind, 0)
        if extra != want:
            problems.append(
                f"{kind}: {extra} in total beyond the {baseline.get(kind, 0)} there before, expected "
                f"exactly {want}: {inventory.total[kind]}"
            )
    for resource_id, kind in sorted(inventory.tagged_ids().items()):
        if resource_id not in recorded:
            problems.append(f"orphan: {kind} {resource_id} carries the cluster tag but no status records it")
    return problems


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.1) -> bool:
    """Whether ``predicate()`` holds within ``timeout`` seconds (the caller asserts, with its message)."""
    try:
        return bool(eventually(predicate, timeout=timeout, interval=interval))
    except AssertionError:
        return False
