"""Cluster API Provider AWS's ``AWSMachine`` (``infrastructure.cluster.x-k8s.io/v1beta2``): its spec (the
AMI, the instance type, the root volume, ...), its status, and the rules an update and a write must
follow."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from capa_py.api.aws_checks import check_tags, known_instance_types
from capa_py.api.aws_common import INFRA_API_VERSION, IntentRecord, RecordedResource
from capa_py.api.cluster import MachineAddress
from capa_py.api.contract import InfrastructureStatus
from capa_py.api.image_lookup import ResolvedImage, base_os_field, format_field, lookup_issues, org_field
from capa_py.api.immutable import immutable, without
from capa_py.api.meta import FieldIssue, KubeModel, KubeObject, keep_when_empty


class AMIReference(KubeModel):
    id: str | None = Field(
        default=None,
        description=(
            "The AMI to launch. When not set, the newest image matching the lookup fields "
            "(imageLookupFormat, imageLookupOrg, imageLookupBaseOS) for the Machine's spec.version is "
            "looked up."
        ),
    )


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


class SpotMarketOptions(KubeModel):
    """Launch the machine as a Spot Instance (Cluster API Provider AWS's field): a one-time request that
    AWS terminates when it interrupts the instance."""

    max_price: str | None = None
    """The most to pay per hour, in US dollars (a decimal, more than 0.001); unset: up to the On-Demand
    price."""

    @field_validator("max_price")
    @classmethod
    def _a_price(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            price = Decimal(value)
        except InvalidOperation:
            raise ValueError(f"not a price in US dollars: {value!r} (e.g. '0.05')") from None
        if not price.is_finite() or price <= Decimal("0.001"):
            raise ValueError(f"must be more than 0.001 (US dollars per hour), not {value!r}")
        return value


SECRETS_MANAGER = "secrets-manager"
SSM_PARAMETER_STORE = "ssm-parameter-store"
_SECRET_NAME = re.compile(r"[A-Za-z0-9/_+=.@-]{1,500}")
_PARAMETER_PREFIX = re.compile(r"/[A-Za-z0-9/_.-]{1,1000}")
_RESERVED_PARAMETER_PREFIX = re.compile(r"/?(aws|ssm)", re.IGNORECASE)
"""Parameter Store refuses names that begin with aws or ssm (with or without the leading slash)."""


IGNITION_VERSIONS = ("2.3", "3.0", "3.1", "3.2", "3.3", "3.4")
"""The Ignition config versions a machine's pointer config may be written in (CAPA's enum)."""
DEFAULT_IGNITION_VERSION = "2.3"
CLUSTER_OBJECT_STORE = "ClusterObjectStore"
UNENCRYPTED_USER_DATA = "UnencryptedUserData"


class Ignition(KubeModel):
    """Cluster API Provider AWS's ``spec.ignition``: how a machine whose bootstrap data is Ignition (the
    bootstrap Secret's ``format`` key is ``ignition``) gets it. CAPA's ``proxy`` and ``tls`` are not built."""

    version: Literal["2.3", "3.0", "3.1", "3.2", "3.3", "3.4"] = Field(
        default="2.3",
        description="The Ignition config version of the user data that points at the stored data.",
    )
    storage_type: Literal["ClusterObjectStore", "UnencryptedUserData"] = Field(
        default="ClusterObjectStore",
        description="ClusterObjectStore: the data goes to the cluster's spec.s3Bucket, the user data is an "
        "Ignition config replacing itself with it; UnencryptedUserData: the data is the user data as it is.",
    )


class CloudInit(KubeModel):
    """Where the instance's bootstrap data goes (Cluster API Provider AWS's ``cloudInit``): by default into
    AWS Secrets Manager, fetched at boot by a small user-data script; ``insecureSkipSecretsManager`` puts it
    in the user data as it is."""

    insecure_skip_secrets_manager: bool = Field(
        default=False,
        description=(
            "Put the bootstrap data in the instance's user data as it is (readable by anyone allowed "
            "ec2:DescribeInstanceAttribute, at most 16 KB) instead of in AWS Secrets Manager."
        ),
    )
    secret_count: int | None = Field(
        default=None,
        ge=0,
        description=(
            "The number of secrets the bootstrap data is stored in; set by the controller, cleared once "
            "they are deleted."
        ),
    )
    secret_prefix: str | None = Field(
        default=None,
        description=(
            "The secrets' name prefix (names are <prefix>-<n>; with ssm-parameter-store, <prefix>/<n>); "
            "set by the controller (aws.cluster.x-k8s.io/<the AWSMachine's uid>, or /cluster.x-k8s.io/<uid>) "
            "and kept across a move."
        ),
    )
    secure_secrets_backend: Literal["secrets-manager", "ssm-parameter-store"] | None = Field(
        default=None,
        description=(
            "secrets-manager (the default), or ssm-parameter-store: SecureString parameters "
            "/cluster.x-k8s.io/<the AWSMachine's uid>/<n>, read and deleted by the instance at boot."
        ),
    )


class LaunchFields(KubeModel):
    """What an instance is launched with, the same fields on an AWSMachine's spec and an AWSMachinePool's
    ``awsLaunchTemplate`` (as in Cluster API Provider AWS)."""

    ami: AMIReference = Field(default_factory=AMIReference)
    instance_type: str
    iam_instance_profile: str | None = None
    additional_security_groups: list[AWSResourceReference] = Field(default_factory=list)
    ssh_key_name: str | None = None
    root_volume: Volume | None = None
    image_lookup_format: str | None = format_field()
    image_lookup_org: str | None = org_field()
    image_lookup_base_os: str | None = base_os_field()


def launch_issues(fields: LaunchFields, path: str) -> list[FieldIssue]:
    """What is wrong with the launch fields at ``path`` (``spec``, ``spec.awsLaunchTemplate``): the instance
    type, the AMI id, the lookup settings, the root volume."""
    issues: list[FieldIssue] = []
    if fields.instance_type not in known_instance_types():
        issues.append(
            FieldIssue(
                path=f"{path}.instanceType",
                message=(
                    f"not an EC2 instance type: {fields.instance_type!r} "
                    "(expected one in botocore's EC2 model, e.g. t3.medium)"
                ),
            )
        )
    if fields.ami.id is not None and not re.fullmatch(r"ami-[0-9a-f]{8,17}", fields.ami.id):
        issues.append(FieldIssue(path=f"{path}.ami.id", message=f"not an AMI id: {fields.ami.id!r}"))
    issues += lookup_issues(fields, path)
    volume = fields.root_volume
    if volume is not None and volume.iops is not None and volume.type not in ("io1", "io2", "gp3"):
        issues.append(
            FieldIssue(
                path=f"{path}.rootVolume.iops", message=f"iops cannot be set for volume type {volume.type}"
            )
        )
    return issues


class AWSMachineSpec(LaunchFields):
    provider_id: str | None = Field(default=None, alias="providerID")
    instance_id: str | None = Field(default=None, alias="instanceID")
    additional_tags: dict[str, str] = Field(default_factory=dict)
    public_ip: bool | None = Field(default=None, alias="publicIP")
    subnet: AWSResourceReference | None = None
    spot_market_options: SpotMarketOptions | None = Field(
        default=None, alias=keep_when_empty("spotMarketOptions")
    )
    cloud_init: CloudInit | None = None
    ignition: Ignition | None = Field(
        default=None,
        description="For Ignition bootstrap data (format ignition): its version and where it is stored; "
        "default version 2.3 in the cluster's S3 bucket.",
    )

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
    ami: ResolvedImage | None = Field(
        default=None,
        description=(
            "The image an AMI lookup chose (no lookup when spec.ami.id is set), kept for the machine's life."
        ),
    )


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
        instance type AWS refused — and the next reconcile launches from the corrected spec. Its bootstrap
        data (secrets, parameters), stored before the launch, protects nothing."""
        kinds = [r.kind for r in old.status.resources.values()]
        kinds += [i.kind for i in old.status.intents.values()]
        launched = old.status.instance_id or "instance" in kinds
        if not launched:
            return []
        return immutable("spec", _immutable_part(old.spec), _immutable_part(self.spec))

    def semantic_issues(self) -> list[FieldIssue]:
        issues = launch_issues(self.spec, "spec") + _cloud_init_issues(self.spec.cloud_init)
        if self.being_deleted:
            # An instance type botocore no longer knows must not stop a machine from being deleted.
            issues = [i for i in issues if i.path != "spec.instanceType"]
        return issues


