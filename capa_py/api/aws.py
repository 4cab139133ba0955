"""Cluster API Provider AWS kinds (``infrastructure.cluster.x-k8s.io/v1beta2``).

Spec fields carry the names Cluster API Provider AWS gives them, so manifests move between the two. The
status adds what capa-py's strategy engine records: every AWS resource it created (``resources``, keyed by
role) and the intents it wrote before creates that have no tag, token or natural key (``intents``).
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from functools import cache
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from capa_py.api.cluster import APIEndpoint, MachineAddress
from capa_py.api.contract import InfrastructureStatus
from capa_py.api.immutable import immutable, without
from capa_py.api.meta import FieldIssue, KubeModel, KubeObject, Time
from capa_py.api.zones import zone_issue

INFRA_API_VERSION = "infrastructure.cluster.x-k8s.io/v1beta2"
AWSCLUSTER_FINALIZER = "awscluster.infrastructure.cluster.x-k8s.io"
AWSMACHINE_FINALIZER = "awsmachine.infrastructure.cluster.x-k8s.io"

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_RESERVED_TAG_PREFIX = "aws:"


@cache
def known_regions() -> frozenset[str]:
    """Every region botocore's endpoint data knows, across partitions (read offline)."""
    import botocore.session

    session = botocore.session.get_session()
    regions: set[str] = set()
    for partition in session.get_available_partitions():
        regions.update(session.get_available_regions("ec2", partition_name=partition))
    return frozenset(regions)


@cache
def known_instance_types() -> frozenset[str]:
    """Every EC2 instance type in botocore's EC2 service model (the ``InstanceType`` enum, read offline)."""
    import botocore.loaders

    model = botocore.loaders.create_loader().load_service_model("ec2", "service-2")
    return frozenset(model["shapes"]["InstanceType"]["enum"])


# The block sizes AWS accepts for a VPC's primary block and for a subnet (netmask /16 to /28).
MIN_PREFIX = 16
MAX_PREFIX = 28


def block_size_issue(value: str, what: str) -> str | None:
    """Why AWS would refuse ``value`` (a valid IPv4 CIDR) as a VPC or subnet block, or ``None``."""
    prefix = ipaddress.IPv4Network(value).prefixlen
    if MIN_PREFIX <= prefix <= MAX_PREFIX:
        return None
    return f"{value}: a {what} block must be between /{MIN_PREFIX} and /{MAX_PREFIX} (AWS refuses /{prefix})"


# What AWS will refuse is checked as a semantic issue (when a manifest is loaded and when an object is
# written), not by field validators, which also run when a stored object is read: an object stored by an
# older version must stay readable, and deletable, after a rule is added.


def check_cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError("not a valid CIDR") from exc
    if network.version != 4:
        raise ValueError("not a valid CIDR: only IPv4 blocks are supported")
    return value


MAX_TAGS = 50
"""Tags AWS allows on one resource (EC2, ELBv2 and IAM alike)."""
OWN_TAGS = 6
"""The most tags capa-py puts on one resource itself: the cluster's owned tag, the cloud provider's (shared
resources), CAPA's role, capa-py's role, the store and ``Name`` (``capa_py.engine.tags``)."""
MAX_USER_TAGS = MAX_TAGS - OWN_TAGS
_TAG_PUNCTUATION = frozenset(" _.:/=+-@")


def _tag_character_issue(text: str) -> str | None:
    """Why ``text`` cannot be a tag key or value on every service capa-py tags; None when it can. ELBv2's
    and IAM's pattern is the narrowest: letters, spaces, numbers and ``_ . : / = + - @`` (Unicode
    categories L, Z and N)."""
    for char in text:
        if char in _TAG_PUNCTUATION or unicodedata.category(char)[0] in "LNZ":
            continue
        allowed = "letters, numbers, spaces and _ . : / = + - @"
        return f"character {char!r} (U+{ord(char):04X}) is not allowed ({allowed})"
    return None


def check_tags(tags: dict[str, str]) -> dict[str, str]:
    if len(tags) > MAX_USER_TAGS:
        raise ValueError(
            f"{len(tags)} tags: at most {MAX_USER_TAGS} (AWS allows {MAX_TAGS} per resource and capa-py "
            f"adds up to {OWN_TAGS} of its own)"
        )
    for key, value in tags.items():
        if not key or len(key) > 128:
            raise ValueError(f"tag key {key!r} must be 1 to 128 characters")
        if key.lower().startswith(_RESERVED_TAG_PREFIX):
            raise ValueError(f"tag key {key!r} uses the reserved prefix 'aws:'")
        if len(value) > 256:
            raise ValueError(f"tag value for {key!r} is longer than 256 characters")
        issue = _tag_character_issue(key)
        if issue is not None:
            raise ValueError(f"tag key {key!r}: {issue}")
        issue = _tag_character_issue(value)
        if issue is not None:
            raise ValueError(f"tag value for {key!r}: {issue}")
    return tags


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


class AWSClusterSpec(KubeModel):
    region: str
    ssh_key_name: str | None = None
    control_plane_endpoint: APIEndpoint = Field(default_factory=APIEndpoint)
    additional_tags: dict[str, str] = Field(default_factory=dict)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    control_plane_load_balancer: AWSLoadBalancerSpec = Field(default_factory=AWSLoadBalancerSpec)

    @field_validator("region")
    @classmethod
    def _check_region(cls, value: str) -> str:
        if not _REGION.match(value) or value not in known_regions():
            raise ValueError(f"unknown AWS region {value!r}")
        return value

    _check_tags = field_validator("additional_tags")(check_tags)


