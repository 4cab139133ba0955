"""Cluster API's ``MachinePool`` (``cluster.x-k8s.io/v1beta1``) and Cluster API Provider AWS's
``AWSMachinePool`` (``infrastructure.cluster.x-k8s.io/v1beta2``): a group of identical workers the cloud
scales, an Auto Scaling group over a launch template.

A MachinePool names its bootstrap data (``spec.template.spec.bootstrap.dataSecretName``: capa-py's core has
no bootstrap provider) and its AWSMachinePool (``spec.template.spec.infrastructureRef``), and asks for
``spec.replicas`` (default 1). The AWSMachinePool bounds them (``minSize``, ``maxSize``), says where
(``subnets`` or ``availabilityZones``, else the cluster's private subnets) and what to launch
(``awsLaunchTemplate``). Its controller writes what AWS reports: ``spec.providerIDList`` (where CAPA keeps
it),
``status.replicas``, ``status.instances``, ``status.launchTemplateID`` and ``status.launchTemplateVersion``.

Field names are CAPA's. ``refreshPreferences`` says whether and how an instance refresh replaces the
instances when the group moves to a new launch template version (``status.instanceRefresh`` records it).
``mixedInstancesPolicy`` lets the group launch several instance types, On-Demand and Spot;
``lifecycleHooks`` are put on the group (and those the pool put and no longer declares, deleted).
What CAPA has and capa-py does not build yet (``spotMarketOptions`` in pools, warm pools, the refresh
preferences beyond the four above) is absent from the models, not accepted and ignored.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from capa_py.api.aws_checks import check_tags, known_instance_types
from capa_py.api.aws_common import INFRA_API_VERSION, IntentRecord, RecordedResource
from capa_py.api.aws_machine import AWSResourceReference, LaunchFields, launch_issues
from capa_py.api.cluster import CLUSTER_API_VERSION, NodeReference
from capa_py.api.contract import InfrastructureStatus
from capa_py.api.image_lookup import ResolvedImage
from capa_py.api.immutable import immutable
from capa_py.api.machine_template import ReplicatedSpec, default_replicated
from capa_py.api.meta import Condition, FieldIssue, KubeModel, KubeObject

AWSMACHINEPOOL_FINALIZER = "awsmachinepool.infrastructure.cluster.x-k8s.io"
MACHINEPOOL_FINALIZER = "machinepool.cluster.x-k8s.io"
MACHINE_POOL_NAME_LABEL = "cluster.x-k8s.io/pool-name"

_LAUNCH_TEMPLATE_NAME = re.compile(r"^[a-zA-Z0-9().\-/_]{3,128}$")


def _issue(path: str, message: str) -> FieldIssue:
    return FieldIssue(path=path, message=message)


# -- MachinePool (Cluster API core) ------------------------------------------------------------------------


class MachinePoolSpec(ReplicatedSpec):
    provider_id_list: list[str] = Field(default_factory=list, alias="providerIDList")
    failure_domains: list[str] = Field(default_factory=list)


MachinePoolPhase = Literal[
    "Pending",
    "Provisioning",
    "Provisioned",
    "Running",
    "ScalingUp",
    "ScalingDown",
    "Scaling",
    "Deleting",
    "Failed",
    "Unknown",
]


class MachinePoolStatus(KubeModel):
    node_refs: list[NodeReference] = Field(default_factory=list)
    replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    unavailable_replicas: int = 0
    failure_reason: str | None = None
    failure_message: str | None = None
    phase: MachinePoolPhase | None = None
    bootstrap_ready: bool = False
    infrastructure_ready: bool = False
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)


class MachinePool(KubeObject):
    """Workers scaled as one by the infrastructure (an Auto Scaling group on AWS)."""

    API_VERSION: ClassVar[str] = CLUSTER_API_VERSION
    KIND: ClassVar[str] = "MachinePool"
    PLURAL: ClassVar[str] = "machinepools"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("mp",)

    spec: MachinePoolSpec
    status: MachinePoolStatus = Field(default_factory=MachinePoolStatus)

    def _default(self) -> None:
        default_replicated(self, self.spec)

    def prepare_for_create(self) -> None:
        self._default()

    def prepare_for_update(self) -> None:
        self._default()

    def semantic_issues(self) -> list[FieldIssue]:
        if self.being_deleted:
            return []
        found: list[FieldIssue] = []
        spec = self.spec.template.spec
        if spec.bootstrap.config_ref is not None:
            found.append(
                _issue(
                    "spec.template.spec.bootstrap.configRef",
                    "capa-py's Cluster API core has no bootstrap provider to make bootstrap data from a "
                    "config: set spec.template.spec.bootstrap.dataSecretName (a Secret holding the data)",
                )
            )
        ref = spec.infrastructure_ref
        if not ref.api_version or not ref.kind or not ref.name:
            found.append(
                _issue("spec.template.spec.infrastructureRef", "apiVersion, kind and name are required")
            )
        return found

    def immutable_issues(self, old: MachinePool) -> list[FieldIssue]:
        return immutable("spec.clusterName", old.spec.cluster_name, self.spec.cluster_name)

    def settled(self) -> bool | None:
        """Done when the controller has seen this generation and the desired instances are in service."""
        status = self.status
        return (
            status.observed_generation is not None
            and self.metadata.generation is not None
            and status.observed_generation >= self.metadata.generation
            and status.phase == "Running"
            and status.replicas == self.spec.desired
        )

    def infrastructure_name(self, kind: str) -> str | None:
        ref = self.spec.template.spec.infrastructure_ref
        return ref.name if ref.kind == kind and ref.name else None


# -- AWSMachinePool (Cluster API Provider AWS) -------------------------------------------------------------


class AWSLaunchTemplate(LaunchFields):
    """What the pool's instances are launched with (CAPA's ``awsLaunchTemplate``)."""

    name: str | None = Field(
        default=None,
        description="The launch template's name; default: <namespace>-<AWSMachinePool name>.",
    )


class InstancesDistribution(KubeModel):
    """How the group mixes On-Demand and Spot capacity (CAPA's ``instancesDistribution``, with its
    defaults)."""

    on_demand_allocation_strategy: Literal["prioritized", "lowest-price"] = "prioritized"
    spot_allocation_strategy: Literal[
        "lowest-price", "capacity-optimized", "capacity-optimized-prioritized", "price-capacity-optimized"
    ] = "lowest-price"
    on_demand_base_capacity: int = Field(default=0, ge=0)
    on_demand_percentage_above_base_capacity: int = Field(default=100, ge=0, le=100)


class InstanceTypeOverride(KubeModel):
    """An instance type the group may launch instead of the template's (CAPA's ``overrides`` items)."""

    instance_type: str


class MixedInstancesPolicy(KubeModel):
    """The group launches several instance types, On-Demand and Spot (CAPA's ``mixedInstancesPolicy``)."""

    instances_distribution: InstancesDistribution | None = None
    overrides: list[InstanceTypeOverride] = Field(default_factory=list)


_GO_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def duration_seconds(text: str) -> float | None:
    """Seconds in a Go duration of hours, minutes and seconds (``"5m"``, ``"1h30m"``, ``"90s"``), or None."""
    match = _GO_DURATION.match(text.strip())
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


class AWSLifecycleHook(KubeModel):
    """A lifecycle hook on the pool's group (CAPA's ``lifecycleHooks`` items; AWS's ``PutLifecycleHook``)."""

    name: str = Field(min_length=1, max_length=255)
    lifecycle_transition: Literal[
        "autoscaling:EC2_INSTANCE_LAUNCHING", "autoscaling:EC2_INSTANCE_TERMINATING"
    ]
    notification_target_arn: str | None = Field(default=None, alias="notificationTargetARN")
    role_arn: str | None = Field(default=None, alias="roleARN")
    heartbeat_timeout: str | None = Field(
        default=None,
        description="How long an instance waits in the hook's state, as a duration (e.g. 5m); 30s to 2h. "
        "AWS's default (one hour) when unset.",
    )
    default_result: Literal["CONTINUE", "ABANDON"] | None = None
    notification_metadata: str | None = Field(default=None, max_length=1023)

    @property
    def heartbeat_seconds(self) -> int | None:
        seconds = duration_seconds(self.heartbeat_timeout) if self.heartbeat_timeout else None
        return int(seconds) if seconds is not None else None


class RefreshPreferences(KubeModel):
    """When and how the pool's instances are replaced after the group moves to a new launch template
    version (CAPA's ``refreshPreferences``; AWS's ``StartInstanceRefresh``)."""

    disable: bool = Field(
        default=False,
        description="Start no instance refresh when the launch template changes (running instances keep "
        "the version they were launched from).",
    )
    strategy: Literal["Rolling"] | None = Field(
        default=None, description="The refresh strategy; Rolling (the only one AWS has) when unset."
    )
    instance_warmup: int | None = Field(
        default=None,
        ge=0,
        description="Seconds until a new instance counts as in service; AWS's default when unset (the "
        "group's health check grace period).",
    )
    min_healthy_percentage: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="The percentage of the desired capacity that must stay healthy during the refresh; AWS's "
        "default (90) when unset.",
    )


