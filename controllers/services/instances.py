"""The instances service: one EC2 instance per AWSMachine, registered with the API load balancer.

Create, over a :class:`MachineScope`:

1. :func:`reconcile_instance` — the instance in a subnet and the security groups the AWSCluster records,
   run through the engine (tags on create, a client token from the object's uid), its id, addresses,
   ``providerID`` and state in status; a pending instance is polled at the InstanceRunning waiter's
   cadence (``InstanceReady``);
2. :func:`register_with_load_balancer` — a control-plane instance joins the API server's target group
   once its ARN is recorded (``ELBAttached``).

Delete, over the machine's :class:`~controllers.aws_scope.ReconcileScope`: :func:`deregister`, then
:func:`terminate`, which waits until the instance is gone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from capa_py.api.aws import AWSCluster, AWSMachine, CloudInit
from capa_py.api.cluster import Machine, MachineAddress
from capa_py.aws.errors import AWSError, InvalidRequest
from capa_py.engine.errors import Waiting
from capa_py.engine.resource import Observed
from capa_py.engine.tags import CONTROL_PLANE_ROLE, NODE_ROLE
from controllers.aws_scope import ReconcileScope
from controllers.references import explain_create_failure, network_reference_error
from controllers.services import images
from controllers.waits import INSTANCE_RUNNING, just_created
from resources.instance import Instance, InstanceDesired
from resources.target_group import TargetRegistration, TargetRegistrationDesired

INSTANCE_READY = "InstanceReady"
LB_ATTACHED = "ELBAttached"
CONDITIONS = (INSTANCE_READY, LB_ATTACHED)
REGISTRATION_ROLE = "lb-registration"


def instance_role(machine_name: str) -> str:
    """The engine role of a machine's instance: unique per AWSMachine, because lookups by tags match the
    cluster and role tags only, and every machine of a cluster carries the same cluster tag."""
    return f"instance-{machine_name}"


def security_group_roles(is_control_plane: bool) -> tuple[str, ...]:
    """The cluster security groups (``status.network.securityGroups`` keys) a machine's instance joins."""
    return ("controlplane", "node", "lb") if is_control_plane else ("node", "lb")


def provider_id(observed: Observed) -> str:
    zone = observed.attributes.get("availability_zone") or ""
    return f"aws:///{zone}/{observed.id}"


def addresses(observed: Observed) -> list[MachineAddress]:
    found: list[MachineAddress] = []
    pairs = (
        ("InternalIP", "private_ip"),
        ("ExternalIP", "public_ip"),
        ("InternalDNS", "private_dns_name"),
        ("ExternalDNS", "public_dns_name"),
    )
    for address_type, attribute in pairs:
        value = observed.attributes.get(attribute)
        if value:
            found.append(MachineAddress(type=address_type, address=str(value)))
    return found


@dataclass(kw_only=True)
class MachineScope(ReconcileScope[AWSMachine]):
    """One create pass of one AWSMachine: its Machine, its cluster's AWSCluster and bootstrap data."""

    machine: Machine
    awscluster: AWSCluster
    bootstrap: bytes
    bootstrap_format: str = "cloud-config"
    """The bootstrap Secret's ``format``: ``cloud-config`` or ``ignition``."""
    instance: Observed | None = field(init=False, default=None)
    """The instance as observed in this pass."""
    user_data: bytes = field(init=False, default=b"", repr=False)
    """What the instance is launched with (:mod:`controllers.services.bootstrap` decides): the script that
    fetches the bootstrap data from Secrets Manager, or the data itself when the machine opts out."""
    cloud_init: tuple[str, int] | None = field(init=False, default=None)
    """Where this pass stored the bootstrap data (secret prefix, count), for ``spec.cloudInit``."""
    instances: Instance = field(init=False)
    registrations: TargetRegistration = field(init=False)

    def __post_init__(self) -> None:
        self.instances = Instance(self.aws)
        self.registrations = TargetRegistration(self.aws)


def pick_subnet(scope: MachineScope) -> str:
    spec, machine = scope.obj.spec, scope.machine
    if spec.subnet is not None and spec.subnet.id:
        return spec.subnet.id
    subnets = scope.awscluster.status.network.subnets
    zone = machine.spec.failure_domain
    in_zone = [s for s in subnets if zone is None or s.availability_zone == zone]
    if spec.public_ip:
        # As Cluster API Provider AWS: a machine asking for a public address goes to a public subnet.
        candidates = [s for s in in_zone if s.is_public]
        if not candidates:
            raise InvalidRequest(
                f"spec.publicIP: no public subnet for machine {machine.name} (failureDomain {zone!r})",
                code="NoPublicSubnet",
            )
    else:
        candidates = [s for s in in_zone if not s.is_public] or in_zone
    if not candidates:
        raise InvalidRequest(
            f"no subnet for machine {machine.name} (failureDomain {zone!r})", code="NoSubnet"
        )
    candidates.sort(key=lambda s: (s.availability_zone, s.id))
    # Spread machines over zones deterministically: the same machine always lands in the same subnet.
    index = int(hashlib.sha256(scope.obj.name.encode()).hexdigest(), 16) % len(candidates)
    return candidates[index].id


def security_groups(scope: MachineScope) -> tuple[str, ...]:
    groups = scope.awscluster.status.network.security_groups
    ids = [groups[r].id for r in security_group_roles(scope.machine.is_control_plane) if r in groups]
    ids += [g.id for g in scope.obj.spec.additional_security_groups if g.id]
    return tuple(dict.fromkeys(ids))


