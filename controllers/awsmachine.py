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

The bootstrap data is stored in AWS Secrets Manager before the instance is launched, and the instance
gets a script that fetches it; the secrets are deleted once the instance runs and when the machine is
deleted (:mod:`controllers.services.bootstrap`; ``spec.cloudInit.insecureSkipSecretsManager`` puts the data
in the user data instead).

The instance's image is ``spec.ami.id``, else the newest AMI found for the Machine's ``spec.version``
(:mod:`controllers.services.images`); a machine with neither is refused (``MissingAMI``) before anything of
it is built.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from capa_py.api.aws import AWSMACHINE_FINALIZER, AWSCluster, AWSMachine
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster, Machine
from capa_py.api.conditions import READY, set_condition
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.aws.session import ClientPool
from capa_py.ctrlkit.action import Action
from capa_py.ctrlkit.combinators import Sequential
from capa_py.ctrlkit.result import Result, ignore_exit, no_requeue, requeue_after
from capa_py.engine.engine import Engine
from capa_py.engine.recorder import StatusRecorder
from capa_py.logging import get_logger
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore, WatchEvent
from capa_py.tag_budget import merged_tag_issue
from controllers.aws_scope import Step, in_scope
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
from controllers.identity import RECHECK_AFTER, Identities, IdentityError, cluster_name_of
from controllers.identity import WATCHED_KINDS as IDENTITY_WATCHED_KINDS
from controllers.services import bootstrap, ignition, images, instances
from controllers.services.instances import INSTANCE_READY, LB_ATTACHED, MachineScope, security_group_roles

BOOTSTRAP_KEY = "value"
_log = get_logger("controller.awsmachine")


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
        sorted(images.image_lookup_view(awscluster).items(), key=lambda kv: kv[0]),  # a lookup's defaults
    )


CREATE: Action = Sequential(
    Step("StoreBootstrapData", bootstrap.store_bootstrap_data, INSTANCE_READY, condition_on_success=False),
    Step("ReconcileInstance", instances.reconcile_instance, INSTANCE_READY),
    Step("RegisterWithLoadBalancer", instances.register_with_load_balancer, LB_ATTACHED),
    Step("MarkReady", instances.mark_ready),
    Step("DeleteBootstrapData", bootstrap.delete_bootstrap_data),
    Step("DeleteIgnitionDataOnceJoined", ignition.delete_when_joined),
)
"""One create pass of an AWSMachine, run over its :class:`MachineScope`: the bootstrap data stored in
Secrets Manager, the instance launched with the script that fetches it, and, once the instance runs, the
secrets deleted."""

DELETE: Action = Sequential(
    Step("DeleteBootstrapData", bootstrap.delete_bootstrap_data),
    Step("DeleteIgnitionData", ignition.delete_ignition_data),
    Step("DeregisterFromLoadBalancer", instances.deregister),
    Step("TerminateInstance", instances.terminate),
)
"""One delete pass: the bootstrap data's secrets deleted (if any are left), and its Ignition object, out of
the target group, then the instance terminated and waited for."""


