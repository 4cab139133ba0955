"""A minimal Cluster API core: what the core controllers do in a real management cluster.

So that the embedded mode is complete on its own: Cluster and Machine phases, ``infrastructureReady`` read
from the infrastructure object, owner references (Cluster → infrastructure cluster, Machine → infrastructure
machine, Cluster → Machine), the control-plane endpoint copied from the infrastructure, cascading delete of a
cluster's machines and infrastructure, and pausing with ``spec.paused`` or the ``cluster.x-k8s.io/paused``
annotation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from capa_py.api.cluster import (
    CLUSTER_FINALIZER,
    CLUSTER_NAME_LABEL,
    MACHINE_FINALIZER,
    PAUSED_ANNOTATION,
    Cluster,
    ClusterPhase,
    Machine,
    MachineAddress,
    MachinePhase,
)
from capa_py.api.conditions import READY, HasConditions, set_condition
from capa_py.api.machinepool import MachinePool
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject, ObjectReference, OwnerReference
from capa_py.ctrlkit.result import Result, no_requeue, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import NotFound
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.base import (
    add_finalizer,
    ensure_labels,
    ensure_owner,
    fetch,
    patch_status,
    remove_finalizer,
    resolve_ref,
    settle,
)
from controllers.blocking import CLUSTER_NOT_FOUND

INFRASTRUCTURE_READY = "InfrastructureReady"
BOOTSTRAP_READY = "BootstrapReady"
_log = get_logger("controller.core")


def _status_field(obj: KubeObject | None, name: str) -> object:
    status = getattr(obj, "status", None)
    return getattr(status, name, None) if status is not None else None


def infra_ready(infra: KubeObject | None) -> bool:
    """Whether the infrastructure is provisioned: ``status.initialization.provisioned`` (the v1beta2
    contract) when the object reports it, else ``status.ready`` (v1beta1), as Cluster API core reads a
    provider on either contract."""
    initialization = _status_field(infra, "initialization")
    provisioned = getattr(initialization, "provisioned", None)
    if provisioned is not None:
        return bool(provisioned)
    return bool(_status_field(infra, "ready"))


def infra_failure(infra: KubeObject | None) -> tuple[str | None, str | None]:
    """``status.failureReason``/``failureMessage``: the v1beta1 contract's terminal failure (the v1beta2
    contract has none; capa-py's infrastructure kinds write both contracts, so these are there)."""
    return _status_field(infra, "failure_reason"), _status_field(infra, "failure_message")  # type: ignore[return-value]


def mark_core_conditions(
    status: HasConditions,
    *,
    bootstrap_ready: bool,
    data_secret_field: str,
    infrastructure_ready: bool,
    failure: tuple[str | None, str | None],
    infrastructure: str,
    phase: str,
    ready_phase: str,
    noun: str,
) -> None:
    """``BootstrapReady``, ``InfrastructureReady`` and ``Ready`` of a Machine or a MachinePool, as Cluster
    API core sets them: the bootstrap data secret named (``data_secret_field``), the ``infrastructure``
    ready or failed (``failure``: its reason and message), and ``Ready`` once ``phase`` is ``ready_phase``
    (else the reason ``Phase<phase>`` and "<noun> is <phase>")."""
    reason, message = failure
    set_condition(
        status,
        BOOTSTRAP_READY,
        bootstrap_ready,
        None if bootstrap_ready else "WaitingForDataSecret",
        None if bootstrap_ready else f"{data_secret_field} is not set",
        None if bootstrap_ready else "Info",
    )
    set_condition(
        status,
        INFRASTRUCTURE_READY,
        infrastructure_ready,
        None if infrastructure_ready else (reason or "WaitingForInfrastructure"),
        None if infrastructure_ready else (message or f"the {infrastructure} is not ready"),
        None if infrastructure_ready else ("Error" if reason else "Info"),
    )
    done = phase == ready_phase
    set_condition(
        status, READY, done, None if done else "Phase" + phase, None if done else f"{noun} is {phase}"
    )


T = TypeVar("T", bound=KubeObject)


