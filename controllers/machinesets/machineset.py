"""Cluster API core's MachineSet controller, for the embedded mode.

A MachineSet keeps ``replicas`` Machines (named by :func:`controllers.machinesets.naming.free_machine_names`,
labelled with the template's labels, ``cluster.x-k8s.io/set-name``, the deployment's name and
``cluster.x-k8s.io/cluster-name``, controlled by the set), each with its own infrastructure object cloned
from the template (:mod:`controllers.machinesets.clones`), which the set owns until the Machine controller
takes it over. Scaling down deletes Machines in :func:`controllers.machinesets.ordering.deletion_order`.
Deleting a MachineSet deletes its Machines, held by a finalizer until they are gone.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from capa_py.api.cluster import CLUSTER_NAME_LABEL, PAUSED_ANNOTATION, Cluster, Machine
from capa_py.api.conditions import READY, set_condition
from capa_py.api.machinesets import (
    DEPLOYMENT_NAME_LABEL,
    DISABLE_MACHINE_CREATE_ANNOTATION,
    MACHINE_SET_FINALIZER,
    SET_NAME_LABEL,
    MachineDeployment,
    MachineSet,
    template_hash,
    template_of,
)
from capa_py.api.meta import KubeObject, ObjectMeta, ObjectReference
from capa_py.api.registry import REGISTRY, KindRegistry, UnknownKind
from capa_py.ctrlkit.result import Result, no_requeue, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.informer import api_reader
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import AlreadyExists, NotFound
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.base import add_finalizer, ensure_labels, ensure_owner, fetch, patch_status, remove_finalizer
from controllers.machinesets.clones import TemplateError, clone_from_template, cloned_kinds
from controllers.machinesets.naming import (
    clone_of,
    controlled_by,
    controller_of,
    free_machine_names,
    label_value,
)
from controllers.machinesets.ordering import deletion_order, machine_available, machine_failed, machine_ready

_log = get_logger("controller.machinesets")

MACHINES_CREATED = "MachinesCreated"
MACHINES_READY = "MachinesReady"
WAIT_FOR_CLUSTER = 5.0
"""Seconds before looking again for a Cluster that does not exist yet."""
WAIT_FOR_DELETION = 2.0
_SPARE_SLOTS = 5
"""Slots a scale-up may pass over because objects of others hold their names."""


def set_machines(store: ObjectStore, ms: MachineSet) -> list[Machine]:
    """The Machines the set controls."""
    return [m for m in store.list(Machine, namespace=ms.namespace) if controlled_by(m, ms)]


class MachineSetController:
    name = "machineset"
    kind = MachineSet

    def __init__(self, store: ObjectStore, registry: KindRegistry = REGISTRY) -> None:
        """``registry``: where the infrastructure template kinds are looked up."""
        self.store = store
        self.registry = registry
        self.watched_kinds: Sequence[type[KubeObject]] = (Machine, Cluster, MachineDeployment)
        self.status_kinds: Sequence[type[KubeObject]] = (Machine,)

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        obj = event.object
        namespace = obj.metadata.namespace or ""
        if isinstance(obj, Cluster):
            return [
                ObjectKey("MachineSet", namespace, s.name)
                for s in self.store.list(MachineSet, namespace=obj.namespace)
                if s.spec.cluster_name == obj.name
            ]
        if isinstance(obj, MachineDeployment):
            return [
                ObjectKey("MachineSet", namespace, s.name)
                for s in self.store.list(MachineSet, namespace=obj.namespace)
                if controlled_by(s, obj)
            ]
        owner = controller_of(obj)
        if owner is not None and owner.kind == "MachineSet":
            return [ObjectKey("MachineSet", namespace, owner.name)]
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        ms = fetch(self.store, MachineSet, key)
        if ms is None:
            return no_requeue()
        if ms.being_deleted:
            return self._reconcile_delete(ms)
        cluster = get_or_none(self.store, Cluster, ms.spec.cluster_name, ms.namespace)
        if cluster is None:
            return requeue_after(WAIT_FOR_CLUSTER)
        if cluster.paused or PAUSED_ANNOTATION in ms.metadata.annotations:
            return no_requeue()
        ms = add_finalizer(self.store, ms, MACHINE_SET_FINALIZER)
        ms = ensure_labels(self.store, ms, {CLUSTER_NAME_LABEL: cluster.name})
        if controller_of(ms) is None:
            ms = ensure_owner(self.store, ms, cluster, controller=False)
        self._own_template(ms, cluster)
        machines = set_machines(self.store, ms)
        problem: tuple[str, str] | None = None
        if not cluster.being_deleted:
            machines, problem = self._sync_replicas(ms, machines)
        return self._update_status(ms, machines, problem)

    def _own_template(self, ms: MachineSet, cluster: Cluster) -> None:
        """The infrastructure template a set clones from belongs to the Cluster (an owner reference, not a
        controlling one), as Cluster API core makes it."""
        ref = ms.spec.template.spec.infrastructure_ref
        if not ref.api_version or not ref.kind or not ref.name:
            return
        try:
            kind = self.registry.for_gvk(ref.api_version, ref.kind)
        except UnknownKind:
            return
        template = get_or_none(self.store, kind, ref.name, ref.namespace or ms.namespace)
        if template is not None and not template.being_deleted:
            ensure_owner(self.store, template, cluster, controller=False)

    def _may_scale_up(self, ms: MachineSet) -> bool:
        """Not with ``cluster.x-k8s.io/disable-machine-create: "true"``. An old MachineSet of an ``OnDelete``
        deployment does not replace Machines deleted by hand: the deployment's new set does."""
        if ms.metadata.annotations.get(DISABLE_MACHINE_CREATE_ANNOTATION) == "true":
            return False
        owner = controller_of(ms)
        if owner is None or owner.kind != "MachineDeployment":
            return True
        md = get_or_none(self.store, MachineDeployment, owner.name, ms.namespace)
        if md is None or md.spec.strategy_type != "OnDelete":
            return True
        return template_of(ms) == template_hash(md.spec.template)

    def _sync_replicas(
        self, ms: MachineSet, machines: list[Machine]
    ) -> tuple[list[Machine], tuple[str, str] | None]:
        diff = len(machines) - ms.spec.desired
        if diff < 0 and self._may_scale_up(ms):
            wanted = -diff
            names = free_machine_names(ms, {m.name for m in machines})
            # A slot whose name another object holds is passed over; a few such are plenty.
            for name in itertools.islice(names, wanted + _SPARE_SLOTS):
                try:
                    machine = self._create_machine(ms, name)
                except TemplateError as exc:
                    _log.warning("cannot create machine", machineset=ms.name, error=str(exc))
                    return machines, ("InfrastructureTemplateCloningFailed", str(exc))
                if machine is not None:
                    machines.append(machine)
                    wanted -= 1
                if wanted == 0:
                    break
        elif diff > 0:
            for machine in deletion_order(machines, ms.spec.delete_policy or "Random")[:diff]:
                if machine.being_deleted:
                    continue
                with contextlib.suppress(NotFound):
                    self.store.delete(Machine, machine.name, machine.namespace)
                    _log.info("machine deleted to scale down", machineset=ms.name, machine=machine.name)
            machines = set_machines(self.store, ms)
        return machines, None

    def _create_machine(self, ms: MachineSet, name: str) -> Machine | None:
        """The Machine ``name`` of the set and its infrastructure clone: made now, or found made by another
        writer (or left by one that died between the two creates). None when another object holds the
        name: the caller takes the next slot."""
        namespace = ms.namespace or "default"
        template = ms.spec.template
        labels = dict(template.metadata.labels)
        labels[SET_NAME_LABEL] = label_value(ms.name)
        if DEPLOYMENT_NAME_LABEL in ms.metadata.labels:
            labels[DEPLOYMENT_NAME_LABEL] = ms.metadata.labels[DEPLOYMENT_NAME_LABEL]
        labels[CLUSTER_NAME_LABEL] = ms.spec.cluster_name
        annotations = dict(template.metadata.annotations)
        ref = template.spec.infrastructure_ref
        owner = ms.owner_reference(controller=False)
        made = True
        try:
            infra = clone_from_template(
                self.store,
                ref,
                name,
                namespace,
                ms.spec.cluster_name,
                labels,
                annotations,
                owner,
                self.registry,
            )
        except AlreadyExists:
            # Another writer's clone for this slot (its Machine made, on its way, or never made), or an
            # object of someone else's that happens to have the name: read the store, not a cache.
            _, kind = cloned_kinds(ref, self.registry)
            found = get_or_none(api_reader(self.store), kind, name, namespace)
            if found is None or not clone_of(found, ms, name):
                return None
            infra, made = found, False
        spec = template.spec.model_copy(deep=True)
        spec.cluster_name = ms.spec.cluster_name
        spec.infrastructure_ref = ObjectReference(
            api_version=infra.api_version, kind=infra.kind, name=infra.name, namespace=namespace
        )
        machine = Machine(
            metadata=ObjectMeta(
                name=name,
                namespace=namespace,
                labels=labels,
                annotations=annotations,
                owner_references=[ms.owner_reference(controller=True)],
            ),
            spec=spec,
        )
        try:
            created = self.store.create(machine)
        except AlreadyExists:
            existing = get_or_none(api_reader(self.store), Machine, name, namespace)
            if existing is not None and controlled_by(existing, ms):
                return existing  # another writer made this slot's Machine
            if made:
                self._discard(infra)
            return None
        except Exception:
            if made:
                self._discard(infra)
            raise
        _log.info(
            "machine created",
            machineset=ms.name,
            machine=name,
            infrastructure=infra.ref(),
            adopted_infrastructure=not made,
        )
        return created

    def _discard(self, infra: KubeObject) -> None:
        with contextlib.suppress(NotFound):
            self.store.delete(type(infra), infra.name, infra.namespace)

    def _update_status(
        self, ms: MachineSet, machines: list[Machine], problem: tuple[str, str] | None
    ) -> Result:
        now = datetime.now(UTC)
        min_ready = ms.spec.min_ready_seconds or 0
        template_labels = ms.spec.template.metadata.labels
        ready = [m for m in machines if machine_ready(m)]
        available = [m for m in ready if machine_available(m, min_ready, now)]
        failed = [m for m in machines if machine_failed(m) and not m.being_deleted]

        def apply(s: MachineSet) -> None:
            status = s.status
            status.selector = str(s.spec.selector.selector())
            status.replicas = len(machines)
            status.fully_labeled_replicas = sum(
                1 for m in machines if all(m.metadata.labels.get(k) == v for k, v in template_labels.items())
            )
            status.ready_replicas = len(ready)
            status.available_replicas = len(available)
            status.observed_generation = s.metadata.generation
            if problem is not None:
                set_condition(status, MACHINES_CREATED, False, problem[0], problem[1], "Error")
            else:
                set_condition(status, MACHINES_CREATED, True)
            if failed:
                names = ", ".join(sorted(m.name for m in failed))
                set_condition(status, MACHINES_READY, False, "MachinesFailed", f"failed: {names}", "Error")
            elif len(ready) < len(machines):
                set_condition(
                    status,
                    MACHINES_READY,
                    False,
                    "WaitingForMachines",
                    f"{len(ready)} of {len(machines)} machines ready",
                    "Info",
                )
            else:
                set_condition(status, MACHINES_READY, True)
            done = problem is None and len(ready) == s.spec.desired == len(machines)
            set_condition(
                status,
                READY,
                done,
                None if done else "ScalingOrWaiting",
                None if done else f"{len(ready)} of {s.spec.desired} machines ready",
                None if done else "Info",
            )

        patch_status(self.store, ms, apply)
        if problem is not None:
            return requeue_after(WAIT_FOR_CLUSTER)
        if len(available) < len(ready):
            return requeue_after(float(max(min_ready, 1)))
        return no_requeue()

    def _reconcile_delete(self, ms: MachineSet) -> Result:
        machines = set_machines(self.store, ms)
        for machine in machines:
            if not machine.being_deleted:
                with contextlib.suppress(NotFound):
                    self.store.delete(Machine, machine.name, machine.namespace)
        if machines:
            return requeue_after(WAIT_FOR_DELETION)
        remove_finalizer(self.store, ms, MACHINE_SET_FINALIZER)
        return no_requeue()