def desired(scope: MachineScope) -> InstanceDesired:
    role = instance_role(scope.obj.name)
    recorded = scope.recorder.recorded(role)
    launched = recorded is not None or scope.recorder.intent(role) is not None
    image_id = None
    if recorded is not None and not scope.obj.spec.ami.id and scope.obj.status.ami is None:
        # An instance whose machine does not say which image it got (its status was lost): the image it
        # runs is the machine's, whatever a lookup would find now.
        running = scope.instances.describe_by_id(recorded.id)
        image_id = str(running.attributes.get("image_id") or "") if running is not None else None
    if not image_id:
        image_id = images.machine_image(scope.aws, scope.recorder, scope.machine, scope.awscluster, launched)
    spec = scope.obj.spec
    root_device = None
    if recorded is None:
        # Only before a create: confirms the AMI exists (a bad AMI is a user error, not a retry), and
        # the subnet and groups the spec names, if any.
        root_device = scope.instances.root_device_name(image_id)
        missing_reference = network_reference_error(scope.aws, spec)
        if missing_reference is not None:
            raise missing_reference
    volume = spec.root_volume
    return InstanceDesired(
        image_id=image_id,
        instance_type=spec.instance_type,
        subnet_id=pick_subnet(scope),
        security_group_ids=security_groups(scope),
        iam_instance_profile=spec.iam_instance_profile,
        key_name=spec.ssh_key_name or scope.awscluster.spec.ssh_key_name,
        root_volume_size=volume.size if volume else None,
        root_volume_type=volume.type if volume else "gp3",
        root_volume_iops=volume.iops if volume else None,
        root_volume_encrypted=volume.encrypted if volume else None,
        root_device_name=root_device,
        public_ip=spec.public_ip,
        spot=spec.spot_market_options is not None,
        spot_max_price=spec.spot_market_options.max_price if spec.spot_market_options else None,
        user_data=scope.user_data,
    )


def reconcile_instance(scope: MachineScope) -> None:
    role = instance_role(scope.obj.name)
    before = scope.recorder.recorded(role)
    try:
        observed = scope.engine.ensure(
            scope.instances,
            role,
            desired(scope),
            scope.engine_scope,
            name=scope.obj.name,
            capa_role_value=CONTROL_PLANE_ROLE if scope.machine.is_control_plane else NODE_ROLE,
        )
    except AWSError as exc:
        # A subnet, group, AMI, key pair or profile the spec names may not exist: say which field.
        explained = explain_create_failure(scope.aws, scope.obj.spec, scope.awscluster.spec.ssh_key_name, exc)
        if explained is exc:
            raise
        raise explained from exc
    scope.instance = observed
    instance_id, pid, state, found = observed.id, provider_id(observed), observed.state, addresses(observed)

    def status(o: AWSMachine) -> None:
        o.status.instance_id = instance_id
        o.status.provider_id = pid
        o.status.instance_state = state  # type: ignore[assignment]
        o.status.addresses = [a.model_copy() for a in found]

    scope.change_status(status)
    stored = scope.cloud_init
    if scope.obj.spec.provider_id != pid or (stored is not None and not _remembers(scope.obj, *stored)):

        def set_spec(o: AWSMachine) -> None:
            o.spec.provider_id = pid
            o.spec.instance_id = instance_id
            if stored is not None:
                # Where the bootstrap data is, kept in the spec as CAPA does: a move loses the status.
                cloud_init = o.spec.cloud_init or CloudInit()
                o.spec.cloud_init = cloud_init.model_copy(
                    update={"secret_prefix": stored[0], "secret_count": stored[1]}
                )

        scope.update_spec(set_spec)
    if not scope.instances.is_ready(observed):
        created = before is None or before.id != instance_id or just_created(observed.created_at)
        raise Waiting(
            f"instance {instance_id} is {state}", INSTANCE_RUNNING.requeue(created, observed.created_at)
        )


def _remembers(obj: AWSMachine, prefix: str, count: int) -> bool:
    cloud_init = obj.spec.cloud_init
    return cloud_init is not None and (cloud_init.secret_prefix, cloud_init.secret_count) == (prefix, count)


def register_with_load_balancer(scope: MachineScope) -> None:
    if not scope.machine.is_control_plane:
        return
    lb = scope.awscluster.status.network.api_server_load_balancer
    if lb is None or not lb.target_group_arn:
        raise Waiting("the API server target group is not recorded yet", 5.0)
    assert scope.instance is not None
    scope.engine.ensure(
        scope.registrations,
        REGISTRATION_ROLE,
        TargetRegistrationDesired(lb.target_group_arn, scope.instance.id),
        scope.engine_scope,
    )


def mark_ready(scope: MachineScope) -> None:
    scope.mark_ready()


def deregister(scope: ReconcileScope[AWSMachine]) -> None:
    scope.engine.remove(TargetRegistration(scope.aws), REGISTRATION_ROLE, scope.engine_scope)


def terminate(scope: ReconcileScope[AWSMachine]) -> None:
    """Terminate the instance and wait until it is gone."""
    instances = Instance(scope.aws)
    role = instance_role(scope.obj.name)
    recorded = scope.recorder.recorded(role)
    scope.engine.remove(instances, role, scope.engine_scope)
    if recorded is not None and instances.describe_by_id(recorded.id) is not None:
        raise Waiting(f"instance {recorded.id} is shutting down", 5.0)