def delete_infrastructure_first(
    store: ObjectStore, obj: T, infrastructure_ref: ObjectReference | None, finalizer: str
) -> Result:
    """Delete a Machine or MachinePool: phase ``Deleting``, its infrastructure deleted and waited for,
    then ``finalizer`` dropped."""

    def apply(o: Any) -> None:
        o.status.phase = "Deleting"

    obj = patch_status(store, obj, apply)
    infra = resolve_ref(store, infrastructure_ref, obj.namespace)
    if infra is not None:
        if not infra.being_deleted:
            with contextlib.suppress(NotFound):
                store.delete(type(infra), infra.name, infra.namespace)
        return requeue_after(2.0)
    remove_finalizer(store, obj, finalizer)
    return no_requeue()


def _referrers(store: ObjectStore, kind: type[T], infra: KubeObject) -> list[T]:
    """The objects of ``kind`` in ``infra``'s namespace whose ``spec.infrastructureRef`` names it."""
    return [
        o
        for o in store.list(kind, namespace=infra.metadata.namespace)
        if (ref := getattr(getattr(o, "spec", None), "infrastructure_ref", None)) is not None
        and ref.kind == infra.KIND
        and ref.name == infra.name
    ]


def _of(obj: MachineDeployment | MachineSet | MachinePool, cluster: Cluster) -> bool:
    return obj.spec.cluster_name == cluster.name


class ClusterController:
    name = "cluster"
    kind = Cluster

    def __init__(self, store: ObjectStore, infrastructure_kinds: Sequence[type[KubeObject]] = ()) -> None:
        self.store = store
        self.watched_kinds: Sequence[type[KubeObject]] = (Machine, *infrastructure_kinds)
        self.status_kinds: Sequence[type[KubeObject]] = tuple(infrastructure_kinds)

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        obj = event.object
        if isinstance(obj, Machine):
            return [ObjectKey("Cluster", obj.metadata.namespace or "", obj.spec.cluster_name)]
        if obj.KIND in {k.KIND for k in self.watched_kinds}:
            owner = next((r for r in obj.metadata.owner_references if r.kind == "Cluster"), None)
            name = owner.name if owner else obj.metadata.labels.get(CLUSTER_NAME_LABEL)
            if name:
                return [ObjectKey("Cluster", obj.metadata.namespace or "", name)]
            # Not adopted yet (it appeared after its Cluster was reconciled): the Clusters naming it.
            return [
                ObjectKey("Cluster", c.metadata.namespace or "", c.name)
                for c in _referrers(self.store, Cluster, obj)
            ]
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        cluster = fetch(self.store, Cluster, key)
        if cluster is None:
            return no_requeue()
        if cluster.being_deleted:
            return self._reconcile_delete(cluster)
        if cluster.paused:
            return no_requeue()
        cluster = add_finalizer(self.store, cluster, CLUSTER_FINALIZER)
        infra = resolve_ref(self.store, cluster.spec.infrastructure_ref, cluster.namespace)
        if infra is not None:
            infra = ensure_owner(self.store, infra, cluster)
            infra = ensure_labels(self.store, infra, {CLUSTER_NAME_LABEL: cluster.name})
            endpoint = getattr(getattr(infra, "spec", None), "control_plane_endpoint", None)
            if (
                infra_ready(infra)
                and endpoint is not None
                and endpoint.is_set
                and not cluster.spec.control_plane_endpoint.is_set
            ):

                def copy_endpoint(c: Cluster) -> None:
                    c.spec.control_plane_endpoint = endpoint.model_copy()

                cluster = retry_on_conflict(self.store, cluster, copy_endpoint)
        ready = infra_ready(infra)
        reason, message = infra_failure(infra)
        phase: ClusterPhase
        if reason:
            phase = "Failed"
        elif infra is None:
            phase = "Pending"
        elif ready and cluster.spec.control_plane_endpoint.is_set:
            phase = "Provisioned"
        else:
            phase = "Provisioning"

        def apply(c: Cluster) -> None:
            c.status.phase = phase
            c.status.infrastructure_ready = ready
            c.status.failure_reason = reason
            c.status.failure_message = message
            c.status.observed_generation = c.metadata.generation
            if ready:
                set_condition(c.status, INFRASTRUCTURE_READY, True)
            elif infra is None:
                set_condition(
                    c.status,
                    INFRASTRUCTURE_READY,
                    False,
                    "WaitingForInfrastructure",
                    "the infrastructure object does not exist yet",
                    "Info",
                )
            else:
                set_condition(
                    c.status,
                    INFRASTRUCTURE_READY,
                    False,
                    reason or "InfrastructureNotReady",
                    message or f"{infra.ref()} is not ready",
                    "Error" if reason else "Info",
                )
            set_condition(
                c.status,
                READY,
                phase == "Provisioned",
                None if phase == "Provisioned" else "Phase" + phase,
                None if phase == "Provisioned" else f"cluster is {phase}",
            )

        settle(self, key, cluster)
        patch_status(self.store, cluster, apply)
        return no_requeue()

    def _machines(self, cluster: Cluster) -> list[Machine]:
        return [
            m
            for m in self.store.list(Machine, namespace=cluster.namespace)
            if m.spec.cluster_name == cluster.name
        ]

    def _reconcile_delete(self, cluster: Cluster) -> Result:
        def apply(c: Cluster) -> None:
            c.status.phase = "Deleting"

        cluster = patch_status(self.store, cluster, apply)
        # Descendants first, as Cluster API deletes them: the MachineDeployments and MachineSets (which would
        # otherwise make new Machines), then the Machines.
        descendants: list[KubeObject] = [
            *(d for d in self.store.list(MachineDeployment, namespace=cluster.namespace) if _of(d, cluster)),
            *(s for s in self.store.list(MachineSet, namespace=cluster.namespace) if _of(s, cluster)),
            *(p for p in self.store.list(MachinePool, namespace=cluster.namespace) if _of(p, cluster)),
            *self._machines(cluster),
        ]
        for obj in descendants:
            if not obj.being_deleted:
                with contextlib.suppress(NotFound):
                    self.store.delete(type(obj), obj.name, obj.namespace)
        if descendants:
            return requeue_after(2.0)
        infra = resolve_ref(self.store, cluster.spec.infrastructure_ref, cluster.namespace)
        if infra is not None:
            if not infra.being_deleted:
                with contextlib.suppress(NotFound):
                    self.store.delete(type(infra), infra.name, infra.namespace)
            return requeue_after(2.0)
        remove_finalizer(self.store, cluster, CLUSTER_FINALIZER)
        _log.info("cluster deleted", cluster=cluster.name)
        return no_requeue()


