"""Cluster API core's MachineDeployment and MachineSet controllers, for the embedded mode.

A MachineDeployment keeps one MachineSet per distinct Machine template (named ``<deployment>-<5
characters>``, labelled ``machine-template-hash: <template hash>-<the same 5>`` and
``cluster.x-k8s.io/deployment-name``, controlled by the deployment) and moves Machines from the old sets to
the new one: with ``RollingUpdate`` never more than ``replicas + maxSurge`` Machines wanted at once and
never fewer than ``replicas - maxUnavailable`` available, as a Kubernetes Deployment rolls out; with
``OnDelete`` a new Machine only once an old one has been deleted by hand. Old sets scaled to zero are kept
up to ``revisionHistoryLimit``.

A MachineSet keeps ``replicas`` Machines (``<set>-<5 characters>``, labelled with the template's labels,
``cluster.x-k8s.io/set-name``, the deployment's name and ``cluster.x-k8s.io/cluster-name``, controlled by
the set). Each Machine gets its own infrastructure object cloned from the template its
``spec.infrastructureRef`` names: an object of the templated kind, named after the Machine, whose spec is
the template's ``spec.template.spec``, with the template's ``spec.template.metadata`` labels and annotations
and ``cluster.x-k8s.io/cloned-from-name``/``cloned-from-groupkind``; the set owns the clone until the
Machine controller takes it over. Scaling down deletes, first, Machines already being deleted, then those
annotated ``cluster.x-k8s.io/delete-machine``, then failed or not-ready ones, then by ``deletePolicy``
(``Random``, ``Newest``, ``Oldest``; ``Random`` by name among equals, as Cluster API core orders them).

The 5 characters look random but are not: a set's come from its deployment's uid and template hash, a
Machine's from its set's uid and the first slot (0, 1, ...) no Machine of the set holds. So a reconciler
reading a view that lags behind the store (an informer not yet caught up, a second process reconciling the
same store) asks for the names another already took and is refused (``AlreadyExists``) instead of making
surplus sets and Machines: it takes the set, or the Machine, for its own. A Machine's infrastructure clone
is named like the Machine and created first; one left without its Machine (the process died between the
two writes) is taken by the next reconcile of that slot rather than left behind.

Nothing is changed while the Cluster is paused (``spec.paused`` or the ``cluster.x-k8s.io/paused``
annotation) or the object itself carries the paused annotation; a MachineDeployment with ``spec.paused`` has
its status kept but its MachineSets left as they are. Deleting a MachineDeployment deletes its MachineSets,
and deleting a MachineSet its Machines (whose infrastructure the Machine controller deletes), each held by a
finalizer until its dependents are gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

from capa_py.api.cluster import CLUSTER_NAME_LABEL, PAUSED_ANNOTATION, Cluster, Machine
from capa_py.api.conditions import READY, get_condition, set_condition
from capa_py.api.machinesets import (
    CLONED_FROM_GROUPKIND_ANNOTATION,
    CLONED_FROM_NAME_ANNOTATION,
    DELETE_MACHINE_ANNOTATION,
    DEPLOYMENT_NAME_LABEL,
    DESIRED_REPLICAS_ANNOTATION,
    DISABLE_MACHINE_CREATE_ANNOTATION,
    MACHINE_DEPLOYMENT_FINALIZER,
    MACHINE_SET_FINALIZER,
    MAX_REPLICAS_ANNOTATION,
    REVISION_ANNOTATION,
    SET_NAME_LABEL,
    TEMPLATE_HASH_LABEL,
    DeletePolicy,
    MachineDeployment,
    MachineDeploymentPhase,
    MachineDeploymentSpec,
    MachineSet,
    MachineSetSpec,
    MachineTemplateMetadata,
    encode_digest,
    template_hash,
    template_hash_label,
    template_of,
)
from capa_py.api.meta import KubeObject, ObjectMeta, ObjectReference, OwnerReference
from capa_py.api.registry import REGISTRY, KindRegistry, UnknownKind
from capa_py.ctrlkit.result import Result, no_requeue, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.informer import api_reader
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import AlreadyExists, NotFound
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.base import add_finalizer, ensure_labels, ensure_owner, fetch, patch_status, remove_finalizer

_log = get_logger("controller.machinesets")

MACHINES_CREATED = "MachinesCreated"
MACHINES_READY = "MachinesReady"
AVAILABLE = "Available"
WAIT_FOR_CLUSTER = 5.0
"""Seconds before looking again for a Cluster that does not exist yet."""
WAIT_FOR_DELETION = 2.0
_MAX_LABEL_VALUE = 63
_SPARE_SLOTS = 5
"""Slots a scale-up may pass over because objects of others hold their names."""
_SET_NAME_ATTEMPTS = 10


# -- names, labels, hashes ---------------------------------------------------------------------------
def label_value(name: str) -> str:
    """A name as a label value: itself when it fits (at most 63 characters), else a hash of it."""
    if len(name) <= _MAX_LABEL_VALUE:
        return name
    return "hash_" + encode_digest(hashlib.sha256(name.encode()).digest(), 20) + "_z"


def derived_suffix(*parts: str, length: int = 5) -> str:
    """Name characters that look random but follow from ``parts``: every writer asking for the same thing
    asks for the same name."""
    return encode_digest(hashlib.sha256("/".join(parts).encode()).digest(), length)


def controller_of(obj: KubeObject) -> OwnerReference | None:
    return next((r for r in obj.metadata.owner_references if r.controller), None)


def controlled_by(obj: KubeObject, owner: KubeObject) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.uid == owner.metadata.uid


def _created(obj: KubeObject) -> datetime:
    return obj.metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC)


def _revision(ms: MachineSet) -> int:
    try:
        return int(ms.metadata.annotations.get(REVISION_ANNOTATION, "0"))
    except ValueError:
        return 0


# -- Machine readiness and the order Machines go in --------------------------------------------------
def machine_ready(machine: Machine) -> bool:
    """Ready as Cluster API core counts replicas: the Machine's Ready condition is true."""
    condition = get_condition(machine.status, READY)
    return not machine.being_deleted and condition is not None and condition.status == "True"


