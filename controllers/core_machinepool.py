"""Cluster API core's MachinePool controller, as capa-py's embedded core runs it.

A MachinePool belongs to its Cluster (an owner reference, the ``cluster.x-k8s.io/cluster-name`` label) and
controls its infrastructure pool (the AWSMachinePool ``spec.template.spec.infrastructureRef`` names: owner
reference and label). Its status follows the infrastructure's: ``bootstrapReady`` (the bootstrap data
secret is named), ``infrastructureReady``, ``replicas``/``readyReplicas`` from the instances in service,
``spec.providerIDList`` copied from the infrastructure's, the phase (``Pending``, ``Provisioning``,
``ScalingUp``/``ScalingDown`` while the instances in service differ from ``spec.replicas``, ``Running``,
``Failed``, ``Deleting``) and the conditions ``BootstrapReady``, ``InfrastructureReady`` and ``Ready``.
Nodes are not watched (no workload cluster client): ``status.nodeRefs`` stays empty. Deleting a MachinePool
deletes its infrastructure pool first and waits for it.
"""

from __future__ import annotations

from collections.abc import Iterable

from capa_py.api.cluster import CLUSTER_NAME_LABEL, PAUSED_ANNOTATION, Cluster
from capa_py.api.conditions import READY, set_condition
from capa_py.api.machinepool import MACHINEPOOL_FINALIZER, MachinePool, MachinePoolPhase
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.result import Result, no_requeue, requeue_after
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.base import (
    add_finalizer,
    ensure_labels,
    ensure_owner,
    fetch,
    patch_status,
    resolve_ref,
    settle,
)
from controllers.blocking import CLUSTER_NOT_FOUND
from controllers.core import delete_infrastructure_first, infra_failure, infra_ready, mark_core_conditions


def _replicas(infra: KubeObject | None) -> int:
    value = getattr(getattr(infra, "status", None), "replicas", 0)
    return value if isinstance(value, int) else 0


def _provider_ids(infra: KubeObject | None) -> list[str]:
    value = getattr(getattr(infra, "spec", None), "provider_id_list", [])
    return [str(v) for v in value] if isinstance(value, list) else []


def pool_phase(
    pool: MachinePool, bootstrap_ready: bool, ready: bool, replicas: int, failed: bool
) -> MachinePoolPhase:
    if failed:
        return "Failed"
    if not bootstrap_ready:
        return "Pending"
    if not ready and replicas == 0:
        return "Provisioning"
    if replicas < pool.spec.desired:
        return "ScalingUp"
    if replicas > pool.spec.desired:
        return "ScalingDown"
    return "Running" if ready else "Provisioned"


class MachinePoolController:
    name = "machinepool"
    kind = MachinePool

    def __init__(self, store: ObjectStore, infrastructure_kinds: tuple[type[KubeObject], ...] = ()) -> None:
        self.store = store
        self.watched_kinds: tuple[type[KubeObject], ...] = (Cluster, *infrastructure_kinds)
        self.status_kinds: tuple[type[KubeObject], ...] = infrastructure_kinds

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        obj = event.object
        namespace = obj.metadata.namespace or ""
        if isinstance(obj, Cluster):
            return [
                ObjectKey("MachinePool", namespace, p.name)
                for p in self.store.list(MachinePool, namespace=obj.namespace)
                if p.spec.cluster_name == obj.name
            ]
        owner = next((r for r in obj.metadata.owner_references if r.kind == "MachinePool"), None)
        if owner:
            return [ObjectKey("MachinePool", namespace, owner.name)]
        return [
            ObjectKey("MachinePool", namespace, p.name)
            for p in self.store.list(MachinePool, namespace=obj.namespace)
            if p.infrastructure_name(obj.KIND) == obj.name
        ]

    def reconcile(self, key: ObjectKey) -> Result:
        pool = fetch(self.store, MachinePool, key)
        if pool is None:
            return no_requeue()
        if pool.being_deleted:
            return self._reconcile_delete(pool)
        cluster = get_or_none(self.store, Cluster, pool.spec.cluster_name, pool.namespace)
        if cluster is None:

            def waiting(p: MachinePool) -> None:
                p.status.phase = "Pending"
                set_condition(
                    p.status,
                    READY,
                    False,
                    CLUSTER_NOT_FOUND,
                    f"cluster {p.namespace}/{p.spec.cluster_name} (spec.clusterName) does not exist",
                    "Warning",
                )

            patch_status(self.store, pool, waiting)
            return requeue_after(5.0)
        if cluster.paused or PAUSED_ANNOTATION in pool.metadata.annotations:
            return no_requeue()
        pool = add_finalizer(self.store, pool, MACHINEPOOL_FINALIZER)
        pool = ensure_owner(self.store, pool, cluster, controller=False)
        pool = ensure_labels(self.store, pool, {CLUSTER_NAME_LABEL: cluster.name})
        infra = resolve_ref(self.store, pool.spec.template.spec.infrastructure_ref, pool.namespace)
        if infra is not None:
            infra = ensure_owner(self.store, infra, pool)
            infra = ensure_labels(self.store, infra, {CLUSTER_NAME_LABEL: cluster.name})
        provider_ids = _provider_ids(infra)
        if pool.spec.provider_id_list != provider_ids:

            def set_ids(p: MachinePool) -> None:
                p.spec.provider_id_list = list(provider_ids)

            pool = retry_on_conflict(self.store, pool, set_ids)
        bootstrap_ready = bool(pool.spec.template.spec.bootstrap.data_secret_name)
        ready = infra_ready(infra)
        reason, message = infra_failure(infra)
        replicas = _replicas(infra)
        phase = pool_phase(pool, bootstrap_ready, ready, replicas, reason is not None)
        generation = pool.metadata.generation

        def apply(p: MachinePool) -> None:
            p.status.phase = phase
            p.status.bootstrap_ready = bootstrap_ready
            p.status.infrastructure_ready = ready
            p.status.replicas = replicas
            p.status.ready_replicas = replicas if ready else 0
            p.status.available_replicas = replicas if ready else 0
            p.status.unavailable_replicas = max(0, p.spec.desired - (replicas if ready else 0))
            p.status.failure_reason = reason
            p.status.failure_message = message
            p.status.observed_generation = generation
            mark_core_conditions(
                p.status,
                bootstrap_ready=bootstrap_ready,
                data_secret_field="spec.template.spec.bootstrap.dataSecretName",
                infrastructure_ready=ready,
                failure=(reason, message),
                infrastructure="infrastructure machine pool",
                phase=phase,
                ready_phase="Running",
                noun="machine pool",
            )

        settle(self, key, pool)
        patch_status(self.store, pool, apply)
        return no_requeue()

    def _reconcile_delete(self, pool: MachinePool) -> Result:
        return delete_infrastructure_first(
            self.store, pool, pool.spec.template.spec.infrastructure_ref, MACHINEPOOL_FINALIZER
        )