def _drop_creator_owners(store: ObjectStore, infra: KubeObject) -> KubeObject:
    """Once its Machine controls it, an infrastructure machine cloned by a MachineSet is no longer owned by
    the set (which owned it only until the Machine existed)."""

    def creator(ref: OwnerReference) -> bool:
        return not ref.controller and ref.kind in _CREATOR_KINDS and ref.api_version.startswith(CORE_GROUP)

    if not any(creator(ref) for ref in infra.metadata.owner_references):
        return infra

    def mutate(o: KubeObject) -> None:
        o.metadata.owner_references = [r for r in o.metadata.owner_references if not creator(r)]

    return retry_on_conflict(store, infra, mutate)


_CREATOR_KINDS = frozenset({"MachineSet"})
CORE_GROUP = "cluster.x-k8s.io/"


class MachineController:
    name = "machine"
    kind = Machine

    def __init__(self, store: ObjectStore, infrastructure_kinds: Sequence[type[KubeObject]] = ()) -> None:
        self.store = store
        self.watched_kinds: Sequence[type[KubeObject]] = (Cluster, *infrastructure_kinds)
        self.status_kinds: Sequence[type[KubeObject]] = tuple(infrastructure_kinds)

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        obj = event.object
        if isinstance(obj, Cluster):
            return [
                ObjectKey("Machine", m.metadata.namespace or "", m.name)
                for m in self.store.list(Machine, namespace=obj.namespace)
                if m.spec.cluster_name == obj.name
            ]
        owner = next((r for r in obj.metadata.owner_references if r.kind == "Machine"), None)
        if owner:
            return [ObjectKey("Machine", obj.metadata.namespace or "", owner.name)]
        # Not adopted yet (it appeared after its Machine was reconciled): the Machines naming it.
        return [
            ObjectKey("Machine", m.metadata.namespace or "", m.name)
            for m in _referrers(self.store, Machine, obj)
        ]

    def reconcile(self, key: ObjectKey) -> Result:
        machine = fetch(self.store, Machine, key)
        if machine is None:
            return no_requeue()
        cluster = get_or_none(self.store, Cluster, machine.spec.cluster_name, machine.namespace)
        if machine.being_deleted:
            return self._reconcile_delete(machine)
        if cluster is None:

            def waiting(m: Machine) -> None:
                # Not a failure (the Cluster may be created later), but nothing this controller does
                # will change it: a wait for this machine is blocked on it (controllers.blocking).
                m.status.phase = "Pending"
                set_condition(
                    m.status,
                    READY,
                    False,
                    CLUSTER_NOT_FOUND,
                    f"cluster {m.namespace}/{m.spec.cluster_name} (spec.clusterName) does not exist",
                    "Warning",
                )

            patch_status(self.store, machine, waiting)
            return requeue_after(5.0)
        if cluster.paused or PAUSED_ANNOTATION in machine.metadata.annotations:
            return no_requeue()
        machine = add_finalizer(self.store, machine, MACHINE_FINALIZER)
        if not any(ref.controller for ref in machine.metadata.owner_references):
            # A stand-alone Machine belongs to its Cluster; one a MachineSet controls belongs to the set.
            machine = ensure_owner(self.store, machine, cluster, controller=False)
        machine = ensure_labels(self.store, machine, {CLUSTER_NAME_LABEL: cluster.name})
        infra = resolve_ref(self.store, machine.spec.infrastructure_ref, machine.namespace)
        if infra is not None:
            infra = ensure_owner(self.store, infra, machine)
            infra = _drop_creator_owners(self.store, infra)
            infra = ensure_labels(self.store, infra, {CLUSTER_NAME_LABEL: cluster.name})
        provider_id = _status_field(infra, "provider_id") or getattr(
            getattr(infra, "spec", None), "provider_id", None
        )
        if provider_id and machine.spec.provider_id != provider_id:

            def set_provider(m: Machine) -> None:
                m.spec.provider_id = str(provider_id)

            machine = retry_on_conflict(self.store, machine, set_provider)
        bootstrap_ready = bool(machine.spec.bootstrap.data_secret_name)
        ready = infra_ready(infra)
        reason, message = infra_failure(infra)
        found = _status_field(infra, "addresses")
        addresses: list[MachineAddress] = list(found) if isinstance(found, list) else []
        phase: MachinePhase
        if reason:
            phase = "Failed"
        elif ready and machine.spec.provider_id:
            phase = "Provisioned"
        elif bootstrap_ready and infra is not None:
            phase = "Provisioning"
        else:
            phase = "Pending"

        def apply(m: Machine) -> None:
            m.status.phase = phase
            m.status.bootstrap_ready = bootstrap_ready
            m.status.infrastructure_ready = ready
            m.status.addresses = [a.model_copy() for a in addresses]
            m.status.failure_reason = reason
            m.status.failure_message = message
            m.status.observed_generation = m.metadata.generation
            mark_core_conditions(
                m.status,
                bootstrap_ready=bootstrap_ready,
                data_secret_field="spec.bootstrap.dataSecretName",
                infrastructure_ready=ready,
                failure=(reason, message),
                infrastructure="infrastructure machine",
                phase=phase,
                ready_phase="Provisioned",
                noun="machine",
            )

        settle(self, key, machine)
        patch_status(self.store, machine, apply)
        return no_requeue()

    def _reconcile_delete(self, machine: Machine) -> Result:
        return delete_infrastructure_first(
            self.store, machine, machine.spec.infrastructure_ref, MACHINE_FINALIZER
        )
