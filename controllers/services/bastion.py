"""The bastion service: Cluster API Provider AWS's bastion host (``spec.bastion``).

A bastion is one small instance in the cluster's first public subnet, with a public address, in a security
group of its own (``<cluster>-bastion``) that allows SSH (port 22) from ``allowedCIDRBlocks`` (anywhere when
none is given; no rule with ``disableIngressRules``). The control plane's and the nodes' groups allow SSH
from the bastion's group while it exists (:func:`controllers.services.securitygroups.security_group_rules`),
so the machines are reached through it.

Create, in the security groups' branch of the cluster's graph:

1. :func:`reconcile_bastion_security_group` — the bastion's group and its rules, before the cluster's
   groups, so that their SSH rule names its id;
2. :func:`reconcile_bastion` — after the cluster's groups: the instance, through the engine (tags on
   create and a client token, so a launch interrupted after ``RunInstances`` finds its instance by its
   tags rather than launching another; the token is new for each spec generation, see
   :func:`launch_scope`), its state and addresses in ``status.bastion``; a pending instance
   is polled at the InstanceRunning waiter's cadence. ``BastionHostReady`` (CAPA's condition) is True once
   it runs. With ``enabled: false`` after a bastion was made, the same step deletes it: the cluster's
   groups have just dropped their rule naming the bastion's group, then the instance is terminated (waited
   for: its interface holds the group), then the group is deleted, ``status.bastion`` and the condition
   removed. A running bastion whose ``instanceType`` (or ``ami``, when given) no longer matches the spec
   is replaced: terminated, waited for, launched again.

The image: ``spec.bastion.ami``, else the newest image CAPA's lookup finds — ``DescribeImages`` with
``owner-id`` Canonical's account (099720109477; 513442679011 in AWS GovCloud), ``description``
:data:`BASTION_IMAGE_DESCRIPTION` (Ubuntu 24.04 for amd64), ``architecture=x86_64``, ``state=available``
and ``virtualization-type=hvm``, the newest ``CreationDate`` winning — asked once per region per
:data:`~controllers.services.images.LOOKUP_TTL`. A running bastion keeps its image
(``status.bastion.imageId``): a newer image never replaces it.

Delete (:func:`delete_instance`, :func:`delete_security_group`): the instance before the cluster's
groups and the network (its interface would hold the subnet and the groups), the bastion's group after
the cluster's groups (their rules name it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from capa_py.api.aws import DEFAULT_BASTION_INSTANCE_TYPE, AWSCluster, BastionStatus, SecurityGroupStatus
from capa_py.api.cluster import MachineAddress
from capa_py.aws.errors import InvalidRequest, NotFound
from capa_py.aws.session import AWSClients
from capa_py.cache.known import known_of
from capa_py.ctrlkit.action import Context
from capa_py.ctrlkit.result import Result
from capa_py.engine.engine import Scope
from capa_py.engine.errors import Waiting
from capa_py.engine.resource import Observed
from capa_py.logging import get_logger
from controllers.aws_scope import SCOPE, Step, run_step
from controllers.services import images
from controllers.services.cluster_scope import ClusterScope
from controllers.services.instances import addresses
from controllers.waits import INSTANCE_RUNNING
from resources.instance import Instance, InstanceDesired
from resources.security_group import IngressRule, SecurityGroupDesired

IAM_ACTIONS: tuple[str, ...] = ("ec2:DescribeImages",)
"""The calls made here (the default image lookup); the bastion's group and instance are made through their
resource classes, which declare theirs."""

BASTION_HOST_READY = "BastionHostReady"
"""CAPA's condition: the bastion host runs (set only while ``spec.bastion.enabled``)."""
CONDITIONS = (BASTION_HOST_READY,)
INSTANCE_ROLE = "bastion"
SECURITY_GROUP_ROLE = "sg-bastion"
SECURITY_GROUP_KEY = "bastion"
"""The bastion's group in ``status.network.securityGroups`` (CAPA's role name)."""
SSH_PORT = 22
CANONICAL_OWNER = "099720109477"
CANONICAL_GOVCLOUD_OWNER = "513442679011"
BASTION_IMAGE_DESCRIPTION = "Canonical??Ubuntu??24.04??amd64?noble?image*"
"""The ``description`` filter of the bastion's image lookup (CAPA's: Canonical's Ubuntu 24.04 images)."""
BASTION_ARCHITECTURE = "x86_64"
_log = get_logger("controller.bastion")