def machine_available(machine: Machine, min_ready_seconds: int, now: datetime) -> bool:
    """Ready for at least ``min_ready_seconds``."""
    if not machine_ready(machine):
        return False
    if min_ready_seconds <= 0:
        return True
    condition = get_condition(machine.status, READY)
    since = condition.last_transition_time if condition is not None else None
    return since is None or (now - since).total_seconds() >= min_ready_seconds


def machine_failed(machine: Machine) -> bool:
    return bool(machine.status.failure_reason or machine.status.failure_message)


def deletion_order(machines: Sequence[Machine], policy: DeletePolicy) -> list[Machine]:
    """The Machines in the order a scale-down deletes them: those already being deleted, those annotated
    ``cluster.x-k8s.io/delete-machine``, failed or not ready ones, then the rest by ``policy`` (newest or
    oldest first by creation time; by name for ``Random``, as Cluster API core orders equals)."""

    def grade(machine: Machine) -> int:
        if machine.being_deleted:
            return 0
        if DELETE_MACHINE_ANNOTATION in machine.metadata.annotations:
            return 1
        if machine_failed(machine) or not machine_ready(machine):
            return 2
        return 3

    ordered = sorted(machines, key=lambda m: m.name)
    if policy == "Random":
        return sorted(ordered, key=grade)
    newest_first = policy == "Newest"
    ordered.sort(key=lambda m: (_created(m), m.name), reverse=newest_first)
    return sorted(ordered, key=grade)


# -- cloning an infrastructure template ----------------------------------------------------------------
class TemplateError(Exception):
    """The infrastructure template cannot be cloned (unknown kind, not found)."""


