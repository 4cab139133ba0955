"""The AWSMachine controller: one EC2 instance per machine, registered with the API load balancer.

It waits for what its instance needs of the cluster — the subnets and security groups the AWSCluster
records in ``status.network`` as soon as they exist, not the whole cluster being ready (NAT gateways and
the load balancer may still be pending) — and for the bootstrap data secret, then runs the instance
through the engine — tags on create, and on AWS a client token from the object's uid — so the instance id
is recorded in status the moment ``RunInstances`` returns, never in a deferred patch. Control-plane
machines are registered with the API server target group once its ARN is recorded (the load balancer may
still be provisioning). Addresses, ``providerID`` and ``instanceState`` go to status; ``InstanceReady``
says where it stands, and a pending instance is polled at the InstanceRunning waiter's cadence. Delete
deregisters, terminates, waits until the instance is gone, then drops the finalizer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from capa_py.api.aws import AWSMACHINE_FINALIZER, AWSCluster, AWSMachine
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster, Machine, MachineAddress
from capa_py.api.conditions import READY, set_condition
from capa_py.api.core import Secret
from capa_py.aws.errors import AWSError, InvalidRequest
from capa_py.aws.session import ClientPool
from capa_py.ctrlkit.action import Action, Context
from capa_py.ctrlkit.combinators import Sequential
from capa_py.ctrlkit.result import Result, ignore_exit, no_requeue
from capa_py.engine.engine import Engine
from capa_py.engine.errors import Waiting
from capa_py.engine.recorder import StatusRecorder
from capa_py.engine.resource import Observed
from capa_py.engine.tags import CONTROL_PLANE_ROLE, NODE_ROLE
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore, WatchEvent
from capa_py.tag_budget import merged_tag_issue
from controllers.aws_scope import ReconcileScope, step
from controllers.base import (
    add_finalizer,
    fetch,
    left_alone,
    mark_paused,
    on_pause_transition,
    patch_status,
    pause_reason,
    paused_view,
    record_store_uid,
    remove_finalizer,
    resolve_ref,
    settle,
)
from controllers.events import DELETION_BLOCKED
from controllers.references import explain_create_failure, network_reference_error
from controllers.waits import INSTANCE_RUNNING, just_created
from resources.instance import Instance, InstanceDesired
from resources.load_balancer import TargetRegistration, TargetRegistrationDesired

INSTANCE_READY = "InstanceReady"
LB_ATTACHED = "ELBAttached"
BOOTSTRAP_KEY = "value"
_log = get_logger("controller.awsmachine")


def instance_role(machine_name: str) -> str:
    """The engine role of a machine's instance: unique per AWSMachine, because lookups by tags match the
    cluster and role tags only, and every machine of a cluster carries the same cluster tag."""
    return f"instance-{machine_name}"


def security_group_roles(is_control_plane: bool) -> tuple[str, ...]:
    """The cluster security groups (``status.network.securityGroups`` keys) a machine's instance joins."""
    return ("controlplane", "node", "lb") if is_control_plane else ("node", "lb")


def missing_infrastructure(awscluster: AWSCluster, machine: Machine) -> str | None:
    """What of the cluster's network the machine's instance needs and is not recorded yet (or that the
    cluster is going away), or None."""
    if awscluster.being_deleted:
        return f"{awscluster.ref()} is being deleted"
    network = awscluster.status.network
    missing = [] if network.subnets else ["subnets"]
    groups = [r for r in security_group_roles(machine.is_control_plane) if r not in network.security_groups]
    if groups:
        missing.append(f"security groups {', '.join(groups)}")
    if not missing:
        return None
    return f"{awscluster.ref()} has not recorded its {' and '.join(missing)} yet"


def network_view(awscluster: AWSCluster) -> object:
    """What machines need of an AWSCluster: its subnets, security groups and target group (a change to
    anything else, such as a route table or the cluster becoming ready, does not wake them). Nothing
    until the subnets and every cluster security group are recorded: a machine can launch only then, and
    the parts recorded one write apart would otherwise wake it once per part."""
    network = awscluster.status.network
    if not network.subnets or any(r not in network.security_groups for r in security_group_roles(True)):
        return None
    lb = network.api_server_load_balancer
    return (
        [(s.id, s.availability_zone, s.is_public) for s in network.subnets],
        {role: group.id for role, group in network.security_groups.items()},
        lb.target_group_arn if lb is not None else None,
        sorted(awscluster.spec.additional_tags.items()),  # the machines' instances carry them too
    )


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