class BastionAMINotFound(NotFound):
    """No image matches the bastion's lookup: it waits for one (retried with backoff), nothing is made."""

    def __init__(self, owner: str) -> None:
        super().__init__(
            f"spec.bastion.ami is not set and no AMI matches owner-id={owner}, "
            f"description={BASTION_IMAGE_DESCRIPTION}, architecture={BASTION_ARCHITECTURE}, "
            "state=available, virtualization-type=hvm: set spec.bastion.ami",
            "ec2",
            "DescribeImages",
            "AMINotFound",
        )


def enabled(obj: AWSCluster) -> bool:
    return obj.spec.bastion.enabled


def image_owner(region: str) -> str:
    return CANONICAL_GOVCLOUD_OWNER if region.startswith("us-gov-") else CANONICAL_OWNER


def default_image(aws: AWSClients, region: str) -> str:
    """The newest image CAPA's bastion lookup finds in ``region`` (one ``DescribeImages`` per
    :data:`~controllers.services.images.LOOKUP_TTL`)."""
    owner = image_owner(region)

    def read() -> dict[str, Any]:
        filters = [
            {"Name": "owner-id", "Values": [owner]},
            {"Name": "description", "Values": [BASTION_IMAGE_DESCRIPTION]},
            {"Name": "architecture", "Values": [BASTION_ARCHITECTURE]},
            {"Name": "state", "Values": ["available"]},
            {"Name": "virtualization-type", "Values": ["hvm"]},
        ]
        found = aws.ec2.call("DescribeImages", Filters=filters).get("Images", [])
        if not found:
            raise BastionAMINotFound(owner)
        newest: dict[str, Any] = max(found, key=lambda i: (str(i.get("CreationDate") or ""), i["ImageId"]))
        return {k: newest.get(k) for k in ("ImageId", "RootDeviceName")}

    known = known_of(aws)
    key = ("bastion-ami-lookup", owner, BASTION_IMAGE_DESCRIPTION, BASTION_ARCHITECTURE)
    image = known.value(key, images.LOOKUP_TTL, read)
    if image.get("RootDeviceName"):
        known.learn((images.ROOT_DEVICE_FACT, image["ImageId"]), str(image["RootDeviceName"]))
    return str(image["ImageId"])


def _ssh_rules(obj: AWSCluster) -> tuple[IngressRule, ...]:
    return tuple(
        IngressRule("tcp", SSH_PORT, SSH_PORT, cidr_block=block, description="SSH")
        for block in obj.spec.bastion.ingress_cidr_blocks()
    )


def _group_desired(scope: ClusterScope) -> SecurityGroupDesired:
    vpc_id = scope.network.vpc_id
    assert vpc_id is not None
    name = f"{scope.cluster_name}-bastion"
    return SecurityGroupDesired(vpc_id, name, f"{scope.cluster_name} bastion", _ssh_rules(scope.obj))


def reconcile_bastion_security_group(scope: ClusterScope) -> None:
    """The bastion's group and its SSH rules (nothing when the bastion is disabled: the group goes after
    the cluster's groups have dropped their rule naming it, in :func:`reconcile_bastion`)."""
    if not enabled(scope.obj):
        return
    desired = _group_desired(scope)
    observed = scope.ensure(scope.resources.security_group, SECURITY_GROUP_ROLE, desired)
    scope.network.security_groups[SECURITY_GROUP_KEY] = SecurityGroupStatus(
        id=observed.id, name=desired.group_name
    )