class AWSMachineController:
    name = "awsmachine"
    kind = AWSMachine
    watched_kinds: tuple[type[KubeObject], ...] = (Machine, AWSCluster, Cluster, *IDENTITY_WATCHED_KINDS)
    status_kinds = (AWSCluster,)

    def __init__(
        self,
        store: ObjectStore,
        pool: ClientPool,
        engine: Engine,
        events: EventRecorder | None = None,
        identities: Identities | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.identities = identities if identities is not None else Identities(store, pool)
        self.engine = engine
        self.events = events if events is not None else EventRecorder(store)
        # Machines need the cluster's subnets, security groups and target group, not every status write,
        # and of the Cluster only whether it is paused.
        self.views = {"AWSCluster": network_view, "Cluster": paused_view}

    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        obj = event.object
        namespace = obj.metadata.namespace or ""
        # An identity (or a static identity's Secret) changed: the AWSMachines of the clusters using it.
        woken = self._identity_users(event) if isinstance(obj, IDENTITY_WATCHED_KINDS) else []
        if isinstance(obj, IDENTITY_WATCHED_KINDS) and not isinstance(obj, Secret):
            return woken
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
            return woken + [
                ObjectKey("AWSMachine", namespace, m.spec.infrastructure_ref.name or "")
                for m in self.store.list(Machine, namespace=namespace)
                if m.spec.bootstrap.data_secret_name == obj.name
                and m.spec.infrastructure_ref.kind == "AWSMachine"
            ]
        return []

    def _identity_users(self, event: WatchEvent[Any]) -> list[ObjectKey]:
        return [
            ObjectKey("AWSMachine", c.metadata.namespace or "", m.name)
            for c in self.identities.users_of(event.object, event.type == "DELETED")
            if (cluster := cluster_name_of(self.store, c))
            for m in self.store.list(
                AWSMachine, namespace=c.metadata.namespace, label_selector=f"{CLUSTER_NAME_LABEL}={cluster}"
            )
        ]

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
            return self._delete(obj, machine, cluster, awscluster)
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
        if not obj.spec.ami.id and not machine.spec.version:
            return self._waiting(obj, "MissingAMI", images.NO_VERSION_MESSAGE, "Error")
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
        data_format = ignition.bootstrap_format(secret)
        no_bucket = ignition.missing_bucket(obj, awscluster, data_format)
        if no_bucket is not None:
            return self._waiting(obj, "MissingS3Bucket", no_bucket, "Error")
        try:
            pool = self.identities.pool_for(awscluster)
        except IdentityError as exc:
            # Identities are not watched: look again, as the AWSCluster does.
            self._waiting(obj, exc.reason, f"the cluster's identity: {exc}", "Error")
            return requeue_after(RECHECK_AFTER)
        scope = MachineScope(
            self.store,
            StatusRecorder(self.store, obj),
            self.engine,
            pool.for_region(awscluster.spec.region),
            cluster.name,
            {**awscluster.spec.additional_tags, **obj.spec.additional_tags},
            events=self.events,
            machine=machine,
            awscluster=awscluster,
            bootstrap=bootstrap,
            bootstrap_format=data_format,
        )
        result = ignore_exit(CREATE.run(in_scope(scope)))
        scope.summarize(instances.CONDITIONS)
        settle(self, key, scope.obj)
        scope.patch()
        return result

    def _waiting(self, obj: AWSMachine, reason: str, message: str, severity: str = "Info") -> Result:
        def apply(o: AWSMachine) -> None:
            set_condition(o.status, INSTANCE_READY, False, reason, message, severity)
            set_condition(o.status, READY, False, reason, message, severity)

        patch_status(self.store, obj, apply)
        return no_requeue()

    def _delete(
        self, obj: AWSMachine, machine: Machine | None, cluster: Cluster | None, awscluster: object
    ) -> Result:
        if AWSMACHINE_FINALIZER not in obj.metadata.finalizers:
            return no_requeue()
        region = awscluster.spec.region if isinstance(awscluster, AWSCluster) else None
        cluster_name = cluster.name if cluster else obj.metadata.labels.get(CLUSTER_NAME_LABEL, "")
        pool = self.pool
        if isinstance(awscluster, AWSCluster):
            try:
                pool = self.identities.pool_for(awscluster)
            except IdentityError as exc:
                # The instance is in the identity's account: only its credentials can terminate it.
                self._waiting(obj, exc.reason, f"the cluster's identity: {exc}", "Error")
                return requeue_after(RECHECK_AFTER)
        scope = ignition.MachineDeleteScope(
            self.store,
            StatusRecorder(self.store, obj),
            self.engine,
            pool.for_region(region),
            cluster_name,
            events=self.events,
            ignition=ignition.objects_of(self.store, obj, machine, awscluster),
        )

        def deleting(o: AWSMachine) -> None:
            o.status.ready = False
            set_condition(o.status, READY, False, "Deleting", "terminating the instance", "Info")

        scope.change_status(deleting)
        result = DELETE.run(in_scope(scope))
        scope.patch()
        if result.interrupts:
            if scope.waiting_on:
                self.events.normal(scope.obj, DELETION_BLOCKED, scope.waiting_on)
            return result
        remove_finalizer(self.store, scope.obj, AWSMACHINE_FINALIZER)
        _log.info("machine infrastructure deleted", machine=obj.name)
        return no_requeue()