class MachineReconcile:
    def __init__(
        self,
        scope: ReconcileScope[AWSMachine],
        machine: Machine,
        awscluster: AWSCluster,
        bootstrap: bytes,
    ) -> None:
        self.scope = scope
        self.machine = machine
        self.awscluster = awscluster
        self.bootstrap = bootstrap
        self.instance_rc = Instance(scope.aws)
        self.registration_rc = TargetRegistration(scope.aws)
        self.instance: Observed | None = None

    @property
    def obj(self) -> AWSMachine:
        return self.scope.obj

    def pick_subnet(self) -> str:
        if self.obj.spec.subnet is not None and self.obj.spec.subnet.id:
            return self.obj.spec.subnet.id
        subnets = self.awscluster.status.network.subnets
        zone = self.machine.spec.failure_domain
        in_zone = [s for s in subnets if zone is None or s.availability_zone == zone]
        if self.obj.spec.public_ip:
            # As Cluster API Provider AWS: a machine asking for a public address goes to a public subnet.
            candidates = [s for s in in_zone if s.is_public]
            if not candidates:
                raise InvalidRequest(
                    f"spec.publicIP: no public subnet for machine {self.machine.name} "
                    f"(failureDomain {zone!r})",
                    code="NoPublicSubnet",
                )
        else:
            candidates = [s for s in in_zone if not s.is_public] or in_zone
        if not candidates:
            raise InvalidRequest(
                f"no subnet for machine {self.machine.name} (failureDomain {zone!r})", code="NoSubnet"
            )
        candidates.sort(key=lambda s: (s.availability_zone, s.id))
        # Spread machines over zones deterministically: the same machine always lands in the same subnet.
        index = int(hashlib.sha256(self.obj.name.encode()).hexdigest(), 16) % len(candidates)
        return candidates[index].id

    def security_groups(self) -> tuple[str, ...]:
        groups = self.awscluster.status.network.security_groups
        ids = [groups[r].id for r in security_group_roles(self.machine.is_control_plane) if r in groups]
        ids += [g.id for g in self.obj.spec.additional_security_groups if g.id]
        return tuple(dict.fromkeys(ids))

    def desired(self) -> InstanceDesired:
        spec = self.obj.spec
        if not spec.ami.id:
            raise InvalidRequest("spec.ami.id is required (AMI lookup is not supported)", code="MissingAMI")
        root_device = None
        if self.scope.recorder.recorded(instance_role(self.obj.name)) is None:
            # Only before a create: confirms the AMI exists (a bad AMI is a user error, not a retry), and
            # the subnet and groups the spec names, if any.
            root_device = self.instance_rc.root_device_name(spec.ami.id)
            missing_reference = network_reference_error(self.scope.aws, spec)
            if missing_reference is not None:
                raise missing_reference
        volume = spec.root_volume
        return InstanceDesired(
            image_id=spec.ami.id,
            instance_type=spec.instance_type,
            subnet_id=self.pick_subnet(),
            security_group_ids=self.security_groups(),
            iam_instance_profile=spec.iam_instance_profile,
            key_name=spec.ssh_key_name or self.awscluster.spec.ssh_key_name,
            root_volume_size=volume.size if volume else None,
            root_volume_type=volume.type if volume else "gp3",
            root_volume_iops=volume.iops if volume else None,
            root_volume_encrypted=volume.encrypted if volume else None,
            root_device_name=root_device,
            public_ip=spec.public_ip,
            user_data=self.bootstrap,
        )

    def reconcile_instance(self) -> Result | None:
        role = instance_role(self.obj.name)
        before = self.scope.recorder.recorded(role)
        try:
            observed = self.scope.engine.ensure(
                self.instance_rc,
                role,
                self.desired(),
                self.scope.engine_scope,
                name=self.obj.name,
                capa_role_value=CONTROL_PLANE_ROLE if self.machine.is_control_plane else NODE_ROLE,
            )
        except AWSError as exc:
            # A subnet, group, AMI, key pair or profile the spec names may not exist: say which field.
            explained = explain_create_failure(
                self.scope.aws, self.obj.spec, self.awscluster.spec.ssh_key_name, exc
            )
            if explained is exc:
                raise
            raise explained from exc
        self.instance = observed
        instance_id, pid, state, found = (
            observed.id,
            provider_id(observed),
            observed.state,
            addresses(observed),
        )

        def status(o: AWSMachine) -> None:
            o.status.instance_id = instance_id
            o.status.provider_id = pid
            o.status.instance_state = state  # type: ignore[assignment]
            o.status.addresses = [a.model_copy() for a in found]

        self.scope.change_status(status)
        if self.obj.spec.provider_id != pid:

            def set_spec(o: AWSMachine) -> None:
                o.spec.provider_id = pid
                o.spec.instance_id = instance_id

            self.scope.update_spec(set_spec)
        if not self.instance_rc.is_ready(observed):
            created = before is None or before.id != instance_id or just_created(observed.created_at)
            raise Waiting(f"instance {instance_id} is {state}", INSTANCE_RUNNING.requeue(created))
        return None

    def reconcile_load_balancer(self) -> Result | None:
        if not self.machine.is_control_plane:
            return None
        lb = self.awscluster.status.network.api_server_load_balancer
        if lb is None or not lb.target_group_arn:
            raise Waiting("the API server target group is not recorded yet", 5.0)
        assert self.instance is not None
        self.scope.engine.ensure(
            self.registration_rc,
            "lb-registration",
            TargetRegistrationDesired(lb.target_group_arn, self.instance.id),
            self.scope.engine_scope,
        )
        return None

    def mark_ready(self) -> Result | None:
        self.scope.mark_ready()
        return None

    def create_workflow(self) -> Action:
        s = self.scope
        return Sequential(
            step(s, "ReconcileInstance", self.reconcile_instance, INSTANCE_READY),
            step(s, "RegisterWithLoadBalancer", self.reconcile_load_balancer, LB_ATTACHED),
            step(s, "MarkReady", self.mark_ready),
        )

    def create(self) -> Result:
        return self.create_workflow().run(Context())