def bastion_group_id(scope: ClusterScope) -> str | None:
    """The bastion's group as this pass ensured it (None when the bastion is disabled)."""
    group = scope.network.security_groups.get(SECURITY_GROUP_KEY)
    return group.id if group is not None else None


def _public_subnet(scope: ClusterScope) -> str:
    public = [s for s in scope.network.subnets if s.is_public]
    if not public:
        raise InvalidRequest(
            "spec.bastion.enabled: the cluster has no public subnet for the bastion host "
            "(spec.network.subnets needs one with isPublic: true)",
            code="NoPublicSubnet",
        )
    return public[0].id


def _image(scope: ClusterScope, instances: Instance) -> str:
    spec = scope.obj.spec
    if spec.bastion.ami:
        return spec.bastion.ami
    recorded = scope.recorder.recorded(INSTANCE_ROLE)
    if recorded is not None:
        # A running bastion keeps the image it was launched from, whatever a lookup finds now.
        status = scope.obj.status.bastion
        if status is not None and status.id == recorded.id and status.image_id:
            return status.image_id
        running = instances.describe_by_id(recorded.id)
        if running is not None and running.attributes.get("image_id"):
            return str(running.attributes["image_id"])
    return default_image(scope.aws, spec.region)


def desired(scope: ClusterScope, instances: Instance) -> InstanceDesired:
    group = bastion_group_id(scope)
    assert group is not None
    spec = scope.obj.spec
    return InstanceDesired(
        image_id=_image(scope, instances),
        instance_type=spec.bastion.instance_type or DEFAULT_BASTION_INSTANCE_TYPE,
        subnet_id=_public_subnet(scope),
        security_group_ids=(group,),
        key_name=spec.ssh_key_name,
        public_ip=True,
    )


def status_of(observed: Observed, desired: InstanceDesired) -> BastionStatus:
    found = observed.attributes
    return BastionStatus(
        id=observed.id,
        instance_state=observed.state,
        type=found.get("instance_type") or desired.instance_type,
        subnet_id=found.get("subnet_id") or desired.subnet_id,
        image_id=found.get("image_id") or desired.image_id,
        ssh_key_name=found.get("key_name") or desired.key_name,
        security_group_ids=list(found.get("security_group_ids") or desired.security_group_ids),
        availability_zone=found.get("availability_zone"),
        private_ip=found.get("private_ip"),
        public_ip=found.get("public_ip"),
        addresses=[MachineAddress(type=a.type, address=a.address) for a in addresses(observed)],
    )


def launch_scope(scope: ClusterScope) -> Scope:
    """The engine scope of the bastion's launch: its client token is derived from the AWSCluster's uid and
    generation. A bastion is launched again for the same AWSCluster (enabled after being disabled, or
    replaced after a spec change), and AWS answers a token with its first instance for a long while, even
    a terminated one; every such launch follows a spec change, so a new generation gives it a new token,
    while a launch retried after a crash (same spec) repeats its token — and is found by its tags first."""
    owner = f"{scope.obj.uid}:generation-{scope.obj.metadata.generation}"
    return dataclasses.replace(scope.engine_scope, owner_uid=owner)


def reconcile_bastion(scope: ClusterScope) -> None:
    if not enabled(scope.obj):
        remove_disabled_bastion(scope)
        return
    instances = Instance(scope.aws)
    before = scope.recorder.recorded(INSTANCE_ROLE)
    wanted = desired(scope, instances)
    observed = scope.engine.ensure(
        instances,
        INSTANCE_ROLE,
        wanted,
        launch_scope(scope),
        name=f"{scope.cluster_name}-bastion",
        capa_role_value="bastion",
    )
    found = status_of(observed, wanted)

    def record(o: AWSCluster) -> None:
        o.status.bastion = found.model_copy(deep=True)

    scope.change_status(record)
    changed = _replaced_by_spec(observed, wanted, scope.obj)
    if changed:
        # A bastion holds no state: one launched from another type or image is replaced, not changed.
        _log.info(
            "replacing the bastion host", cluster=scope.cluster_name, instance=observed.id, changed=changed
        )
        scope.condition(
            BASTION_HOST_READY, False, "Replacing", f"{changed} changed: replacing the bastion host"
        )
        delete_instance(scope)
        raise Waiting(f"bastion instance {observed.id} replaced ({changed} changed)", 1.0)
    if not instances.is_ready(observed):
        created = ClusterScope.created(before, observed)
        raise Waiting(
            f"bastion instance {observed.id} is {observed.state}",
            INSTANCE_RUNNING.requeue(created, observed.created_at),
        )


