"""The AWSMachinePool controller: an Auto Scaling group over a launch template, per machine pool.

Thin, as the AWSMachine controller: fetch, pause, finalizer, then the create pass or the delete pass of
:mod:`controllers.services.machinepool`. It waits for what the pool needs of the cluster (its subnets and
node security groups recorded by the AWSCluster) and for the MachinePool's bootstrap data secret; a pool
with neither ``awsLaunchTemplate.ami.id`` nor a Kubernetes version to look an image up by is refused
(``MissingAMI``) before anything is built. Delete: the group (ForceDelete, waited for until AWS no longer
reports it), then the launch template, then the finalizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from capa_py.api.aws import AWSCluster
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster
from capa_py.api.conditions import READY, set_condition
from capa_py.api.core import Secret
from capa_py.api.machinepool import AWSMACHINEPOOL_FINALIZER, AWSMachinePool, MachinePool
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
from controllers.aws_scope import ReconcileScope, Step, in_scope
from controllers.awsmachine import BOOTSTRAP_KEY, network_view
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
from controllers.services import images, machinepool
from controllers.services.instances import security_group_roles
from controllers.services.machinepool import ASG_READY, LAUNCH_TEMPLATE_READY, PoolScope

_log = get_logger("controller.awsmachinepool")

CREATE: Action = Sequential(
    Step("ReconcileLaunchTemplate", machinepool.reconcile_launch_template, LAUNCH_TEMPLATE_READY),
    Step(
        "ReconcileLaunchTemplateVersion", machinepool.reconcile_launch_template_version, LAUNCH_TEMPLATE_READY
    ),
    Step("ReconcileAutoScalingGroup", machinepool.reconcile_group, ASG_READY),
    Step("MarkReady", machinepool.mark_ready),
)
"""One create pass of an AWSMachinePool, over its :class:`PoolScope`."""

DELETE: Action = Sequential(
    Step("DeleteAutoScalingGroup", machinepool.delete_group),
    Step("DeleteLaunchTemplate", machinepool.delete_launch_template),
)
"""One delete pass: the group and its instances, waited for, then the template and its versions."""


def missing_infrastructure(awscluster: AWSCluster) -> str | None:
    if awscluster.being_deleted:
        return f"{awscluster.ref()} is being deleted"
    network = awscluster.status.network
    missing = [] if network.subnets else ["subnets"]
    groups = [r for r in security_group_roles(False) if r not in network.security_groups]
    if groups:
        missing.append(f"security groups {', '.join(groups)}")
    return f"{awscluster.ref()} has not recorded its {' and '.join(missing)} yet" if missing else None


class AWSMachinePoolController:
    name = "awsmachinepool"
    kind = AWSMachinePool
    watched_kinds: tuple[type[KubeObject], ...] = (MachinePool, AWSCluster, Cluster, *IDENTITY_WATCHED_KINDS)
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
        self.engine = engine
        self.events = events if events is not None else EventRecorder(store)
        self.identities = identities if identities is not None else Identities(store, pool)
        self.views = {"AWSCluster": network_view, "Cluster": paused_view}

    def map_event(self, event: WatchEvent[Any]) -> Iterable[ObjectKey]:
        obj = event.object
        namespace = obj.metadata.namespace or ""
        # An identity (or a static identity's Secret) changed: the AWSMachinePools of the clusters using it.
        woken = self._identity_users(event) if isinstance(obj, IDENTITY_WATCHED_KINDS) else []
        if isinstance(obj, IDENTITY_WATCHED_KINDS) and not isinstance(obj, Secret):
            return woken
        if isinstance(obj, MachinePool):
            name = obj.infrastructure_name("AWSMachinePool")
            return [ObjectKey("AWSMachinePool", namespace, name)] if name else []
        if isinstance(obj, AWSCluster):
            cluster = obj.metadata.labels.get(CLUSTER_NAME_LABEL)
            if not cluster:
                return []
            return [
                ObjectKey("AWSMachinePool", namespace, p.name)
                for p in self.store.list(
                    AWSMachinePool, namespace=namespace, label_selector=f"{CLUSTER_NAME_LABEL}={cluster}"
                )
            ]
        if isinstance(obj, Cluster):
            return on_pause_transition(self.store, event, "AWSMachinePool")
        if isinstance(obj, Secret):
            return woken + [
                ObjectKey("AWSMachinePool", namespace, p.spec.template.spec.infrastructure_ref.name or "")
                for p in self.store.list(MachinePool, namespace=namespace)
                if p.spec.template.spec.bootstrap.data_secret_name == obj.name
                and p.spec.template.spec.infrastructure_ref.kind == "AWSMachinePool"
            ]
        return []

    def _identity_users(self, event: WatchEvent[Any]) -> list[ObjectKey]:
        return [
            ObjectKey("AWSMachinePool", c.metadata.namespace or "", m.name)
            for c in self.identities.users_of(event.object, event.type == "DELETED")
            if (cluster := cluster_name_of(self.store, c))
            for m in self.store.list(
                AWSMachinePool,
                namespace=c.metadata.namespace,
                label_selector=f"{CLUSTER_NAME_LABEL}={cluster}",
            )
        ]

    def reconcile(self, key: ObjectKey) -> Result:
        obj = fetch(self.store, AWSMachinePool, key)
        if obj is None:
            return no_requeue()
        owner = next((r for r in obj.metadata.owner_references if r.kind == "MachinePool"), None)
        machine_pool = get_or_none(self.store, MachinePool, owner.name, obj.namespace) if owner else None
        cluster = (
            get_or_none(self.store, Cluster, machine_pool.spec.cluster_name, obj.namespace)
            if machine_pool
            else None
        )
        awscluster = (
            resolve_ref(self.store, cluster.spec.infrastructure_ref, obj.namespace) if cluster else None
        )
        if obj.being_deleted:
            if left_alone(obj, cluster):
                return no_requeue()
            return self._delete(obj, cluster, awscluster)
        if machine_pool is None or cluster is None:
            return no_requeue()  # Cluster API core has not claimed it yet
        paused = pause_reason(obj, cluster)
        if paused is not None:
            mark_paused(self.store, obj, paused)
            return no_requeue()
        if not isinstance(awscluster, AWSCluster):
            return self._waiting(obj, "WaitingForClusterInfrastructure", "the AWSCluster does not exist yet")
        obj = add_finalizer(self.store, obj, AWSMACHINEPOOL_FINALIZER)
        obj = record_store_uid(self.store, obj)
        if not obj.spec.aws_launch_template.ami.id and not machine_pool.spec.template.spec.version:
            return self._waiting(obj, "MissingAMI", images.NO_VERSION_MESSAGE, "Error")
        missing = missing_infrastructure(awscluster)
        if missing is not None:
            return self._waiting(obj, "WaitingForClusterInfrastructure", missing)
        tags_issue = merged_tag_issue(awscluster.spec.additional_tags, obj.spec.additional_tags)
        if tags_issue is not None:
            return self._waiting(obj, "InvalidTags", f"spec.additionalTags: {tags_issue}", "Error")
        secret_name = machine_pool.spec.template.spec.bootstrap.data_secret_name
        if not secret_name:
            return self._waiting(
                obj, "WaitingForBootstrapData", "the machine pool has no bootstrap data secret"
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
        try:
            pool = self.identities.pool_for(awscluster)
        except IdentityError as exc:
            # Identities are not watched: look again, as the AWSCluster does.
            self._waiting(obj, exc.reason, f"the cluster's identity: {exc}", "Error")
            return requeue_after(RECHECK_AFTER)
        scope = PoolScope(
            self.store,
            StatusRecorder(self.store, obj),
            self.engine,
            pool.for_region(awscluster.spec.region),
            cluster.name,
            {**awscluster.spec.additional_tags, **obj.spec.additional_tags},
            events=self.events,
            machine_pool=machine_pool,
            awscluster=awscluster,
            bootstrap=bootstrap,
        )
        result = ignore_exit(CREATE.run(in_scope(scope)))
        scope.summarize(machinepool.CONDITIONS)
        settle(self, key, scope.obj)
        scope.patch()
        return result

    def _waiting(self, obj: AWSMachinePool, reason: str, message: str, severity: str = "Info") -> Result:
        def apply(o: AWSMachinePool) -> None:
            set_condition(o.status, ASG_READY, False, reason, message, severity)
            set_condition(o.status, READY, False, reason, message, severity)

        patch_status(self.store, obj, apply)
        return no_requeue()

    def _delete(self, obj: AWSMachinePool, cluster: Cluster | None, awscluster: object) -> Result:
        if AWSMACHINEPOOL_FINALIZER not in obj.metadata.finalizers:
            return no_requeue()
        region = awscluster.spec.region if isinstance(awscluster, AWSCluster) else None
        cluster_name = cluster.name if cluster else obj.metadata.labels.get(CLUSTER_NAME_LABEL, "")
        pool = self.pool
        if isinstance(awscluster, AWSCluster):
            try:
                pool = self.identities.pool_for(awscluster)
            except IdentityError as exc:
                # The group is in the identity's account: only its credentials can delete it.
                self._waiting(obj, exc.reason, f"the cluster's identity: {exc}", "Error")
                return requeue_after(RECHECK_AFTER)
        scope = ReconcileScope(
            self.store,
            StatusRecorder(self.store, obj),
            self.engine,
            pool.for_region(region),
            cluster_name,
            events=self.events,
        )

        def deleting(o: AWSMachinePool) -> None:
            o.status.ready = False
            set_condition(o.status, READY, False, "Deleting", "deleting the Auto Scaling group", "Info")

        scope.change_status(deleting)
        result = DELETE.run(in_scope(scope))
        scope.patch()
        if result.interrupts:
            if scope.waiting_on:
                self.events.normal(scope.obj, DELETION_BLOCKED, scope.waiting_on)
            return result
        remove_finalizer(self.store, scope.obj, AWSMACHINEPOOL_FINALIZER)
        _log.info("machine pool infrastructure deleted", pool=obj.name)
        return no_requeue()