def templated_kind(template_kind: type[KubeObject]) -> str:
    """The kind a template kind stamps out: its ``TEMPLATED_KIND``, else its name without ``Template``."""
    named = getattr(template_kind, "TEMPLATED_KIND", None)
    return str(named) if named else template_kind.KIND.removesuffix("Template")


def cloned_kinds(
    ref: ObjectReference, registry: KindRegistry = REGISTRY
) -> tuple[type[KubeObject], type[KubeObject]]:
    """The template kind ``ref`` names and the kind it stamps out; raises TemplateError."""
    if not ref.api_version or not ref.kind or not ref.name:
        raise TemplateError("spec.template.spec.infrastructureRef needs apiVersion, kind and name")
    try:
        template_kind = registry.for_gvk(ref.api_version, ref.kind)
    except UnknownKind:
        raise TemplateError(f"unknown infrastructure template kind {ref.api_version}/{ref.kind}") from None
    kind_name = templated_kind(template_kind)
    try:
        return template_kind, registry.for_gvk(ref.api_version, kind_name)
    except UnknownKind:
        raise TemplateError(f"{ref.kind} stamps out {kind_name}, which is not a known kind") from None


def clone_from_template(
    store: ObjectStore,
    ref: ObjectReference,
    name: str,
    namespace: str,
    cluster_name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    owner: OwnerReference,
    registry: KindRegistry = REGISTRY,
) -> KubeObject:
    """Create the object ``ref``'s template stamps out, named ``name``; raises TemplateError (and
    AlreadyExists when an object of that kind and name exists)."""
    template_kind, target = cloned_kinds(ref, registry)
    template = get_or_none(store, template_kind, ref.name or "", ref.namespace or namespace)
    if template is None:
        raise TemplateError(f"{ref.kind} {ref.namespace or namespace}/{ref.name} not found")
    resource = template.to_dict().get("spec", {}).get("template", {})
    meta = resource.get("metadata", {})
    group = (ref.api_version or "").rpartition("/")[0]
    document = {
        "apiVersion": ref.api_version,
        "kind": target.KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**meta.get("labels", {}), **labels, CLUSTER_NAME_LABEL: cluster_name},
            "annotations": {
                **meta.get("annotations", {}),
                **annotations,
                CLONED_FROM_NAME_ANNOTATION: template.name,
                CLONED_FROM_GROUPKIND_ANNOTATION: f"{ref.kind}.{group}" if group else ref.kind,
            },
            "ownerReferences": [owner.model_dump(mode="json", by_alias=True, exclude_none=True)],
        },
        "spec": resource.get("spec", {}),
    }
    return store.create(target.from_dict(document))


# -- MachineSet ----------------------------------------------------------------------------------------
def _set_machines(store: ObjectStore, ms: MachineSet) -> list[Machine]:
    return [m for m in store.list(Machine, namespace=ms.namespace) if controlled_by(m, ms)]


def free_machine_names(ms: MachineSet, taken: set[str]) -> Iterator[str]:
    """The names of the set's free slots, first slot first: what every writer asks for next."""
    for slot in itertools.count():
        name = f"{ms.name}-{derived_suffix(ms.metadata.uid or ms.name, str(slot))}"
        if name not in taken:
            yield name


def _clone_of(infra: KubeObject, ms: MachineSet, name: str) -> bool:
    """Whether ``infra`` is the infrastructure clone of the set's Machine ``name``: owned by the set, or
    already by that Machine."""
    return any(
        r.uid == ms.metadata.uid or (r.kind == "Machine" and r.name == name)
        for r in infra.metadata.owner_references
    )


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
        machines = _set_machines(self.store, ms)
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
            machines = _set_machines(self.store, ms)
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
            if found is None or not _clone_of(found, ms, name):
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
        machines = _set_machines(self.store, ms)
        for machine in machines:
            if not machine.being_deleted:
                with contextlib.suppress(NotFound):
                    self.store.delete(Machine, machine.name, machine.namespace)
        if machines:
            return requeue_after(WAIT_FOR_DELETION)
        remove_finalizer(self.store, ms, MACHINE_SET_FINALIZER)
        return no_requeue()