def _replaced_by_spec(observed: Observed, wanted: InstanceDesired, obj: AWSCluster) -> str | None:
    """The spec field the running bastion no longer matches (its type; its image when ``ami`` is given),
    or None."""
    found = observed.attributes
    if found.get("instance_type") and found["instance_type"] != wanted.instance_type:
        return "spec.bastion.instanceType"
    if obj.spec.bastion.ami and found.get("image_id") and found["image_id"] != obj.spec.bastion.ami:
        return "spec.bastion.ami"
    return None


def _forget(scope: ClusterScope) -> None:
    def forget(o: AWSCluster) -> None:
        o.status.bastion = None
        o.status.conditions = [c for c in o.status.conditions if c.type != BASTION_HOST_READY]

    scope.change_status(forget)


def _has_bastion(scope: ClusterScope) -> bool:
    recorder = scope.recorder
    return any(
        recorder.recorded(role) is not None or recorder.intent(role) is not None
        for role in (INSTANCE_ROLE, SECURITY_GROUP_ROLE)
    )


def remove_disabled_bastion(scope: ClusterScope) -> None:
    """``enabled: false`` after a bastion was made: the instance, waited for, then its group."""
    if not _has_bastion(scope):
        if scope.obj.status.bastion is not None or any(
            c.type == BASTION_HOST_READY for c in scope.obj.status.conditions
        ):
            _forget(scope)
        return
    scope.condition(
        BASTION_HOST_READY, False, "Deleting", "the bastion host is disabled: deleting it", "Info"
    )
    delete_instance(scope)
    delete_security_group(scope)
    _log.info("bastion host deleted", cluster=scope.cluster_name)
    _forget(scope)


def _to_delete(scope: ClusterScope, role: str) -> bool:
    """Whether a delete looks for ``role``: recorded or intended, or the bastion enabled (a launch may have
    been interrupted before its record); a cluster that never had a bastion costs its delete no call."""
    return scope.kind_of(role) is not None or enabled(scope.obj)


def delete_instance(scope: ClusterScope) -> None:
    """Terminate the bastion and wait until it is gone (its interface holds its subnet and group)."""
    if not _to_delete(scope, INSTANCE_ROLE) or scope.kind_of(INSTANCE_ROLE) not in ("instance", None):
        return
    instances = Instance(scope.aws)
    recorded = scope.recorder.recorded(INSTANCE_ROLE)
    scope.engine.remove(instances, INSTANCE_ROLE, scope.engine_scope)
    if recorded is not None and instances.describe_by_id(recorded.id) is not None:
        raise Waiting(f"bastion instance {recorded.id} is shutting down", 5.0)


def delete_security_group(scope: ClusterScope) -> None:
    if not _to_delete(scope, SECURITY_GROUP_ROLE):
        return
    scope.delete_roles(scope.resources.security_group, [SECURITY_GROUP_ROLE])


class BastionStep(Step[ClusterScope]):
    """A step whose outcome is ``BastionHostReady`` while the bastion is enabled, and no condition
    otherwise (a cluster without a bastion has no such condition; one being removed says ``Deleting``)."""

    def __init__(self, description: str, fn: Any, condition_on_success: bool = True) -> None:
        super().__init__(description, fn, BASTION_HOST_READY, condition_on_success)

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        scope: ClusterScope = ctx.values[SCOPE]
        condition = BASTION_HOST_READY if enabled(scope.obj) else None
        return run_step(scope, self.description, lambda: self.fn(scope), condition, self.condition_on_success)
