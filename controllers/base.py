"""Pieces every controller shares: reading objects, finalizers, owner references, status patches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from capa_py.api.cluster import DELETE_FOR_MOVE_ANNOTATION, PAUSED_ANNOTATION, Cluster, Machine
from capa_py.api.contract import InfrastructureStatus
from capa_py.api.meta import KubeObject, ObjectReference
from capa_py.api.registry import REGISTRY, UnknownKind
from capa_py.engine.tags import STORE_UID_ANNOTATION
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore, WatchEvent

T = TypeVar("T", bound=KubeObject)


def fetch(store: ObjectStore, kind: type[T], key: ObjectKey) -> T | None:
    return get_or_none(store, kind, key.name, key.namespace or None)


def resolve_ref(store: ObjectStore, ref: ObjectReference | None, namespace: str | None) -> KubeObject | None:
    """The object an ObjectReference points at (None when unset, of an unknown kind, or absent)."""
    if ref is None or not ref.kind or not ref.name or not ref.api_version:
        return None
    try:
        kind = REGISTRY.for_gvk(ref.api_version, ref.kind)
    except UnknownKind:
        return None
    return get_or_none(store, kind, ref.name, ref.namespace or namespace)


def add_finalizer(store: ObjectStore, obj: T, finalizer: str) -> T:
    if finalizer in obj.metadata.finalizers:
        return obj

    def mutate(o: T) -> None:
        if finalizer not in o.metadata.finalizers:
            o.metadata.finalizers.append(finalizer)

    return retry_on_conflict(store, obj, mutate)


def record_store_uid(store: ObjectStore, obj: T) -> T:
    """Annotate ``obj`` with the store uid its AWS resources carry (``capa-py.io/store-uid``; already there
    on an object ``capa move`` brought), before any resource is made for it: a move by a tool that copies
    metadata but knows nothing of capa-py (``clusterctl move``) then brings it along, and the destination's
    controller adopts the resources as its own instead of refusing them as another store's."""
    if STORE_UID_ANNOTATION in obj.metadata.annotations:
        return obj
    uid = store.uid

    def mutate(o: T) -> None:
        o.metadata.annotations.setdefault(STORE_UID_ANNOTATION, uid)

    return retry_on_conflict(store, obj, mutate)


def left_alone(obj: KubeObject, cluster: Cluster | None) -> bool:
    """Whether an infrastructure object being deleted must be left as it is, its AWS resources untouched:
    its Cluster is paused (as Cluster API's providers do, the deletion waits for the unpause), or ``clusterctl
    move`` is deleting it after copying it to another management cluster (annotation
    ``clusterctl.cluster.x-k8s.io/delete-for-move``; clusterctl removes the finalizers itself)."""
    annotations = obj.metadata.annotations
    if DELETE_FOR_MOVE_ANNOTATION in annotations or PAUSED_ANNOTATION in annotations:
        return True
    return cluster is not None and cluster.paused


def remove_finalizer(store: ObjectStore, obj: T, finalizer: str) -> T:
    if finalizer not in obj.metadata.finalizers:
        return obj

    def mutate(o: T) -> None:
        o.metadata.finalizers = [f for f in o.metadata.finalizers if f != finalizer]

    return retry_on_conflict(store, obj, mutate)


def ensure_owner(store: ObjectStore, obj: T, owner: KubeObject, controller: bool = True) -> T:
    """Make ``owner`` an owner of ``obj`` (idempotent)."""
    if any(ref.uid == owner.metadata.uid for ref in obj.metadata.owner_references):
        return obj

    def mutate(o: T) -> None:
        if not any(ref.uid == owner.metadata.uid for ref in o.metadata.owner_references):
            o.metadata.owner_references.append(owner.owner_reference(controller=controller))

    return retry_on_conflict(store, obj, mutate)


def ensure_labels(store: ObjectStore, obj: T, labels: dict[str, str]) -> T:
    if all(obj.metadata.labels.get(k) == v for k, v in labels.items()):
        return obj

    def mutate(o: T) -> None:
        o.metadata.labels.update(labels)

    return retry_on_conflict(store, obj, mutate)


