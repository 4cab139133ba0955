"""The machine pool service: an AWSMachinePool's launch template, its versions and its Auto Scaling group.

Create, over a :class:`PoolScope`:

1. :func:`reconcile_launch_template` — the template (class 1: tags on create, its name as natural key),
   made with the launch data as its first version (``LaunchTemplateReady``);
2. :func:`reconcile_launch_template_version` — when the launch data differs from the version the pool
   uses (another image, instance type, profile, key, groups, root volume or bootstrap data), a new version
   (class 4 on AWS: a client token from the pool's uid and a role naming the data's digest, so a repeated
   create returns the same version; where the endpoint ignores tokens, class 5 with an intent), recorded
   as ``status.launchTemplateVersion``;
3. :func:`reconcile_group` — the Auto Scaling group (class 1: tags on create, its name as natural key)
   over that version in the pool's subnets, ``DesiredCapacity`` the MachinePool's ``spec.replicas`` within
   ``minSize``..``maxSize``, with the pool's ``mixedInstancesPolicy`` if it has one (which then names the
   template); an existing group is scaled and moved to the new version or policy (``ASGReady``);
   ``status.replicas``, ``status.instances`` and ``spec.providerIDList`` report what AWS
   runs, and the pool is ready once every desired instance is ``InService``.

4. :func:`reconcile_instance_refresh` — once the group has moved to a new version, an instance refresh
   (``StartInstanceRefresh``, CAPA's ``refreshPreferences``) replaces the instances launched from an
   earlier one, unless ``refreshPreferences.disable``; none is started while another runs on the group,
   and ``status.instanceRefresh`` (the version refreshed to, the refresh's id and status) and the condition
   ``InstanceRefreshInProgress`` say where it stands. A pool whose instances are on its version makes no
   call for this; while a refresh runs, the pool looks at it again every :data:`REFRESH_POLL` seconds
   (``DescribeInstanceRefreshes``: one call).

The group's lifecycle hooks (``spec.lifecycleHooks``) are converged with the group, before the wait for its
instances (:func:`reconcile_lifecycle_hooks`).

Delete, over a :class:`~controllers.aws_scope.ReconcileScope`: :func:`delete_group` deletes the group with
``ForceDelete`` (AWS terminates its instances) and waits until AWS no longer reports it; then
:func:`delete_launch_template` deletes the template, which deletes every version with it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from capa_py.api.aws import AWSCluster
from capa_py.api.aws_common import RecordedResource
from capa_py.api.image_lookup import ImageLookup, ResolvedImage, lookup_name, lookup_settings
from capa_py.api.machinepool import (
    AWSMachinePool,
    AWSMachinePoolInstanceStatus,
    InstanceRefreshStatus,
    InstancesDistribution,
    MachinePool,
    MixedInstancesPolicy,
    RefreshPreferences,
)
from capa_py.aws.errors import InvalidRequest
from capa_py.ctrlkit.result import Result, requeue_after
from capa_py.engine.errors import Waiting
from capa_py.engine.tags import NODE_ROLE
from capa_py.logging import get_logger
from controllers.aws_scope import ReconcileScope
from controllers.services import images
from controllers.services.instances import security_group_roles
from resources.autoscaling_group import (
    ACTIVE_REFRESH_STATES,
    AutoScalingGroup,
    AutoScalingGroupDesired,
    LifecycleHook,
    MixedInstances,
)
from resources.instance import Instance
from resources.launch_template import (
    LaunchTemplate,
    LaunchTemplateDesired,
    LaunchTemplateVersion,
    LaunchTemplateVersionDesired,
    data_matches,
    launch_data_fingerprint,
)

INSTANCE_REFRESH = "InstanceRefreshInProgress"
"""True while a refresh of the pool's instances runs; not part of Ready (the pool serves meanwhile)."""
REFRESH_POLL = 30.0
"""Seconds between looks at a running refresh."""
LAUNCH_TEMPLATE_READY = "LaunchTemplateReady"
ASG_READY = "ASGReady"
CONDITIONS = (LAUNCH_TEMPLATE_READY, ASG_READY)
TEMPLATE_ROLE = "launch-template"
VERSION_ROLE_PREFIX = "launch-template-version-"
GROUP_ROLE = "autoscaling-group"
IN_SERVICE = "InService"