class AWSMachineController:
    name = "awsmachine"
    kind = AWSMachine
    watched_kinds = (Machine, AWSCluster, Secret, Cluster)
    status_kinds = (AWSCluster,)

    def __init__(
        self, store: ObjectStore, pool: ClientPool, engine: Engine, events: EventRecorder | None = None
    ) -> None:
        self.store = store
        self.pool = pool
        self.engine = engine
        self.events = events if events is not None else EventRecorder(store)
        # Machines need the cluster's subnets, security groups and target group, not every status write,
        # and of the Cluster only whether it is paused.
        self.views = {"AWSCluster": network_view, "Cluster": paused_view}

    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        obj = event.object
        namespace = obj.metadata.namespace or ""
        if isinstance(obj, Machine):
            name = obj.infrastructure_name("AWSMachine")
            return [ObjectKey("AWSMachine", namespace, name)] if name else []
        if isinstance(obj, AWSCluster):
            cluster = obj.metadata.labels.get(CLUSTER_NAME_LABEL)
            if not cluster:
                return []
            return [
                ObjectKey("AWSMachine", namespace, m.name)
                for m in self.store.list(
                    AWSMachine, namespace=namespace, label_selector=f"{CLUSTER_NAME_LABEL}={cluster}"
                )
            ]
        if isinstance(obj, Cluster):
            return on_pause_transition(self.store, event, "AWSMachine")
        if isinstance(obj, Secret):
            return [
                ObjectKey("AWSMachine", namespace, m.spec.infrastructure_ref.name or "")
                for m in self.store.list(Machine, namespace=namespace)
                if m.spec.bootstrap.data_secret_name == obj.name
                and m.spec.infrastructure_ref.kind == "AWSMachine"
            ]
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        obj = fetch(self.store, AWSMachine, key)
        if obj is None:
            return no_requeue()
        owner = next((r for r in obj.metadata.owner_references if r.kind == "Machine"), None)
        machine = get_or_none(self.store, Machine, owner.name, obj.namespace) if owner else None
        cluster = (
            get_or_none(self.store, Cluster, machine.spec.cluster_name, obj.namespace) if machine else None
        )
        awscluster = (
            resolve_ref(self.store, cluster.spec.infrastructure_ref, obj.namespace) if cluster else None
        )
        if obj.being_deleted:
            if left_alone(obj, cluster):
                return no_requeue()
            return self._delete(obj, cluster, awscluster)
        if machine is None or cluster is None:
            return no_requeue()  # Cluster API core has not claimed it yet
        paused = pause_reason(obj, cluster)
        if paused is not None:
            mark_paused(self.store, obj, paused)
            return no_requeue()
        if not isinstance(awscluster, AWSCluster):
            return self._waiting(obj, "WaitingForClusterInfrastructure", "the AWSCluster does not exist yet")
        obj = add_finalizer(self.store, obj, AWSMACHINE_FINALIZER)
        obj = record_store_uid(self.store, obj)
        missing = missing_infrastructure(awscluster, machine)
        if missing is not None:
            return self._waiting(obj, "WaitingForClusterInfrastructure", missing)
        tags_issue = merged_tag_issue(awscluster.spec.additional_tags, obj.spec.additional_tags)
        if tags_issue is not None:
            return self._waiting(obj, "InvalidTags", f"spec.additionalTags: {tags_issue}", "Error")
        secret_name = machine.spec.bootstrap.data_secret_name
        if not secret_name:
            return self._waiting(
                obj, "WaitingForBootstrapData", "the machine has no bootstrap data secret yet"
            )
        secret = get_or_none(self.store, Secret, secret_name, obj.namespace)
        if secret is None:
            return self._waiting(obj, "WaitingForBootstrapData", f"secret {secret_name} does not exist")
        try:
            bootstrap = secret.value(BOOTSTRAP_KEY)
        except KeyError:
            return self._waiting(
                obj, "WaitingForBootstrapData", f"secret {secret_name} has no key {BOOTSTRAP_KEY!r}"
            )
        scope = ReconcileScope(
            self.store,
            StatusRecorder(self.store, obj),
            self.engine,
            self.pool.for_region(awscluster.spec.region),
            cluster.name,
            {**awscluster.spec.additional_tags, **obj.spec.additional_tags},
            events=self.events,
        )
        result = ignore_exit(MachineReconcile(scope, machine, awscluster, bootstrap).create())
        scope.summarize((INSTANCE_READY, LB_ATTACHED))
        settle(self, key, scope.obj)
        scope.patch()
        return result

    def _waiting(self, obj: AWSMachine, reason: str, message: str, severity: str = "Info") -> Result:
        def apply(o: AWSMachine) -> None:
            set_condition(o.status, INSTANCE_READY, False, reason, message, severity)
            set_condition(o.status, READY, False, reason, message, severity)

        patch_status(self.store, obj, apply)
        return no_requeue()

    def _delete(self, obj: AWSMachine, cluster: Cluster | None, awscluster: object) -> Result:
        if AWSMACHINE_FINALIZER not in obj.metadata.finalizers:
            return no_requeue()
        region = awscluster.spec.region if isinstance(awscluster, AWSCluster) else None
        cluster_name = cluster.name if cluster else obj.metadata.labels.get(CLUSTER_NAME_LABEL, "")
        scope = ReconcileScope(
            self.store,
            StatusRecorder(self.store, obj),
            self.engine,
            self.pool.for_region(region),
            cluster_name,
            events=self.events,
        )
        instance_rc = Instance(scope.aws)
        registration_rc = TargetRegistration(scope.aws)

        def deregister() -> Result | None:
            self.engine.remove(registration_rc, "lb-registration", scope.engine_scope)
            return None

        def terminate() -> Result | None:
            role = instance_role(obj.name)
            recorded = scope.recorder.recorded(role)
            self.engine.remove(instance_rc, role, scope.engine_scope)
            if recorded is not None and instance_rc.describe_by_id(recorded.id) is not None:
                raise Waiting(f"instance {recorded.id} is shutting down", 5.0)
            return None

        def deleting(o: AWSMachine) -> None:
            o.status.ready = False
            set_condition(o.status, READY, False, "Deleting", "terminating the instance", "Info")

        scope.change_status(deleting)
        result = Sequential(
            step(scope, "DeregisterFromLoadBalancer", deregister),
            step(scope, "TerminateInstance", terminate),
        ).run(Context())
        scope.patch()
        if result.interrupts:
            if scope.waiting_on:
                self.events.normal(scope.obj, DELETION_BLOCKED, scope.waiting_on)
            return result
        remove_finalizer(self.store, scope.obj, AWSMACHINE_FINALIZER)
        _log.info("machine infrastructure deleted", machine=obj.name)
        return no_requeue()
