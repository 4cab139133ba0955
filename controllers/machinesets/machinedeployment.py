"""Cluster API core's MachineDeployment controller, for the embedded mode.

A MachineDeployment keeps one MachineSet per distinct Machine template (named by
:func:`controllers.machinesets.naming.set_suffix`, labelled ``machine-template-hash: <template hash>-<the
same 5>`` and ``cluster.x-k8s.io/deployment-name``, controlled by the deployment) and moves Machines from the
old sets to the new one: with ``RollingUpdate`` never more than ``replicas + maxSurge`` Machines wanted at
once and never fewer than ``replicas - maxUnavailable`` available, as a Kubernetes Deployment rolls out; with
``OnDelete`` a new Machine only once an old one has been deleted by hand. Old sets scaled to zero are kept up
to ``revisionHistoryLimit``. Deleting a MachineDeployment deletes its MachineSets, held by a finalizer until
they are gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

from capa_py.api.cluster import CLUSTER_NAME_LABEL, PAUSED_ANNOTATION, Cluster
from capa_py.api.conditions import READY, set_condition
from capa_py.api.machinesets import (
    DEPLOYMENT_NAME_LABEL,
    DESIRED_REPLICAS_ANNOTATION,
    DISABLE_MACHINE_CREATE_ANNOTATION,
    MACHINE_DEPLOYMENT_FINALIZER,
    MAX_REPLICAS_ANNOTATION,
    REVISION_ANNOTATION,
    TEMPLATE_HASH_LABEL,
    MachineDeployment,
    MachineDeploymentPhase,
    MachineDeploymentSpec,
    MachineSet,
    MachineSetSpec,
    MachineTemplateMetadata,
    template_hash,
    template_hash_label,
    template_of,
)
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.ctrlkit.result import Result, no_requeue, requeue_after
from capa_py.logging import get_logger
from capa_py.runtime.informer import api_reader
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import AlreadyExists, NotFound
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.base import add_finalizer, ensure_labels, ensure_owner, fetch, patch_status, remove_finalizer
from controllers.machinesets.machineset import WAIT_FOR_CLUSTER, WAIT_FOR_DELETION, set_machines
from controllers.machinesets.naming import controlled_by, controller_of, label_value, revision_of, set_suffix
from controllers.machinesets.ordering import created_at

_log = get_logger("controller.machinesets")

AVAILABLE = "Available"
_SET_NAME_ATTEMPTS = 10


def _deployment_sets(store: ObjectStore, md: MachineDeployment) -> list[MachineSet]:
    return [s for s in store.list(MachineSet, namespace=md.namespace) if controlled_by(s, md)]


def _oldest_first(sets: Iterable[MachineSet]) -> list[MachineSet]:
    return sorted(sets, key=lambda s: (created_at(s), revision_of(s), s.name))


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
        empty.sort(key=lambda s: (revision_of(s), created_at(s), s.name))
        for ms in empty[: max(0, len(empty) - limit)]:
            if set_machines(self.store, ms):
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
        revision = max((revision_of(s) for s in live), default=0) + 1
        for attempt in range(_SET_NAME_ATTEMPTS):
            # Another attempt only when the name is held by a set being deleted, or not this template's.
            suffix = set_suffix(md, digest, attempt)
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
                    self._noterevision_of(md, max(revision_of(found), 1))
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
        self._noterevision_of(md, revision)
        _log.info("machineset created", machinedeployment=md.name, machineset=created.name, revision=revision)
        return created

    def _sync_set(self, md: MachineDeployment, ms: MachineSet, live: list[MachineSet]) -> MachineSet:
        """Carry what changes in place to the current set: the template's labels and annotations, the
        delete policy, minReadySeconds, the deployment's annotations and the newest revision."""
        top = max((revision_of(s) for s in live), default=0)
        revision = revision_of(ms) if revision_of(ms) == top and top > 0 else top + 1
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
        self._noterevision_of(md, revision)
        return ms

    def _noterevision_of(self, md: MachineDeployment, revision: int) -> None:
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