class InstanceRefreshStatus(KubeModel):
    """What the pool knows of the refresh of its instances."""

    launch_template_version: str = Field(
        description="The launch template version the pool's instances were launched with or last refreshed "
        "to (or, when refreshes are disabled, the version the group moved to)."
    )
    instance_refresh_id: str | None = Field(
        default=None, alias="instanceRefreshID", description="The refresh started for that version."
    )
    status: str | None = Field(default=None, description="The refresh's status as AWS last reported it.")


class AWSMachinePoolInstanceStatus(KubeModel):
    instance_id: str = Field(alias="instanceID")
    instance_state: str | None = None
    availability_zone: str | None = None


class AWSMachinePoolSpec(KubeModel):
    provider_id: str | None = Field(default=None, alias="providerID")
    min_size: int = Field(default=1, ge=0)
    max_size: int = Field(ge=1)
    availability_zones: list[str] = Field(default_factory=list)
    subnets: list[AWSResourceReference] = Field(default_factory=list)
    additional_tags: dict[str, str] = Field(default_factory=dict)
    aws_launch_template: AWSLaunchTemplate = Field(alias="awsLaunchTemplate")
    capacity_rebalance: bool = False
    refresh_preferences: RefreshPreferences | None = None
    mixed_instances_policy: MixedInstancesPolicy | None = None
    lifecycle_hooks: list[AWSLifecycleHook] = Field(default_factory=list)
    provider_id_list: list[str] = Field(default_factory=list, alias="providerIDList")

    _check_tags = field_validator("additional_tags")(check_tags)