def with_contract(apply: Callable[[T], None], paused: str | None = None) -> Callable[[T], None]:
    """``apply``, then, on an infrastructure object, the v1beta2 contract's fields derived from the v1beta1
    ones it sets (:meth:`capa_py.api.contract.InfrastructureStatus.sync_contract`); ``paused`` says why the
    object is paused (its ``Paused`` condition True), None when it is not."""

    def applied(obj: T) -> None:
        apply(obj)
        status = getattr(obj, "status", None)
        if isinstance(status, InfrastructureStatus):
            status.sync_contract(obj.metadata.generation, paused)

    return applied


def patch_status(store: ObjectStore, obj: T, apply: Callable[[T], None], paused: str | None = None) -> T:
    """Apply a status change and write it only when it changes something (no write, no event otherwise).

    An infrastructure object's status is written for both Cluster API contracts (:func:`with_contract`): a
    controller that writes it is at work on the object, so its ``Paused`` condition is False unless
    ``paused`` says why it is not."""
    apply = with_contract(apply, paused)
    before = obj.to_dict().get("status")
    candidate = obj.model_copy(deep=True)
    apply(candidate)
    if candidate.to_dict().get("status") == before:
        return obj
    return retry_on_conflict(store, obj, apply, status=True)


def pause_reason(obj: KubeObject, cluster: Cluster | None) -> str | None:
    """Why a controller must leave ``obj`` as it is, as Cluster API's controllers say it; None when it need
    not: its Cluster has ``spec.paused`` or the paused annotation, or the object has that annotation."""
    if cluster is not None and cluster.spec.paused:
        return f"cluster {cluster.name} has spec.paused set to true"
    if cluster is not None and PAUSED_ANNOTATION in cluster.metadata.annotations:
        return f"cluster {cluster.name} has the {PAUSED_ANNOTATION} annotation"
    if PAUSED_ANNOTATION in obj.metadata.annotations:
        return f"{obj.KIND} {obj.name} has the {PAUSED_ANNOTATION} annotation"
    return None


def cluster_view(cluster: Cluster) -> object:
    """What an infrastructure cluster's controller follows of its Cluster (its ``views`` entry): which
    Cluster it is and whether it is paused."""
    return (cluster.metadata.uid, cluster.paused)


def paused_view(cluster: Cluster) -> object:
    """What an infrastructure machine's controller follows of a Cluster (its ``views`` entry): whether it is
    paused. Its other changes do not concern the machines."""
    return cluster.paused


def on_pause_transition(store: ObjectStore, event: WatchEvent[Any], kind: str) -> list[ObjectKey]:
    """For a Cluster's event that passed :func:`paused_view` as a change (it was paused or unpaused), the
    keys of the ``kind`` objects its Machines use, as Cluster API's providers watch Clusters: so that each
    reports its ``Paused`` condition and, once unpaused, catches up on what changed meanwhile."""
    cluster = event.object
    if event.type != "MODIFIED" or not isinstance(cluster, Cluster):
        return []
    namespace = cluster.metadata.namespace or ""
    keys = []
    for machine in store.list(Machine, namespace=namespace):
        name = machine.infrastructure_name(kind)
        if machine.spec.cluster_name == cluster.name and name:
            keys.append(ObjectKey(kind, namespace, name))
    return keys


def mark_paused(store: ObjectStore, obj: T, reason: str) -> T:
    """Report that the controller leaves ``obj`` alone (its ``Paused`` condition True, ``reason`` its
    message); written once, as any status change."""
    return patch_status(store, obj, lambda _: None, paused=reason)


def settle(controller: object, key: ObjectKey, final: KubeObject) -> None:
    """Tell the manager the object a reconcile acted on — the reconcile's own view, never a fresh read —
    so the events of its own writes (finalizers, owner references, endpoints) do not trigger another pass.
    If anything else changed the object meanwhile (a deletion, an edit), the store's copy differs from
    this view and the manager keeps that event."""
    from capa_py.runtime.manager import desired_fingerprint

    settled: dict[ObjectKey, str] = controller.__dict__.setdefault("final_state", {})
    settled[key] = desired_fingerprint(final)