_log = get_logger("controller.awsmachinepool")


def version_role(data: dict[str, Any]) -> str:
    """The engine role of a version with this launch data: a new role (so a new client token) per content,
    and the same one for a retry of the same content."""
    return VERSION_ROLE_PREFIX + launch_data_fingerprint(data)[:12]


def clamp(replicas: int, min_size: int, max_size: int) -> int:
    return max(min_size, min(max_size, replicas))


@dataclass(kw_only=True)
class PoolScope(ReconcileScope[AWSMachinePool]):
    """One create pass of one AWSMachinePool: its MachinePool, its cluster's AWSCluster, bootstrap data."""

    machine_pool: MachinePool
    awscluster: AWSCluster
    bootstrap: bytes
    templates: LaunchTemplate = field(init=False)
    versions: LaunchTemplateVersion = field(init=False)
    groups: AutoScalingGroup = field(init=False)
    template_id: str | None = field(init=False, default=None)
    version: str | None = field(init=False, default=None)
    launch_data: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.templates = LaunchTemplate(self.aws)
        self.versions = LaunchTemplateVersion(self.aws)
        self.groups = AutoScalingGroup(self.aws)


# -- the launch data ---------------------------------------------------------------------------------------


def pool_image(scope: PoolScope) -> str:
    """``awsLaunchTemplate.ami.id``, else the image recorded for the pool, else the newest image found for
    the MachinePool's Kubernetes version (recorded in ``status.ami``)."""
    template = scope.obj.spec.aws_launch_template
    if template.ami.id:
        return template.ami.id
    if scope.obj.status.ami is not None:
        return scope.obj.status.ami.id
    version = scope.machine_pool.spec.template.spec.version
    if not version:
        raise InvalidRequest(images.NO_VERSION_MESSAGE, code="MissingAMI")
    lookup_format, org, base_os = lookup_settings(template, scope.awscluster.spec)
    lookup = ImageLookup(
        org,
        lookup_name(lookup_format, base_os, version),
        images.instance_type_architecture(scope.aws, template.instance_type),
    )
    settings = (
        f"imageLookupFormat {lookup_format!r}, imageLookupBaseOS {base_os!r}, Kubernetes version {version}"
    )
    image = images.newest_image(scope.aws, lookup, settings)
    resolved = ResolvedImage(
        id=image["ImageId"],
        name=image.get("Name"),
        creation_date=image.get("CreationDate"),
        owner_id=lookup.owner,
        name_pattern=lookup.name,
        architecture=lookup.architecture,
    )

    def record(o: AWSMachinePool) -> None:
        o.status.ami = resolved.model_copy()

    scope.change_status(record)
    return resolved.id


def security_groups(scope: PoolScope) -> list[str]:
    groups = scope.awscluster.status.network.security_groups
    ids = [groups[r].id for r in security_group_roles(False) if r in groups]
    ids += [g.id for g in scope.obj.spec.aws_launch_template.additional_security_groups if g.id]
    return list(dict.fromkeys(ids))


def launch_data(scope: PoolScope) -> dict[str, Any]:
    """``LaunchTemplateData`` for the pool (its ``UserData`` is the bootstrap data, base64 encoded as the
    API requires for launch templates; never logged)."""
    template = scope.obj.spec.aws_launch_template
    image_id = pool_image(scope)
    data: dict[str, Any] = {
        "ImageId": image_id,
        "InstanceType": template.instance_type,
        "SecurityGroupIds": security_groups(scope),
        "UserData": base64.b64encode(scope.bootstrap).decode(),
    }
    if template.iam_instance_profile:
        data["IamInstanceProfile"] = {"Name": template.iam_instance_profile}
    key = template.ssh_key_name or scope.awscluster.spec.ssh_key_name
    if key:
        data["KeyName"] = key
    volume = template.root_volume
    if volume is not None:
        ebs: dict[str, Any] = {"VolumeSize": volume.size, "VolumeType": volume.type}
        if volume.iops is not None:
            ebs["Iops"] = volume.iops
        if volume.encrypted is not None:
            ebs["Encrypted"] = volume.encrypted
        device = Instance(scope.aws).root_device_name(image_id)
        data["BlockDeviceMappings"] = [{"DeviceName": device, "Ebs": ebs}]
    return data


