"""Cluster API Provider AWS's ``AWSCluster`` (``infrastructure.cluster.x-k8s.io/v1beta2``): its spec (the
region, the network, the control-plane load balancer, the bastion host), its status, and the rules an
update and a write must follow."""

from __future__ import annotations

import ipaddress
import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from capa_py.api.aws_checks import (
    REGION_PATTERN,
    block_size_issue,
    check_cidr,
    check_tags,
    known_instance_types,
    known_regions,
)
from capa_py.api.aws_common import INFRA_API_VERSION, IntentRecord, RecordedResource
from capa_py.api.aws_identity import AWSIdentityReference
from capa_py.api.cluster import APIEndpoint, MachineAddress
from capa_py.api.contract import InfrastructureStatus
from capa_py.api.image_lookup import base_os_field, format_field, lookup_issues, org_field
from capa_py.api.immutable import immutable, without
from capa_py.api.meta import FieldIssue, KubeModel, KubeObject
from capa_py.api.zones import zone_issue


class VPCSpec(KubeModel):
    id: str | None = None
    cidr_block: str | None = None
    availability_zone_usage_limit: int = Field(default=3, ge=1, le=16)
    availability_zone_selection: Literal["Ordered", "Random"] = "Ordered"
    tags: dict[str, str] = Field(default_factory=dict)

    _check_cidr = field_validator("cidr_block")(lambda v: check_cidr(v) if v is not None else v)
    _check_tags = field_validator("tags")(check_tags)


class SubnetSpec(KubeModel):
    id: str | None = None
    cidr_block: str | None = None
    availability_zone: str | None = None
    is_public: bool = False
    tags: dict[str, str] = Field(default_factory=dict)

    _check_cidr = field_validator("cidr_block")(lambda v: check_cidr(v) if v is not None else v)
    _check_tags = field_validator("tags")(check_tags)