MUTABLE_CLOUD_INIT_FIELDS = ("secretCount", "secretPrefix")
"""What the controller writes into ``spec.cloudInit`` (as Cluster API Provider AWS lets it)."""


def _immutable_part(spec: AWSMachineSpec) -> dict[str, object]:
    """The spec without what may change; a ``cloudInit`` left with nothing but its defaults counts as
    absent (the controller writes ``secretPrefix`` into a spec that had none)."""
    data = without(spec, AWSMachine.MUTABLE_SPEC_FIELDS)
    cloud_init = data.pop("cloudInit", None) or {}
    kept = {
        name: value
        for name, value in cloud_init.items()
        if name not in MUTABLE_CLOUD_INIT_FIELDS and value not in (None, False)
    }
    if kept:
        data["cloudInit"] = kept
    return data


def _cloud_init_issues(cloud_init: CloudInit | None) -> list[FieldIssue]:
    if cloud_init is None:
        return []
    issues: list[FieldIssue] = []
    prefix = cloud_init.secret_prefix
    if cloud_init.secure_secrets_backend == SSM_PARAMETER_STORE:
        if prefix is not None and not (
            _PARAMETER_PREFIX.fullmatch(prefix) and not _RESERVED_PARAMETER_PREFIX.match(prefix)
        ):
            issues.append(
                FieldIssue(
                    path="spec.cloudInit.secretPrefix",
                    message=(
                        f"not a Parameter Store name prefix: {prefix!r} (/ then letters, digits and /_.- "
                        "only, at most 1000 characters, not beginning with aws or ssm)"
                    ),
                )
            )
    elif prefix is not None and not _SECRET_NAME.fullmatch(prefix):
        issues.append(
            FieldIssue(
                path="spec.cloudInit.secretPrefix",
                message=(
                    f"not a Secrets Manager name prefix: {prefix!r} (letters, digits and /_+=.@- only, "
                    "at most 500 characters)"
                ),
            )
        )
    return issues