# -- create ------------------------------------------------------------------------------------------------


def reconcile_launch_template(scope: PoolScope) -> None:
    data = launch_data(scope)
    scope.launch_data = data
    observed = scope.engine.ensure(
        scope.templates,
        TEMPLATE_ROLE,
        LaunchTemplateDesired(scope.obj.launch_template_name, data),
        scope.engine_scope,
        name=scope.obj.name,
        capa_role_value=NODE_ROLE,
    )
    scope.template_id = observed.id
    template_id = observed.id

    def status(o: AWSMachinePool) -> None:
        o.status.launch_template_id = template_id

    scope.change_status(status)


def _in_use(scope: PoolScope) -> str | None:
    """The version the pool uses: the one in status, else the template's first."""
    return scope.obj.status.launch_template_version or ("1" if scope.template_id else None)


def reconcile_launch_template_version(scope: PoolScope) -> None:
    assert scope.template_id is not None
    data = scope.launch_data
    current = _in_use(scope)
    role = version_role(data)
    if current is not None and scope.recorder.recorded(role) is None:
        observed = scope.versions.describe_by_id(f"{scope.template_id}:{current}")
        if observed is not None and data_matches(observed.attributes["data"], data):
            scope.version = current
            _forget_other_versions(scope, keep=None)
            _set_version(scope, current)
            return
    created = scope.engine.ensure(
        scope.versions, role, LaunchTemplateVersionDesired(scope.template_id, data), scope.engine_scope
    )
    scope.version = str(created.attributes["version"])
    _log.info("launch template version in use", pool=scope.obj.name, version=scope.version)
    _forget_other_versions(scope, keep=role)
    _set_version(scope, scope.version)


def _set_version(scope: PoolScope, version: str) -> None:
    def status(o: AWSMachinePool) -> None:
        o.status.launch_template_version = version

    scope.change_status(status)


def _forget_other_versions(scope: PoolScope, keep: str | None) -> None:
    """Versions are not deleted one by one (the template takes them when it goes): once the pool uses
    another version, the records of earlier ones are dropped."""
    stale = [r for r in scope.obj.status.resources if r.startswith(VERSION_ROLE_PREFIX) and r != keep]
    for role in stale:
        scope.recorder.forget(role)


def pool_subnets(scope: PoolScope) -> tuple[str, ...]:
    spec = scope.obj.spec
    if spec.subnets:
        return tuple(s.id for s in spec.subnets if s.id)
    subnets = scope.awscluster.status.network.subnets
    private = [s for s in subnets if not s.is_public] or list(subnets)
    if spec.availability_zones:
        private = [s for s in private if s.availability_zone in spec.availability_zones]
        if not private:
            raise InvalidRequest(
                f"spec.availabilityZones: the cluster has no subnet in {', '.join(spec.availability_zones)}",
                code="NoSubnet",
            )
    return tuple(sorted(s.id for s in private))


def group_desired(scope: PoolScope) -> AutoScalingGroupDesired:
    assert scope.template_id is not None
    assert scope.version is not None
    spec = scope.obj.spec
    return AutoScalingGroupDesired(
        name=scope.obj.launch_template_name,
        launch_template_id=scope.template_id,
        launch_template_version=scope.version,
        min_size=spec.min_size,
        max_size=spec.max_size,
        desired_capacity=clamp(scope.machine_pool.spec.desired, spec.min_size, spec.max_size),
        subnet_ids=pool_subnets(scope),
        capacity_rebalance=spec.capacity_rebalance,
        mixed_instances=mixed_instances(spec.mixed_instances_policy),
    )


def mixed_instances(policy: MixedInstancesPolicy | None) -> MixedInstances | None:
    """The group's mixed instances policy from the pool's (CAPA's defaults where the distribution is
    unset)."""
    if policy is None:
        return None
    distribution = policy.instances_distribution or InstancesDistribution()
    return MixedInstances(
        on_demand_allocation_strategy=distribution.on_demand_allocation_strategy,
        spot_allocation_strategy=distribution.spot_allocation_strategy,
        on_demand_base_capacity=distribution.on_demand_base_capacity,
        on_demand_percentage_above_base_capacity=distribution.on_demand_percentage_above_base_capacity,
        instance_types=tuple(o.instance_type for o in policy.overrides),
    )