# -- MachineDeployment ---------------------------------------------------------------------------------
def _deployment_sets(store: ObjectStore, md: MachineDeployment) -> list[MachineSet]:
    return [s for s in store.list(MachineSet, namespace=md.namespace) if controlled_by(s, md)]


def _oldest_first(sets: Iterable[MachineSet]) -> list[MachineSet]:
    return sorted(sets, key=lambda s: (_created(s), _revision(s), s.name))


def _available(ms: MachineSet) -> int:
    """A set's available Machines, never more than it wants (a status not yet caught up with a scale-down
    must not count Machines being removed)."""
    return min(ms.status.available_replicas, ms.spec.desired)


class MachineDeploymentController:
    name = "machinedeployment"
    kind = MachineDeployment

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.watched_kinds: Sequence[type[KubeObject]] = (MachineSet, Cluster)
        self.status_kinds: Sequence[type[KubeObject]] = (MachineSet,)

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        obj = event.object
        namespace = obj.metadata.namespace or ""
        if isinstance(obj, Cluster):
            return [
                ObjectKey("MachineDeployment", namespace, d.name)
                for d in self.store.list(MachineDeployment, namespace=obj.namespace)
                if d.spec.cluster_name == obj.name
            ]
        owner = controller_of(obj)
        if owner is not None and owner.kind == "MachineDeployment":
            return [ObjectKey("MachineDeployment", namespace, owner.name)]
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        md = fetch(self.store, MachineDeployment, key)
        if md is None:
            return no_requeue()
        if md.being_deleted:
            return self._reconcile_delete(md)
        cluster = get_or_none(self.store, Cluster, md.spec.cluster_name, md.namespace)
        if cluster is None:
            return requeue_after(WAIT_FOR_CLUSTER)
        if cluster.paused or PAUSED_ANNOTATION in md.metadata.annotations:
            return no_requeue()
        md = add_finalizer(self.store, md, MACHINE_DEPLOYMENT_FINALIZER)
        md = ensure_labels(self.store, md, {CLUSTER_NAME_LABEL: cluster.name})
        md = ensure_owner(self.store, md, cluster, controller=False)
        sets = _deployment_sets(self.store, md)
        if not md.spec.paused and not cluster.being_deleted:
            self._rollout(md, sets)
            sets = _deployment_sets(self.store, md)
        self._update_status(md, sets)
        return no_requeue()

    # -- rollout ------------------------------------------------------------------------------------
    def _rollout(self, md: MachineDeployment, sets: list[MachineSet]) -> None:
        current = template_hash(md.spec.template)
        live = [s for s in sets if not s.being_deleted]
        new = next((s for s in live if template_of(s) == current), None)
        olds = [s for s in live if s is not new]
        new = self._create_set(md, current, live) if new is None else self._sync_set(md, new, live)
        if md.spec.strategy_type == "OnDelete":
            olds = self._scale_olds_on_delete(md, new, olds)
            target = max(0, md.spec.desired - sum(s.spec.desired for s in olds))
            new = self._scale(md, new, target)
        else:
            new = self._scale(md, new, self._rolling_new_replicas(md, [new, *olds], new))
            olds = self._scale_olds_rolling(md, new, olds)
        self._cleanup(md, olds)

    def _rolling_new_replicas(
        self, md: MachineDeployment, all_sets: list[MachineSet], new: MachineSet
    ) -> int:
        """How many Machines the new set may want now: up to the desired count, as long as all sets
        together want no more than ``replicas + maxSurge``."""
        desired = md.spec.desired
        have = new.spec.desired
        if have >= desired:
            return desired
        surge, _ = md.spec.surge_and_unavailable()
        wanted = sum(s.spec.desired for s in all_sets)
        room = desired + surge - wanted
        if room <= 0:
            return have
        return have + min(room, desired - have)

    def _scale_olds_rolling(
        self, md: MachineDeployment, new: MachineSet, olds: list[MachineSet]
    ) -> list[MachineSet]:
        """Scale the old sets down as far as ``replicas - maxUnavailable`` available Machines allow: first
        Machines that are not available anyway, then available ones, oldest set first."""
        if sum(s.spec.desired for s in olds) == 0:
            return olds
        desired = md.spec.desired
        _, max_unavailable = md.spec.surge_and_unavailable()
        min_available = desired - max_unavailable
        new_unavailable = max(0, new.spec.desired - _available(new))
        wanted = new.spec.desired + sum(s.spec.desired for s in olds)
        allowance = wanted - min_available - new_unavailable
        if allowance <= 0:
            return olds
        scaled: list[MachineSet] = []
        for old in _oldest_first(olds):
            unhealthy = old.spec.desired - _available(old)
            cut = min(unhealthy, allowance) if old.spec.desired > 0 and unhealthy > 0 else 0
            allowance -= max(cut, 0)
            scaled.append(self._scale(md, old, old.spec.desired - cut) if cut > 0 else old)
        available = _available(new) + sum(_available(s) for s in scaled)
        return self._trim(md, scaled, available - min_available)

    def _trim(self, md: MachineDeployment, sets: list[MachineSet], excess: int) -> list[MachineSet]:
        """Take ``excess`` wanted Machines away from ``sets``, in their order."""
        result: list[MachineSet] = []
        for ms in sets:
            cut = min(ms.spec.desired, excess) if excess > 0 else 0
            excess -= cut
            result.append(self._scale(md, ms, ms.spec.desired - cut) if cut > 0 else ms)
        return result

    def _scale_olds_on_delete(
        self, md: MachineDeployment, new: MachineSet, olds: list[MachineSet]
    ) -> list[MachineSet]:
        """``OnDelete``: an old set wants no more Machines than it still has (those deleted by hand are
        not replaced), and, when the deployment scales down, old sets give up Machines first."""
        result: list[MachineSet] = []
        for old in _oldest_first(olds):
            gone = old.status.observed_generation is not None and old.spec.desired > old.status.replicas
            result.append(self._scale(md, old, old.status.replicas) if gone else old)
        excess = sum(s.spec.desired for s in result) + new.spec.desired - md.spec.desired
        return self._trim(md, result, excess)

    def _cleanup(self, md: MachineDeployment, olds: list[MachineSet]) -> None:
        """Delete old sets with no Machines left beyond ``revisionHistoryLimit``, oldest first."""
        limit = md.spec.revision_history_limit
        limit = 1 if limit is None else limit
        empty = [s for s in olds if s.spec.desired == 0 and s.status.replicas == 0 and not s.being_deleted]
        empty.sort(key=lambda s: (_revision(s), _created(s), s.name))
        for ms in empty[: max(0, len(empty) - limit)]:
            if _set_machines(self.store, ms):
                continue
            with contextlib.suppress(NotFound):
                self.store.delete(MachineSet, ms.name, ms.namespace)
                _log.info("old machineset deleted", machinedeployment=md.name, machineset=ms.name)

    # -- MachineSet writes ---------------------------------------------------------------------------
    def _set_annotations(self, md: MachineDeployment) -> dict[str, str]:
        surge, _ = md.spec.surge_and_unavailable()
        annotations = {
            k: v for k, v in md.metadata.annotations.items() if not k.startswith("kubectl.kubernetes.io/")
        }
        annotations[DESIRED_REPLICAS_ANNOTATION] = str(md.spec.desired)
        annotations[MAX_REPLICAS_ANNOTATION] = str(md.spec.desired + surge)
        annotations[DISABLE_MACHINE_CREATE_ANNOTATION] = "false"
        annotations.pop(REVISION_ANNOTATION, None)
        return annotations

    def _create_set(self, md: MachineDeployment, digest: str, live: list[MachineSet]) -> MachineSet:
        """The template's set, named from the deployment's uid and the template hash: a writer whose view
        lags finds the set another made (or that it made itself before it died) instead of a second one."""
        revision = max((_revision(s) for s in live), default=0) + 1
        for attempt in range(_SET_NAME_ATTEMPTS):
            # Another attempt only when the name is held by a set being deleted, or not this template's.
            suffix = derived_suffix(md.metadata.uid or md.name, digest, *([str(attempt)] if attempt else []))
            try:
                return self._create_set_named(md, digest, suffix, revision)
            except AlreadyExists:
                name = f"{md.name}-{suffix}"
                found = get_or_none(api_reader(self.store), MachineSet, name, md.namespace)
                if (
                    found is not None
                    and controlled_by(found, md)
                    and template_of(found) == digest
                    and not found.being_deleted
                ):
                    self._note_revision(md, max(_revision(found), 1))
                    return found
        raise AlreadyExists(
            f"MachineDeployment {md.namespace}/{md.name}: no free MachineSet name after "
            f"{_SET_NAME_ATTEMPTS} attempts"
        )

    def _create_set_named(self, md: MachineDeployment, digest: str, suffix: str, revision: int) -> MachineSet:
        hash_label = template_hash_label(digest, suffix)
        template = md.spec.template.model_copy(deep=True)
        template.metadata.labels[TEMPLATE_HASH_LABEL] = hash_label
        template.metadata.labels[DEPLOYMENT_NAME_LABEL] = label_value(md.name)
        selector = md.spec.selector.model_copy(deep=True)
        selector.match_labels[TEMPLATE_HASH_LABEL] = hash_label
        labels = dict(md.spec.template.metadata.labels)
        labels[TEMPLATE_HASH_LABEL] = hash_label
        labels[DEPLOYMENT_NAME_LABEL] = label_value(md.name)
        labels[CLUSTER_NAME_LABEL] = md.spec.cluster_name
        annotations = self._set_annotations(md)
        annotations[REVISION_ANNOTATION] = str(revision)
        ms = MachineSet(
            metadata=ObjectMeta(
                name=f"{md.name}-{suffix}",
                namespace=md.namespace,
                labels=labels,
                annotations=annotations,
                owner_references=[md.owner_reference(controller=True)],
            ),
            spec=MachineSetSpec(
                cluster_name=md.spec.cluster_name,
                replicas=0,
                min_ready_seconds=md.spec.min_ready_seconds or 0,
                delete_policy=md.spec.delete_policy or "Random",
                selector=selector,
                template=template,
            ),
        )
        created = self.store.create(ms)
        self._note_revision(md, revision)
        _log.info("machineset created", machinedeployment=md.name, machineset=created.name, revision=revision)
        return created

    def _sync_set(self, md: MachineDeployment, ms: MachineSet, live: list[MachineSet]) -> MachineSet:
        """Carry what changes in place to the current set: the template's labels and annotations, the
        delete policy, minReadySeconds, the deployment's annotations and the newest revision."""
        top = max((_revision(s) for s in live), default=0)
        revision = _revision(ms) if _revision(ms) == top and top > 0 else top + 1
        wanted_meta = md.spec.template.metadata.model_copy(deep=True)
        wanted_meta.labels[TEMPLATE_HASH_LABEL] = ms.metadata.labels.get(TEMPLATE_HASH_LABEL, "")
        wanted_meta.labels[DEPLOYMENT_NAME_LABEL] = label_value(md.name)
        annotations = self._set_annotations(md)
        annotations[REVISION_ANNOTATION] = str(revision)

        def differs(s: MachineSet) -> bool:
            return (
                s.spec.template.metadata != wanted_meta
                or s.spec.delete_policy != (md.spec.delete_policy or "Random")
                or s.spec.min_ready_seconds != (md.spec.min_ready_seconds or 0)
                or any(s.metadata.annotations.get(k) != v for k, v in annotations.items())
            )

        def mutate(s: MachineSet) -> None:
            s.spec.template.metadata = MachineTemplateMetadata.model_validate(wanted_meta.model_dump())
            s.spec.delete_policy = md.spec.delete_policy or "Random"
            s.spec.min_ready_seconds = md.spec.min_ready_seconds or 0
            s.metadata.annotations.update(annotations)

        if differs(ms):
            ms = retry_on_conflict(self.store, ms, mutate)
        self._note_revision(md, revision)
        return ms

    def _note_revision(self, md: MachineDeployment, revision: int) -> None:
        if md.metadata.annotations.get(REVISION_ANNOTATION) == str(revision):
            return

        def mutate(d: MachineDeployment) -> None:
            d.metadata.annotations[REVISION_ANNOTATION] = str(revision)

        retry_on_conflict(self.store, md, mutate)

    def _scale(self, md: MachineDeployment, ms: MachineSet, replicas: int) -> MachineSet:
        if ms.spec.replicas == replicas:
            return ms
        surge, _ = md.spec.surge_and_unavailable()

        def mutate(s: MachineSet) -> None:
            s.spec.replicas = replicas
            s.metadata.annotations[DESIRED_REPLICAS_ANNOTATION] = str(md.spec.desired)
            s.metadata.annotations[MAX_REPLICAS_ANNOTATION] = str(md.spec.desired + surge)

        _log.info("machineset scaled", machinedeployment=md.name, machineset=ms.name, replicas=replicas)
        return retry_on_conflict(self.store, ms, mutate)

    # -- status and deletion ------------------------------------------------------------------------
    def _update_status(self, md: MachineDeployment, sets: list[MachineSet]) -> None:
        current = template_hash(md.spec.template)
        new = next((s for s in sets if template_of(s) == current and not s.being_deleted), None)
        spec: MachineDeploymentSpec = md.spec
        desired = spec.desired
        _, max_unavailable = spec.surge_and_unavailable()
        replicas = sum(s.status.replicas for s in sets)
        ready = sum(s.status.ready_replicas for s in sets)
        available = sum(s.status.available_replicas for s in sets)
        phase: MachineDeploymentPhase
        if any(s.status.failure_reason or s.status.failure_message for s in sets):
            phase = "Failed"
        elif desired == ready:
            phase = "Running"
        elif desired > ready:
            phase = "ScalingUp"
        else:
            phase = "ScalingDown"

        def apply(d: MachineDeployment) -> None:
            status = d.status
            status.observed_generation = d.metadata.generation
            status.selector = str(d.spec.selector.selector())
            status.replicas = replicas
            status.updated_replicas = new.status.replicas if new is not None else 0
            status.ready_replicas = ready
            status.available_replicas = available
            status.unavailable_replicas = max(0, desired - available)
            status.phase = phase
            enough = available >= desired - max_unavailable
            set_condition(
                status,
                AVAILABLE,
                enough,
                None if enough else "WaitingForAvailableMachines",
                None if enough else f"{available} of {desired} machines available",
                None if enough else "Warning",
            )
            done = phase == "Running" and replicas == desired and status.updated_replicas == desired
            set_condition(
                status,
                READY,
                done,
                None if done else "Phase" + phase,
                None if done else f"{ready} of {desired} machines ready, {status.updated_replicas} updated",
                None if done else "Info",
            )

        patch_status(self.store, md, apply)

    def _reconcile_delete(self, md: MachineDeployment) -> Result:
        sets = _deployment_sets(self.store, md)
        for ms in sets:
            if not ms.being_deleted:
                with contextlib.suppress(NotFound):
                    self.store.delete(MachineSet, ms.name, ms.namespace)
        if sets:
            return requeue_after(WAIT_FOR_DELETION)
        remove_finalizer(self.store, md, MACHINE_DEPLOYMENT_FINALIZER)
        return no_requeue()


def machine_set_controllers(store: ObjectStore) -> list[MachineDeploymentController | MachineSetController]:
    """The MachineDeployment and MachineSet controllers over ``store``."""
    return [MachineDeploymentController(store), MachineSetController(store)]