class RecordedResource(KubeModel):
    """An AWS resource the engine created or adopted, recorded right after its create returned."""

    kind: str
    id: str
    strategy: str | None = None
    tags_complete: bool = True
    created_at: Time | None = None


class IntentRecord(KubeModel):
    """Written before a create that has no tag, token or natural key to find its result again."""

    kind: str
    started_at: Time
    fingerprint: str
    request: dict[str, str] = Field(default_factory=dict)
    examined_at: Time | None = None
    """When a reconcile first looked for the resource the interrupted create may have made."""
    seen: list[str] = Field(default_factory=list)
    """The candidates that first examination saw; later ones consider no other (a look-alike appearing
    later was not made by the interrupted create)."""


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


class NetworkStatus(KubeModel):
    vpc_id: str | None = None
    internet_gateway_id: str | None = None
    subnets: list[SubnetStatus] = Field(default_factory=list)
    security_groups: dict[str, SecurityGroupStatus] = Field(default_factory=dict)
    api_server_load_balancer: LoadBalancerStatus | None = None


class AWSClusterStatus(InfrastructureStatus):
    network: NetworkStatus = Field(default_factory=NetworkStatus)
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


class AMIReference(KubeModel):
    id: str | None = None


class AWSResourceReference(KubeModel):
    id: str | None = None


class Volume(KubeModel):
    size: int = Field(default=8, ge=8, le=16384)
    type: Literal["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"] = "gp3"
    iops: int | None = Field(default=None, ge=100)
    encrypted: bool | None = None

    @model_validator(mode="after")
    def _provisioned_types_need_iops(self) -> Volume:
        if self.type in ("io1", "io2") and self.iops is None:
            raise ValueError(f"iops is required for volume type {self.type}")
        return self


class AWSMachineSpec(KubeModel):
    provider_id: str | None = Field(default=None, alias="providerID")
    instance_id: str | None = Field(default=None, alias="instanceID")
    ami: AMIReference = Field(default_factory=AMIReference)
    instance_type: str
    additional_tags: dict[str, str] = Field(default_factory=dict)
    iam_instance_profile: str | None = None
    public_ip: bool | None = Field(default=None, alias="publicIP")
    additional_security_groups: list[AWSResourceReference] = Field(default_factory=list)
    subnet: AWSResourceReference | None = None
    ssh_key_name: str | None = None
    root_volume: Volume | None = None

    _check_tags = field_validator("additional_tags")(check_tags)


InstanceState = Literal["pending", "running", "shutting-down", "terminated", "stopping", "stopped"]


class AWSMachineStatus(InfrastructureStatus):
    instance_id: str | None = Field(default=None, alias="instanceID")
    provider_id: str | None = Field(default=None, alias="providerID")
    instance_state: InstanceState | None = None
    addresses: list[MachineAddress] = Field(default_factory=list)
    failure_reason: str | None = None
    failure_message: str | None = None
    observed_generation: int | None = None
    resources: dict[str, RecordedResource] = Field(default_factory=dict)
    intents: dict[str, IntentRecord] = Field(default_factory=dict)


class AWSMachine(KubeObject):
    API_VERSION: ClassVar[str] = INFRA_API_VERSION
    KIND: ClassVar[str] = "AWSMachine"
    PLURAL: ClassVar[str] = "awsmachines"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("awsm",)

    spec: AWSMachineSpec
    status: AWSMachineStatus = Field(default_factory=AWSMachineStatus)

    MUTABLE_SPEC_FIELDS: ClassVar[tuple[str, ...]] = (
        "providerID",
        "instanceID",
        "additionalTags",
        "additionalSecurityGroups",
    )
    """What Cluster API Provider AWS lets an update change; every other spec field is immutable."""

    def immutable_issues(self, old: AWSMachine) -> list[FieldIssue]:
        """CAPA's rule, once there is an instance to protect: until the machine has one (recorded, or an
        interrupted create's intent), its spec is still a request that can be corrected — a bad AMI, an
        instance type AWS refused — and the next reconcile launches from the corrected spec."""
        if not (old.status.instance_id or old.status.resources or old.status.intents):
            return []
        return immutable(
            "spec", without(old.spec, self.MUTABLE_SPEC_FIELDS), without(self.spec, self.MUTABLE_SPEC_FIELDS)
        )

    def semantic_issues(self) -> list[FieldIssue]:
        issues: list[FieldIssue] = []
        if not self.being_deleted and self.spec.instance_type not in known_instance_types():
            issues.append(
                FieldIssue(
                    path="spec.instanceType",
                    message=(
                        f"not an EC2 instance type: {self.spec.instance_type!r} "
                        "(expected one in botocore's EC2 model, e.g. t3.medium)"
                    ),
                )
            )
        if self.spec.ami.id is None and not self.being_deleted:
            issues.append(FieldIssue(path="spec.ami.id", message="required (capa-py does not look AMIs up)"))
        elif self.spec.ami.id is not None and not re.fullmatch(r"ami-[0-9a-f]{8,17}", self.spec.ami.id):
            issues.append(FieldIssue(path="spec.ami.id", message=f"not an AMI id: {self.spec.ami.id!r}"))
        volume = self.spec.root_volume
        if volume is not None and volume.iops is not None and volume.type not in ("io1", "io2", "gp3"):
            issues.append(
                FieldIssue(
                    path="spec.rootVolume.iops", message=f"iops cannot be set for volume type {volume.type}"
                )
            )
        return issues