class AWSMachinePoolStatus(InfrastructureStatus):
    replicas: int = 0
    instances: list[AWSMachinePoolInstanceStatus] = Field(default_factory=list)
    launch_template_id: str | None = Field(default=None, alias="launchTemplateID")
    launch_template_version: str | None = None
    asg_status: str | None = None
    instance_refresh: InstanceRefreshStatus | None = None
    lifecycle_hooks: list[str] = Field(
        default_factory=list,
        description="The lifecycle hooks the controller put on the group (those it deletes when the spec "
        "drops them).",
    )
    failure_reason: str | None = None
    failure_message: str | None = None
    observed_generation: int | None = None
    resources: dict[str, RecordedResource] = Field(default_factory=dict)
    intents: dict[str, IntentRecord] = Field(default_factory=dict)
    ami: ResolvedImage | None = Field(
        default=None,
        description="The image an AMI lookup chose (no lookup when the template's ami.id is set).",
    )


class AWSMachinePool(KubeObject):
    API_VERSION: ClassVar[str] = INFRA_API_VERSION
    KIND: ClassVar[str] = "AWSMachinePool"
    PLURAL: ClassVar[str] = "awsmachinepools"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("awsmp",)

    spec: AWSMachinePoolSpec
    status: AWSMachinePoolStatus = Field(default_factory=AWSMachinePoolStatus)

    @property
    def launch_template_name(self) -> str:
        return self.spec.aws_launch_template.name or f"{self.namespace or 'default'}-{self.name}"

    def semantic_issues(self) -> list[FieldIssue]:
        if self.being_deleted:
            return []
        spec = self.spec
        template = spec.aws_launch_template
        found: list[FieldIssue] = []
        if spec.min_size > spec.max_size:
            found.append(
                _issue("spec.minSize", f"must not exceed spec.maxSize ({spec.min_size} > {spec.max_size})")
            )
        found += launch_issues(template, "spec.awsLaunchTemplate")
        if template.name is not None and not _LAUNCH_TEMPLATE_NAME.match(template.name):
            found.append(
                _issue(
                    "spec.awsLaunchTemplate.name",
                    "must be 3 to 128 characters of letters, digits and ( ) . - / _",
                )
            )
        for index, override in enumerate(
            spec.mixed_instances_policy.overrides if spec.mixed_instances_policy else []
        ):
            if override.instance_type not in known_instance_types():
                found.append(
                    _issue(
                        f"spec.mixedInstancesPolicy.overrides[{index}].instanceType",
                        f"not an EC2 instance type: {override.instance_type!r}",
                    )
                )
        names = [h.name for h in spec.lifecycle_hooks]
        for index, hook in enumerate(spec.lifecycle_hooks):
            path = f"spec.lifecycleHooks[{index}]"
            if names.count(hook.name) > 1:
                found.append(_issue(f"{path}.name", f"{hook.name!r} is given more than once"))
            if hook.heartbeat_timeout is not None:
                seconds = duration_seconds(hook.heartbeat_timeout)
                if seconds is None or not 30 <= seconds <= 7200:
                    found.append(
                        _issue(
                            f"{path}.heartbeatTimeout",
                            f"must be a duration from 30s to 2h (e.g. 5m), not {hook.heartbeat_timeout!r}",
                        )
                    )
            if (hook.notification_target_arn is None) != (hook.role_arn is None):
                found.append(
                    _issue(f"{path}.roleARN", "give notificationTargetARN and roleARN together, or neither")
                )
        if spec.subnets and spec.availability_zones:
            found.append(
                _issue("spec.subnets", "give either spec.subnets or spec.availabilityZones, not both")
            )
        for index, subnet in enumerate(spec.subnets):
            if not subnet.id or not subnet.id.startswith("subnet-"):
                found.append(_issue(f"spec.subnets[{index}].id", f"not a subnet id: {subnet.id!r}"))
        for index, group in enumerate(template.additional_security_groups):
            if not group.id or not group.id.startswith("sg-"):
                found.append(
                    _issue(
                        f"spec.awsLaunchTemplate.additionalSecurityGroups[{index}].id",
                        f"not a security group id: {group.id!r}",
                    )
                )
        return found

    def immutable_issues(self, old: AWSMachinePool) -> list[FieldIssue]:
        """The launch template's name is its key in AWS: renaming it would orphan the old one."""
        return (
            immutable("spec.awsLaunchTemplate.name", old.launch_template_name, self.launch_template_name)
            if old.status.resources
            else []
        )


MACHINE_POOL_KINDS: tuple[type[KubeObject], ...] = (MachinePool, AWSMachinePool)