class NetworkSpec(KubeModel):
    vpc: VPCSpec = Field(default_factory=VPCSpec)
    subnets: list[SubnetSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tags_only_on_what_capa_creates(self) -> NetworkSpec:
        """Resources the user brings are never tagged: tags for them would be silently ignored."""
        if self.vpc.id is not None and self.vpc.tags:
            raise ValueError("vpc.tags: a bring-your-own VPC (vpc.id) is never tagged; remove the tags")
        for index, subnet in enumerate(self.subnets):
            if subnet.id is not None and subnet.tags:
                raise ValueError(
                    f"subnets[{index}].tags: a bring-your-own subnet (id) is never tagged; remove the tags"
                )
        return self


class AWSLoadBalancerSpec(KubeModel):
    name: str | None = Field(default=None, max_length=32, pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$")
    scheme: Literal["internet-facing", "internal"] = "internet-facing"
    load_balancer_type: Literal["nlb"] = "nlb"
    cross_zone_load_balancing: bool = False
    additional_security_groups: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        if value is not None and value.lower().startswith("internal-"):
            raise ValueError("a load balancer name must not start with 'internal-' (AWS reserves it)")
        return value


DEFAULT_BASTION_INSTANCE_TYPE = "t3.micro"
"""The bastion's instance type when ``spec.bastion.instanceType`` is not set (CAPA's default)."""


class Bastion(KubeModel):
    """CAPA's ``spec.bastion``: a small instance in a public subnet, reachable by SSH, from which the
    cluster's machines are reached by SSH (they allow SSH from the bastion's security group)."""

    enabled: bool = Field(default=False, description="Whether the cluster has a bastion host.")
    disable_ingress_rules: bool = Field(
        default=False,
        description=(
            "Give the bastion's security group no ingress rule (the user adds their own). "
            "allowedCIDRBlocks must then be empty."
        ),
    )
    allowed_cidr_blocks: list[str] = Field(
        default_factory=list,
        alias="allowedCIDRBlocks",
        description=(
            "The IPv4 CIDR blocks SSH (port 22) to the bastion is allowed from. Default: 0.0.0.0/0, "
            "unless disableIngressRules."
        ),
    )
    instance_type: str | None = Field(
        default=None,
        description=f"The bastion's EC2 instance type. Default: {DEFAULT_BASTION_INSTANCE_TYPE}.",
    )
    ami: str | None = Field(
        default=None,
        description=(
            "The bastion's AMI id. Default: the newest x86_64 Ubuntu 24.04 image Canonical publishes in the "
            "region, as CAPA looks it up."
        ),
    )

    def ingress_cidr_blocks(self) -> list[str]:
        """The blocks SSH is allowed from: the given ones, else anywhere (none with disableIngressRules)."""
        if self.disable_ingress_rules:
            return []
        return list(self.allowed_cidr_blocks) or ["0.0.0.0/0"]

    def issues(self, base: str) -> list[FieldIssue]:
        issues: list[FieldIssue] = []
        if self.disable_ingress_rules and self.allowed_cidr_blocks:
            issues.append(
                FieldIssue(
                    path=f"{base}.allowedCIDRBlocks",
                    message="must be empty when disableIngressRules is true (no ingress rule is made)",
                )
            )
        for index, block in enumerate(self.allowed_cidr_blocks):
            try:
                check_cidr(block)
            except ValueError as exc:
                issues.append(
                    FieldIssue(path=f"{base}.allowedCIDRBlocks[{index}]", message=f"{block!r}: {exc}")
                )
        if self.instance_type is not None and self.instance_type not in known_instance_types():
            issues.append(
                FieldIssue(
                    path=f"{base}.instanceType", message=f"not an EC2 instance type: {self.instance_type!r}"
                )
            )
        if self.ami is not None and not self.ami.startswith("ami-"):
            issues.append(FieldIssue(path=f"{base}.ami", message=f"not an AMI id (ami-…): {self.ami!r}"))
        return issues


class APIServerDNSSpec(KubeModel):
    """capa-py's own field (Cluster API Provider AWS has none): a stable name for the API server, a CNAME to
    the control-plane load balancer in a private hosted zone capa-py makes for the cluster's VPC."""

    name: str = Field(
        description="The API server's name (api.example.internal): the control-plane endpoint's host."
    )
    hosted_zone_name: str | None = Field(
        default=None,
        description="The private hosted zone holding the name; default: the name without its first label.",
    )
    ttl: int = Field(default=60, ge=0, le=2147483647, description="The CNAME record's TTL, in seconds.")

    @property
    def zone(self) -> str:
        return (self.hosted_zone_name or self.name.split(".", 1)[-1]).lower().rstrip(".")

    def issues(self, path: str) -> list[FieldIssue]:
        name = self.name.lower().rstrip(".")
        issues = (
            []
            if dns_name_ok(name, labels=2)
            else [
                FieldIssue(
                    path=f"{path}.name",
                    message=f"{self.name!r} is not a domain name of two labels or more",
                )
            ]
        )
        zone_path = f"{path}.hostedZoneName"
        if not dns_name_ok(self.zone, labels=1):
            issues.append(FieldIssue(path=zone_path, message=f"{self.zone!r} is not a domain name"))
        elif not issues and not name.endswith("." + self.zone):
            issues.append(
                FieldIssue(
                    path=zone_path,
                    message=f"the name {name} must lie below the hosted zone {self.zone} (a CNAME cannot "
                    "sit at a zone's apex)",
                )
            )
        return issues


_BUCKET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class S3Bucket(KubeModel):
    """Cluster API Provider AWS's ``spec.s3Bucket``: the bucket the cluster's machines read their Ignition
    bootstrap data from (objects ``control-plane/<machine>`` and ``node/<machine>``). capa-py makes it with
    the cluster, lets the named instance profiles' roles read those keys (a bucket policy), and deletes it,
    its objects first, with the cluster. (CAPA's ``presignedURLDuration`` is not built: machines read with
    their role.)"""

    name: str = Field(
        description="The bucket's name: 3-63 characters, lowercase letters, digits, dots and hyphens, unique "
        "across AWS."
    )
    control_plane_iam_instance_profile: str | None = Field(
        default=None,
        alias="controlPlaneIAMInstanceProfile",
        description="The control-plane machines' instance profile: its role (of the same name) may read "
        "control-plane/* (s3:GetObject).",
    )
    nodes_iam_instance_profiles: list[str] = Field(
        default_factory=list,
        alias="nodesIAMInstanceProfiles",
        description="The worker machines' instance profiles: their roles (of the same names) may read "
        "node/*.",
    )
    best_effort_delete_objects: bool | None = Field(
        default=None,
        description="Ignore AccessDenied when a machine's object is deleted (the controller may lack "
        "s3:DeleteObject on a bucket it does not own).",
    )

    def issues(self, path: str) -> list[FieldIssue]:
        name = self.name
        if (
            not _BUCKET_NAME_RE.match(name)
            or ".." in name
            or _looks_like_ip(name)
            or name.startswith("xn--")
            or name.endswith("-s3alias")
        ):
            return [
                FieldIssue(
                    path=f"{path}.name",
                    message=f"{name!r} is not an S3 bucket name (3-63 lowercase letters, digits, dots and "
                    "hyphens, beginning and ending with a letter or digit, not an IP address)",
                )
            ]
        return []


def _looks_like_ip(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def dns_name_ok(name: str, labels: int) -> bool:
    """Whether ``name`` (lower case, no trailing dot) is a domain name of at least ``labels`` labels."""
    parts = name.split(".")
    return len(name) <= 253 and len(parts) >= labels and all(_DNS_LABEL_RE.match(p) for p in parts)


class AWSClusterSpec(KubeModel):
    region: str
    ssh_key_name: str | None = None
    control_plane_endpoint: APIEndpoint = Field(default_factory=APIEndpoint)
    additional_tags: dict[str, str] = Field(default_factory=dict)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    control_plane_load_balancer: AWSLoadBalancerSpec = Field(default_factory=AWSLoadBalancerSpec)
    image_lookup_format: str | None = format_field(cluster=True)
    image_lookup_org: str | None = org_field(cluster=True)
    image_lookup_base_os: str | None = base_os_field(cluster=True)
    identity_ref: AWSIdentityReference | None = Field(
        default=None,
        description="The identity whose credentials the cluster's controllers use (an "
        "AWSClusterControllerIdentity, AWSClusterStaticIdentity or AWSClusterRoleIdentity); absent, the "
        "controller's own.",
    )
    bastion: Bastion = Field(default_factory=Bastion)
    api_server_dns: APIServerDNSSpec | None = Field(default=None, alias="apiServerDNS")
    s3_bucket: S3Bucket | None = Field(
        default=None,
        alias="s3Bucket",
        description="The bucket machines read their Ignition bootstrap data from (storageType "
        "ClusterObjectStore); made and deleted with the cluster.",
    )

    @field_validator("region")
    @classmethod
    def _check_region(cls, value: str) -> str:
        if not REGION_PATTERN.match(value) or value not in known_regions():
            raise ValueError(f"unknown AWS region {value!r}")
        return value

    _check_tags = field_validator("additional_tags")(check_tags)


class SubnetStatus(KubeModel):
    id: str
    cidr_block: str
    availability_zone: str
    is_public: bool
    route_table_id: str | None = None
    nat_gateway_id: str | None = None


class SecurityGroupStatus(KubeModel):
    id: str
    name: str


class LoadBalancerStatus(KubeModel):
    name: str
    arn: str | None = None
    dns_name: str | None = None
    target_group_arn: str | None = None
    listener_arn: str | None = None


class BastionStatus(KubeModel):
    """The bastion host as last observed: CAPA's ``status.bastion`` (its ``Instance``), the fields capa-py
    knows of it."""

    id: str
    instance_state: str | None = None
    type: str | None = None
    subnet_id: str | None = None
    image_id: str | None = None
    ssh_key_name: str | None = None
    security_group_ids: list[str] = Field(default_factory=list)
    availability_zone: str | None = None
    private_ip: str | None = None
    public_ip: str | None = None
    addresses: list[MachineAddress] = Field(default_factory=list)


class NetworkStatus(KubeModel):
    vpc_id: str | None = None
    internet_gateway_id: str | None = None
    subnets: list[SubnetStatus] = Field(default_factory=list)
    security_groups: dict[str, SecurityGroupStatus] = Field(default_factory=dict)
    api_server_load_balancer: LoadBalancerStatus | None = None


class AWSClusterStatus(InfrastructureStatus):
    network: NetworkStatus = Field(default_factory=NetworkStatus)
    bastion: BastionStatus | None = None
    failure_reason: str | None = None
    failure_message: str | None = None
    observed_generation: int | None = None
    resources: dict[str, RecordedResource] = Field(default_factory=dict)
    intents: dict[str, IntentRecord] = Field(default_factory=dict)


def _within(inner: str, outer: str) -> bool:
    return ipaddress.IPv4Network(inner).subnet_of(ipaddress.IPv4Network(outer))


def _overlaps(a: str, b: str) -> bool:
    return ipaddress.ip_network(a).overlaps(ipaddress.ip_network(b))


class AWSCluster(KubeObject):
    API_VERSION: ClassVar[str] = INFRA_API_VERSION
    KIND: ClassVar[str] = "AWSCluster"
    PLURAL: ClassVar[str] = "awsclusters"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("awsc",)

    spec: AWSClusterSpec
    status: AWSClusterStatus = Field(default_factory=AWSClusterStatus)

    def immutable_issues(self, old: AWSCluster) -> list[FieldIssue]:
        """Cluster API Provider AWS's rule (region, the load balancer's scheme and name, the control-plane
        endpoint once set, the VPC id once set), and capa-py's for what it creates once and never changes
        in place: the VPC block, the zones chosen for default subnets, the subnets (their tags stay
        mutable) and the load balancer's type and additional security groups."""
        new, was = self.spec, old.spec
        lb_fields = ("scheme", "name", "loadBalancerType", "additionalSecurityGroups")
        lb_path = "spec.controlPlaneLoadBalancer"
        issues = immutable("spec.region", was.region, new.region)
        for name in lb_fields:
            issues += immutable(
                f"{lb_path}.{name}",
                was.control_plane_load_balancer.model_dump(mode="json", by_alias=True)[name],
                new.control_plane_load_balancer.model_dump(mode="json", by_alias=True)[name],
            )
        if was.control_plane_endpoint != APIEndpoint():
            issues += immutable(
                "spec.controlPlaneEndpoint", was.control_plane_endpoint, new.control_plane_endpoint
            )
        if was.api_server_dns is not None and new.api_server_dns is None:
            issues += immutable("spec.apiServerDNS", was.api_server_dns, None)
        elif was.api_server_dns is not None and new.api_server_dns is not None:
            old_dns, new_dns = without(was.api_server_dns, ["ttl"]), without(new.api_server_dns, ["ttl"])
            for name in ("name", "hostedZoneName"):
                issues += immutable(f"spec.apiServerDNS.{name}", old_dns[name], new_dns[name])
        vpc_fields = ("id", "cidrBlock", "availabilityZoneUsageLimit", "availabilityZoneSelection")
        old_vpc, new_vpc = without(was.network.vpc, ["tags"]), without(new.network.vpc, ["tags"])
        for name in vpc_fields:
            issues += immutable(f"spec.network.vpc.{name}", old_vpc[name], new_vpc[name])
        old_subnets, new_subnets = was.network.subnets, new.network.subnets
        if len(old_subnets) != len(new_subnets):
            issues.append(
                FieldIssue(
                    path="spec.network.subnets",
                    message=f"immutable (was {len(old_subnets)} subnets, now {len(new_subnets)})",
                )
            )
        else:
            for index, (before, after) in enumerate(zip(old_subnets, new_subnets, strict=True)):
                issues += immutable(
                    f"spec.network.subnets[{index}]", without(before, ["tags"]), without(after, ["tags"])
                )
        return issues

    def semantic_issues(self) -> list[FieldIssue]:
        issues: list[FieldIssue] = [] if self.being_deleted else self.aws_limit_issues()
        issues += lookup_issues(self.spec, "spec")
        issues += self.spec.bastion.issues("spec.bastion")
        if self.spec.s3_bucket is not None:
            issues += self.spec.s3_bucket.issues("spec.s3Bucket")
        dns = self.spec.api_server_dns
        if dns is not None:
            issues += dns.issues("spec.apiServerDNS")
            endpoint = self.spec.control_plane_endpoint
            if endpoint.host and endpoint.host.lower().rstrip(".") != dns.name.lower().rstrip("."):
                issues.append(
                    FieldIssue(
                        path="spec.apiServerDNS.name",
                        message=f"the control-plane endpoint's host is {endpoint.host}: with apiServerDNS it "
                        f"is {dns.name}; set one of the two",
                    )
                )
        vpc = self.spec.network.vpc
        managed_vpc = vpc.id is None
        if managed_vpc and vpc.cidr_block is None:
            issues.append(
                FieldIssue(path="spec.network.vpc.cidrBlock", message="required when vpc.id is not set")
            )
        seen: list[tuple[int, str]] = []
        for index, subnet in enumerate(self.spec.network.subnets):
            base = f"spec.network.subnets[{index}]"
            if subnet.id is None:
                if not managed_vpc:
                    issues.append(
                        FieldIssue(
                            path=f"{base}.id",
                            message="a bring-your-own VPC needs bring-your-own subnets (set id)",
                        )
                    )
                    continue
                if subnet.cidr_block is None:
                    issues.append(FieldIssue(path=f"{base}.cidrBlock", message="required when id is not set"))
                if subnet.availability_zone is None:
                    issues.append(
                        FieldIssue(path=f"{base}.availabilityZone", message="required when id is not set")
                    )
            if subnet.cidr_block is None:
                continue
            if managed_vpc and vpc.cidr_block is not None and not _within(subnet.cidr_block, vpc.cidr_block):
                issues.append(
                    FieldIssue(
                        path=f"{base}.cidrBlock",
                        message=f"{subnet.cidr_block} is outside the VPC block {vpc.cidr_block}",
                    )
                )
            for other_index, other in seen:
                if _overlaps(subnet.cidr_block, other):
                    issues.append(
                        FieldIssue(
                            path=f"{base}.cidrBlock",
                            message=(
                                f"{subnet.cidr_block} overlaps spec.network.subnets[{other_index}] ({other})"
                            ),
                        )
                    )
            seen.append((index, subnet.cidr_block))
        return issues

    def aws_limit_issues(self) -> list[FieldIssue]:
        """Block sizes and zones AWS would refuse."""
        issues: list[FieldIssue] = []
        vpc_block = self.spec.network.vpc.cidr_block
        if vpc_block is not None and (problem := block_size_issue(vpc_block, "VPC")) is not None:
            issues.append(FieldIssue(path="spec.network.vpc.cidrBlock", message=problem))
        for index, subnet in enumerate(self.spec.network.subnets):
            base = f"spec.network.subnets[{index}]"
            if subnet.cidr_block is not None and (problem := block_size_issue(subnet.cidr_block, "subnet")):
                issues.append(FieldIssue(path=f"{base}.cidrBlock", message=problem))
            if subnet.availability_zone is not None:
                problem = zone_issue(subnet.availability_zone, self.spec.region)
                if problem is not None:
                    issues.append(FieldIssue(path=f"{base}.availabilityZone", message=problem))
        return issues