def reconcile_group(scope: PoolScope) -> None:
    desired = group_desired(scope)
    observed = scope.engine.ensure(
        scope.groups, GROUP_ROLE, desired, scope.engine_scope, name=scope.obj.name, capa_role_value=NODE_ROLE
    )
    reconcile_lifecycle_hooks(scope, observed.id)
    if observed.stale:
        fresh = scope.groups.describe_by_id(observed.id)
        observed = fresh if fresh is not None else observed
    instances = observed.attributes.get("instances", [])
    in_service = [i for i in instances if i.get("lifecycle_state") == IN_SERVICE]
    provider_ids = sorted(f"aws:///{i.get('availability_zone') or ''}/{i['id']}" for i in in_service)
    listed = [
        AWSMachinePoolInstanceStatus(
            instance_id=i["id"],
            instance_state=i.get("lifecycle_state"),
            availability_zone=i.get("availability_zone"),
        )
        for i in sorted(instances, key=lambda i: str(i["id"]))
    ]

    def status(o: AWSMachinePool) -> None:
        o.status.replicas = len(in_service)
        o.status.instances = [i.model_copy() for i in listed]
        o.status.asg_status = observed.state

    scope.change_status(status)
    if scope.obj.spec.provider_id_list != provider_ids:

        def set_spec(o: AWSMachinePool) -> None:
            o.spec.provider_id_list = list(provider_ids)

        scope.update_spec(set_spec)
    if len(in_service) != desired.desired_capacity:
        raise Waiting(
            f"Auto Scaling group {observed.id}: {len(in_service)} of {desired.desired_capacity} instances "
            "in service",
            10.0,
        )


def reconcile_lifecycle_hooks(scope: PoolScope, group: str) -> None:
    """Put the declared hooks that are missing or differ, delete those the pool put and no longer declares
    (``status.lifecycleHooks``); others' hooks on the group are left alone. No call when the pool declares
    none and put none; else one ``DescribeLifecycleHooks``, and a put or delete only where something
    differs."""
    declared = {
        h.name: LifecycleHook(
            name=h.name,
            transition=h.lifecycle_transition,
            notification_target_arn=h.notification_target_arn,
            role_arn=h.role_arn,
            heartbeat_timeout=h.heartbeat_seconds,
            default_result=h.default_result,
            notification_metadata=h.notification_metadata,
        )
        for h in scope.obj.spec.lifecycle_hooks
    }
    managed = list(scope.obj.status.lifecycle_hooks)
    if not declared and not managed:
        return
    found = scope.groups.lifecycle_hooks(group)
    for name, hook in declared.items():
        current = found.get(name)
        if current is None or not hook.matches(current):
            scope.groups.put_lifecycle_hook(group, hook)
            _log.info("lifecycle hook put", pool=scope.obj.name, hook=name)
    for name in managed:
        if name not in declared and name in found:
            scope.groups.delete_lifecycle_hook(group, name)
            _log.info("lifecycle hook deleted", pool=scope.obj.name, hook=name)
    names = sorted(declared)
    if names != managed:

        def record(o: AWSMachinePool) -> None:
            o.status.lifecycle_hooks = list(names)

        scope.change_status(record)


def mark_ready(scope: PoolScope) -> None:
    scope.mark_ready()


# -- instance refresh --------------------------------------------------------------------------------------


def refresh_preferences(prefs: RefreshPreferences) -> dict[str, int]:
    """``StartInstanceRefresh``'s ``Preferences`` from the pool's (only what is set: AWS's defaults else)."""
    found: dict[str, int] = {}
    if prefs.instance_warmup is not None:
        found["InstanceWarmup"] = prefs.instance_warmup
    if prefs.min_healthy_percentage is not None:
        found["MinHealthyPercentage"] = prefs.min_healthy_percentage
    return found


