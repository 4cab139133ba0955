"""Auto Scaling groups (``CreateAutoScalingGroup``): a machine pool's instances, launched from a template.

The create takes ``Tags`` (applied atomically) and a group name unique in the account and region, and no
idempotency token: class 1 with a natural key. The group's id is its name (the ARN is reported as an
attribute). ``CreateAutoScalingGroup`` returns nothing, so :meth:`AutoScalingGroup.create` describes the
group it made.

Tags are propagated at launch, so the pool's instances carry the cluster's owned tag (and the
``aws:autoscaling:groupName`` tag AWS adds) — the audit leaves instances of a live group to the group.

Deleting uses ``ForceDelete``: AWS terminates the instances and removes the group once they are gone; until
then the group reports the status ``Delete in progress``, which :meth:`AutoScalingGroup.describe_by_id`
reports as the state ``deleting``. Callers wait for the group to disappear before deleting its launch
template (a template in use by a group cannot be deleted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from capa_py.aws.errors import InvalidRequest, NotFound
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare
from capa_py.engine.traits import Traits

IAM_ACTIONS: tuple[str, ...] = (
    "autoscaling:CreateAutoScalingGroup",
    "autoscaling:CreateOrUpdateTags",
    "autoscaling:DeleteAutoScalingGroup",
    "autoscaling:DeleteLifecycleHook",
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeInstanceRefreshes",
    "autoscaling:DescribeLifecycleHooks",
    "autoscaling:PutLifecycleHook",
    "autoscaling:StartInstanceRefresh",
    "autoscaling:UpdateAutoScalingGroup",
)

RESOURCE_TYPE = "auto-scaling-group"
ACTIVE_REFRESH_STATES = frozenset({"Pending", "InProgress", "Cancelling", "RollbackInProgress", "Baking"})
"""Instance refresh states in which AWS refuses to start another refresh on the group."""
DELETING = "deleting"
_DELETE_IN_PROGRESS = "Delete in progress"


@dataclass(frozen=True)
class MixedInstances:
    """A mixed instances policy: the On-Demand/Spot distribution and the instance types that override the
    template's (the template itself is the group's)."""

    on_demand_allocation_strategy: str
    spot_allocation_strategy: str
    on_demand_base_capacity: int
    on_demand_percentage_above_base_capacity: int
    instance_types: tuple[str, ...] = ()

    def policy(self, launch_template_id: str, version: str) -> dict[str, Any]:
        """``MixedInstancesPolicy`` as Create/UpdateAutoScalingGroup take it."""
        template: dict[str, Any] = {
            "LaunchTemplateSpecification": {"LaunchTemplateId": launch_template_id, "Version": version}
        }
        if self.instance_types:
            template["Overrides"] = [{"InstanceType": t} for t in self.instance_types]
        return {
            "LaunchTemplate": template,
            "InstancesDistribution": {
                "OnDemandAllocationStrategy": self.on_demand_allocation_strategy,
                "SpotAllocationStrategy": self.spot_allocation_strategy,
                "OnDemandBaseCapacity": self.on_demand_base_capacity,
                "OnDemandPercentageAboveBaseCapacity": self.on_demand_percentage_above_base_capacity,
            },
        }


def _mixed(policy: Mapping[str, Any] | None) -> MixedInstances | None:
    if not policy:
        return None
    distribution = policy.get("InstancesDistribution") or {}
    overrides = (policy.get("LaunchTemplate") or {}).get("Overrides") or []
    return MixedInstances(
        on_demand_allocation_strategy=str(distribution.get("OnDemandAllocationStrategy", "")),
        spot_allocation_strategy=str(distribution.get("SpotAllocationStrategy", "")),
        on_demand_base_capacity=int(distribution.get("OnDemandBaseCapacity", 0)),
        on_demand_percentage_above_base_capacity=int(
            distribution.get("OnDemandPercentageAboveBaseCapacity", 100)
        ),
        instance_types=tuple(o["InstanceType"] for o in overrides if o.get("InstanceType")),
    )


@dataclass(frozen=True)
class AutoScalingGroupDesired:
    name: str
    launch_template_id: str
    launch_template_version: str
    min_size: int
    max_size: int
    desired_capacity: int
    subnet_ids: tuple[str, ...]
    capacity_rebalance: bool = False
    mixed_instances: MixedInstances | None = None

    def template_params(self) -> dict[str, Any]:
        """The group's template: ``LaunchTemplate``, or with a mixed instances policy, the policy (which then
        names the template: AWS takes one or the other)."""
        if self.mixed_instances is not None:
            policy = self.mixed_instances.policy(self.launch_template_id, self.launch_template_version)
            return {"MixedInstancesPolicy": policy}
        return {
            "LaunchTemplate": {
                "LaunchTemplateId": self.launch_template_id,
                "Version": self.launch_template_version,
            }
        }


def _group(item: Mapping[str, Any]) -> Observed:
    policy = item.get("MixedInstancesPolicy")
    template = item.get("LaunchTemplate") or (
        ((policy or {}).get("LaunchTemplate") or {}).get("LaunchTemplateSpecification") or {}
    )
    status = item.get("Status")
    return Observed(
        id=item["AutoScalingGroupName"],
        tags={t["Key"]: t.get("Value", "") for t in item.get("Tags", [])},
        state=DELETING if status == _DELETE_IN_PROGRESS else "active",
        created_at=item.get("CreatedTime"),
        attributes={
            "arn": item.get("AutoScalingGroupARN"),
            "launch_template_id": template.get("LaunchTemplateId"),
            "launch_template_version": template.get("Version"),
            "min_size": item.get("MinSize"),
            "max_size": item.get("MaxSize"),
            "desired_capacity": item.get("DesiredCapacity"),
            "subnet_ids": tuple(s for s in str(item.get("VPCZoneIdentifier") or "").split(",") if s),
            "capacity_rebalance": bool(item.get("CapacityRebalance", False)),
            "mixed_instances": _mixed(policy),
            "instances": [
                {
                    "id": i["InstanceId"],
                    "availability_zone": i.get("AvailabilityZone"),
                    "lifecycle_state": i.get("LifecycleState"),
                    "health_status": i.get("HealthStatus"),
                }
                for i in item.get("Instances", [])
            ],
        },
    )


@dataclass(frozen=True)
class InstanceRefresh:
    """One instance refresh of a group, as ``DescribeInstanceRefreshes`` reports it."""

    id: str
    status: str
    launch_template_version: str | None
    """The version of the desired configuration it was started with (None when it was started without)."""

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_REFRESH_STATES


DEFAULT_HEARTBEAT_TIMEOUT = 3600
DEFAULT_HOOK_RESULT = "ABANDON"


@dataclass(frozen=True)
class LifecycleHook:
    """A lifecycle hook, as PutLifecycleHook takes it and DescribeLifecycleHooks reports it."""

    name: str
    transition: str
    notification_target_arn: str | None = None
    role_arn: str | None = None
    heartbeat_timeout: int | None = None
    default_result: str | None = None
    notification_metadata: str | None = None

    def matches(self, found: LifecycleHook) -> bool:
        """Whether ``found`` is this hook as AWS reports it (with AWS's defaults where this leaves a field
        unset)."""
        return (
            found.transition == self.transition
            and found.notification_target_arn == self.notification_target_arn
            and found.role_arn == self.role_arn
            and found.heartbeat_timeout == (self.heartbeat_timeout or DEFAULT_HEARTBEAT_TIMEOUT)
            and found.default_result == (self.default_result or DEFAULT_HOOK_RESULT)
            and found.notification_metadata == self.notification_metadata
        )


def _refresh(item: Mapping[str, Any]) -> InstanceRefresh:
    template = (item.get("DesiredConfiguration") or {}).get("LaunchTemplate") or {}
    version = template.get("Version")
    return InstanceRefresh(
        id=item["InstanceRefreshId"],
        status=item.get("Status", ""),
        launch_template_version=str(version) if version is not None else None,
    )


def _tags(name: str, tags: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {"ResourceId": name, "ResourceType": RESOURCE_TYPE, "Key": k, "Value": v, "PropagateAtLaunch": True}
        for k, v in sorted(tags.items())
    ]


class AutoScalingGroup(ResourceClass[AutoScalingGroupDesired]):
    """An Auto Scaling group over a launch template version, in the given subnets."""

    kind = "autoscaling-group"
    service = "autoscaling"
    create_operation = "CreateAutoScalingGroup"
    traits = Traits(tag_on_create=True, natural_key=True, taggable=True)
    """CreateAutoScalingGroup accepts Tags (tag_on_create) and no idempotency token; the group name is unique
    in the region (natural_key); CreateOrUpdateTags tags it later (taggable)."""
    deletion_is_slow: ClassVar[bool] = True

    def create(
        self, desired: AutoScalingGroupDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        self.aws.autoscaling.call(
            "CreateAutoScalingGroup",
            AutoScalingGroupName=desired.name,
            **desired.template_params(),
            MinSize=desired.min_size,
            MaxSize=desired.max_size,
            DesiredCapacity=desired.desired_capacity,
            VPCZoneIdentifier=",".join(desired.subnet_ids),
            CapacityRebalance=desired.capacity_rebalance,
            **self._tag_param(desired.name, tags),
        )
        observed = self.describe_by_id(desired.name)
        if observed is None:  # eventual consistency: report what was asked for
            observed = Observed(id=desired.name, tags=dict(tags or {}), state="active")
        return observed

    @staticmethod
    def _tag_param(name: str, tags: Mapping[str, str] | None) -> dict[str, Any]:
        return {"Tags": _tags(name, tags)} if tags else {}

    def _describe(self, **params: Any) -> list[Observed]:
        items = self.aws.autoscaling.pages("DescribeAutoScalingGroups", "AutoScalingGroups", **params)
        return [_group(g) for g in items]

    def describe_by_id(self, resource_id: str) -> Observed | None:
        found = [o for o in self._describe(AutoScalingGroupNames=[resource_id]) if o.id == resource_id]
        return found[0] if found else None

    def describe_many(self, resource_ids: list[str], within: Any = ()) -> dict[str, Observed]:
        wanted = set(resource_ids)
        found: dict[str, Observed] = {}
        names = sorted(wanted)
        for start in range(0, len(names), 50):  # at most 50 names a call
            for o in self._describe(AutoScalingGroupNames=names[start : start + 50]):
                if o.id in wanted:
                    found[o.id] = o
        return found

    def describe_by_tags(
        self, tags: Mapping[str, str], desired: AutoScalingGroupDesired | None
    ) -> list[Observed]:
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in sorted(tags.items())]
        return [
            o
            for o in self._describe(Filters=filters)
            if o.state != DELETING and all(o.tags.get(k) == v for k, v in tags.items())
        ]

    def describe_by_key(self, desired: AutoScalingGroupDesired) -> Observed | None:
        observed = self.describe_by_id(desired.name)
        return observed if observed is not None and observed.state != DELETING else None

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        if tags:
            self.aws.autoscaling.call("CreateOrUpdateTags", after_create=True, Tags=_tags(resource_id, tags))

    def update(self, observed: Observed, desired: AutoScalingGroupDesired) -> bool:
        """Scale, move to another template version or mixed instances policy, change subnets or capacity
        rebalancing."""
        found = observed.attributes
        changes: dict[str, Any] = {}
        if (
            found.get("launch_template_id"),
            str(found.get("launch_template_version")),
            found.get("mixed_instances"),
        ) != (desired.launch_template_id, desired.launch_template_version, desired.mixed_instances):
            changes.update(desired.template_params())
        for key, attribute, wanted in (
            ("MinSize", "min_size", desired.min_size),
            ("MaxSize", "max_size", desired.max_size),
            ("DesiredCapacity", "desired_capacity", desired.desired_capacity),
            ("CapacityRebalance", "capacity_rebalance", desired.capacity_rebalance),
        ):
            if found.get(attribute) != wanted:
                changes[key] = wanted
        if set(found.get("subnet_ids", ())) != set(desired.subnet_ids):
            changes["VPCZoneIdentifier"] = ",".join(desired.subnet_ids)
        if not changes:
            return False
        if desired.mixed_instances is not None:
            # Sent with every update: AWS keeps a policy an update leaves out, moto 5.2.5 drops it.
            changes.update(desired.template_params())
        self.aws.autoscaling.call("UpdateAutoScalingGroup", AutoScalingGroupName=observed.id, **changes)
        return True

    def mismatches(self, observed: Observed, desired: AutoScalingGroupDesired) -> list[Mismatch]:
        return compare(
            {"launchTemplateId": (desired.launch_template_id, observed.attributes.get("launch_template_id"))}
        )

    def is_ready(self, observed: Observed) -> bool:
        return observed.state != DELETING

    def delete(self, resource_id: str) -> None:
        """Delete the group and terminate its instances (``ForceDelete``); a group already being deleted
        needs no second request."""
        observed = self.describe_by_id(resource_id)
        if observed is None:
            raise NotFound(
                f"autoscaling:DeleteAutoScalingGroup: {resource_id} does not exist",
                "autoscaling",
                "DeleteAutoScalingGroup",
            )
        if observed.state == DELETING:
            return
        try:
            self.aws.autoscaling.call(
                "DeleteAutoScalingGroup", AutoScalingGroupName=resource_id, ForceDelete=True
            )
        except InvalidRequest as error:
            if "not found" in str(error):  # AWS answers ValidationError for a name it does not know
                raise NotFound(str(error), "autoscaling", "DeleteAutoScalingGroup", error.code) from error
            raise

    # -- instance refreshes (replacing the instances when the group moves to another template version) -----

    def instance_refreshes(self, group: str) -> list[InstanceRefresh]:
        """The group's refreshes, newest first: one call (its first page holds the 50 most recent, which is
        all a pool needs to know whether one is running and which version the latest was for)."""
        found = self.aws.autoscaling.call("DescribeInstanceRefreshes", AutoScalingGroupName=group)
        refreshes = sorted(
            found.get("InstanceRefreshes", []), key=lambda r: str(r.get("StartTime") or ""), reverse=True
        )
        return [_refresh(r) for r in refreshes]

    def start_instance_refresh(
        self,
        group: str,
        launch_template_id: str,
        version: str,
        strategy: str,
        preferences: Mapping[str, Any],
    ) -> str:
        """Start replacing the group's instances with ones of ``version`` (named in the desired
        configuration, so that a later describe tells which version a refresh was for); its id."""
        params: dict[str, Any] = {
            "AutoScalingGroupName": group,
            "Strategy": strategy,
            "DesiredConfiguration": {
                "LaunchTemplate": {"LaunchTemplateId": launch_template_id, "Version": version}
            },
        }
        if preferences:
            params["Preferences"] = dict(preferences)
        answer = self.aws.autoscaling.call("StartInstanceRefresh", **params)
        return str(answer["InstanceRefreshId"])

    # -- lifecycle hooks ------------------------------------------------------------------------------------

    def lifecycle_hooks(self, group: str) -> dict[str, LifecycleHook]:
        """The group's hooks by name."""
        found = self.aws.autoscaling.call("DescribeLifecycleHooks", AutoScalingGroupName=group)
        return {
            h["LifecycleHookName"]: LifecycleHook(
                name=h["LifecycleHookName"],
                transition=h.get("LifecycleTransition", ""),
                notification_target_arn=h.get("NotificationTargetARN"),
                role_arn=h.get("RoleARN"),
                heartbeat_timeout=h.get("HeartbeatTimeout"),
                default_result=h.get("DefaultResult"),
                notification_metadata=h.get("NotificationMetadata"),
            )
            for h in found.get("LifecycleHooks", [])
        }

    def put_lifecycle_hook(self, group: str, hook: LifecycleHook) -> None:
        """Create or replace a hook (``PutLifecycleHook`` does both)."""
        params: dict[str, Any] = {
            "AutoScalingGroupName": group,
            "LifecycleHookName": hook.name,
            "LifecycleTransition": hook.transition,
        }
        for key, value in (
            ("NotificationTargetARN", hook.notification_target_arn),
            ("RoleARN", hook.role_arn),
            ("HeartbeatTimeout", hook.heartbeat_timeout),
            ("DefaultResult", hook.default_result),
            ("NotificationMetadata", hook.notification_metadata),
        ):
            if value is not None:
                params[key] = value
        self.aws.autoscaling.call("PutLifecycleHook", **params)

    def delete_lifecycle_hook(self, group: str, name: str) -> None:
        self.aws.autoscaling.call("DeleteLifecycleHook", AutoScalingGroupName=group, LifecycleHookName=name)

    def key_of(self, desired: AutoScalingGroupDesired) -> str:
        return desired.name

    def fingerprint(self, desired: AutoScalingGroupDesired) -> dict[str, str]:
        return {"name": desired.name, "launch_template_id": desired.launch_template_id}