def _record_refresh(scope: PoolScope, version: str, refresh_id: str | None, status: str | None) -> None:
    record = InstanceRefreshStatus(
        launch_template_version=version, instance_refresh_id=refresh_id, status=status
    )

    def change(o: AWSMachinePool) -> None:
        o.status.instance_refresh = record.model_copy()

    scope.change_status(change)


def reconcile_instance_refresh(scope: PoolScope) -> Result | None:
    """Replace the instances of earlier launch template versions (see the module's step 4)."""
    assert scope.template_id is not None
    assert scope.version is not None
    version = scope.version
    record = scope.obj.status.instance_refresh
    if record is None:
        # The group was just made (or predates refreshes): its instances are launched from this version.
        _record_refresh(scope, version, None, None)
        return None
    moved = record.launch_template_version != version
    if not moved and record.status not in ACTIVE_REFRESH_STATES:
        return None  # the instances are on the pool's version: nothing to look at
    prefs = scope.obj.spec.refresh_preferences or RefreshPreferences()
    group = scope.obj.launch_template_name
    if moved and prefs.disable:
        _record_refresh(scope, version, None, None)
        scope.condition(
            INSTANCE_REFRESH,
            False,
            "InstanceRefreshDisabled",
            f"refreshPreferences.disable: instances launched before version {version} keep their version",
            "Info",
        )
        return None
    refreshes = scope.groups.instance_refreshes(group)
    refresh_id: str | None
    status: str | None
    if moved:
        started = next((r for r in refreshes if r.launch_template_version == version), None)
        if started is None:
            running = next((r for r in refreshes if r.active), None)
            if running is not None:
                scope.condition(
                    INSTANCE_REFRESH,
                    True,
                    "WaitingForInstanceRefresh",
                    f"refresh {running.id} is {running.status}: the refresh to launch template version "
                    f"{version} starts once it ends",
                )
                return requeue_after(REFRESH_POLL)
            refresh_id = scope.groups.start_instance_refresh(
                group, scope.template_id, version, prefs.strategy or "Rolling", refresh_preferences(prefs)
            )
            status = "Pending"
            _log.info("instance refresh started", pool=scope.obj.name, refresh=refresh_id, version=version)
        else:  # started by an earlier pass that could not record it
            refresh_id, status = started.id, started.status
        _record_refresh(scope, version, refresh_id, status)
    else:
        refresh_id = record.instance_refresh_id
        mine = next((r for r in refreshes if r.id == refresh_id), None)
        status = mine.status if mine is not None else None
        _record_refresh(scope, version, refresh_id, status)
    about = f"instance refresh {refresh_id} to launch template version {version}"
    if status in ACTIVE_REFRESH_STATES:
        scope.condition(INSTANCE_REFRESH, True, f"InstanceRefresh{status}", f"{about}: {status}")
        return requeue_after(REFRESH_POLL)
    ended = status or "NoLongerReported"
    failed = ended not in ("Successful", "NoLongerReported")
    scope.condition(
        INSTANCE_REFRESH,
        False,
        f"InstanceRefresh{ended}",
        f"{about}: {ended}",
        "Warning" if failed else "Info",
    )
    return None


# -- delete ------------------------------------------------------------------------------------------------


def delete_group(scope: ReconcileScope[AWSMachinePool]) -> None:
    """Delete the group with ForceDelete (AWS terminates its instances) and wait until it is gone."""
    scope.engine.remove(AutoScalingGroup(scope.aws), GROUP_ROLE, scope.engine_scope)


def delete_launch_template(scope: ReconcileScope[AWSMachinePool]) -> None:
    """Delete the template (and with it every version), then drop the versions' records."""
    scope.engine.remove(LaunchTemplate(scope.aws), TEMPLATE_ROLE, scope.engine_scope)
    for role in [r for r in scope.obj.status.resources if r.startswith(VERSION_ROLE_PREFIX)]:
        scope.recorder.forget(role)
    for role in [r for r in scope.obj.status.intents if r.startswith(VERSION_ROLE_PREFIX)]:
        scope.recorder.clear_intent(role)


def recorded(obj: AWSMachinePool) -> dict[str, RecordedResource]:
    return dict(obj.status.resources)
