"""Move clusters and everything that belongs to them from one object store to another (a pivot).

The model is Cluster API's ``clusterctl move``: the objects move, the infrastructure they describe stays
where it is. The target's controllers find the AWS resources (or the Hardware) through the moved statuses
and adopt them; nothing in AWS is created, changed or deleted by a move.

The graph of a cluster is found in its namespace: the Cluster, the objects its specs reference
(infrastructure and control-plane refs, machines' infrastructure refs and bootstrap data Secrets, the
machine templates and bootstrap Secrets of MachineDeployments and MachineSets, the AWSMachinePools and
bootstrap Secrets of MachinePools), the
objects labelled ``cluster.x-k8s.io/cluster-name`` with its name, the ``<cluster>-kubeconfig`` Secret, the
Hardware its TinkerbellMachines claim, and, transitively, every object whose owner references name an
object of the graph (Machines, Workflows, Templates, Secrets). The identities its AWSClusters use (and a
static identity's Secret) are global objects (:mod:`capa_py.move_identities`): copied to the target unless
it has them already, never deleted from the source, where other clusters may use them.

Order of a move, each step safe to interrupt:

1. pause every cluster on the source (``spec.paused: true``; the annotation ``capa-py.io/paused-by-move``
   remembers that the move, not the user, paused it);
2. create the global objects the target lacks, then every object on the target, owners first, with owner
   references' uids remapped to the new uids, status preserved, finalizers kept, the clusters still paused;
   each carries ``capa-py.io/moved-from-uid`` so that a re-run recognises (and updates) what it already
   created (a global object already there is left as it is);
3. remove the finalizers of the source copies, then delete them: no controller on the source acts on the
   deletion, so the AWS resources and Hardware stay as they are (global objects stay on the source);
4. unpause on the target the clusters the move paused.

A re-run after an interruption anywhere completes the move: the source stays paused until the target has
everything, and source objects already copied are recognised through the target's ``moved-from-uid``
annotations even once the objects that led to them are gone.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster
from capa_py.api.core import Namespace
from capa_py.api.machinepool import AWSMachinePool
from capa_py.api.meta import KubeObject
from capa_py.engine.tags import STORE_UID_ANNOTATION
from capa_py.logging import get_logger
from capa_py.move_graph import CLUSTER_NAME_LABEL, MOVABLE_KINDS, Graph, Key, discover, select_clusters
from capa_py.move_identities import IDENTITY_SECRET_NAMESPACE, conflicts, find_identities, on_target
from capa_py.store.errors import AlreadyExists, NotFound, StoreError
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore

MOVED_FROM_UID = "capa-py.io/moved-from-uid"
"""On a moved object on the target: the uid of the source object it was copied from."""
PAUSED_BY_MOVE = "capa-py.io/paused-by-move"
"""On a Cluster: the move paused it (it was not paused before), so the move unpauses it on the target."""

_log = get_logger("move")


class MoveError(Exception):
    """The move cannot start (a name taken on the target by an object the move did not create) or a store
    failed mid-way; a re-run completes a move that failed mid-way."""


class UnknownCluster(MoveError):
    """The cluster named to move is neither in the source nor on the target by an earlier move of it:
    nothing was moved."""


@dataclass
class MoveResult:
    """What a move did (or, with ``dry_run``, would do)."""

    objects: list[KubeObject] = field(default_factory=list)
    """The graph, owners first, as read from the source: the global objects first."""
    global_objects: list[KubeObject] = field(default_factory=list)
    """The global objects of the graph (identities and their Secrets): copied, kept on the source."""
    missing: list[str] = field(default_factory=list)
    """Global objects the graph references and the source lacks (not moved: nothing to copy)."""
    created: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)
    """Global objects the target already had (from an earlier move, or the same): left as they are."""
    updated: Counter[str] = field(default_factory=Counter)
    deleted: Counter[str] = field(default_factory=Counter)
    clusters: list[str] = field(default_factory=list)
    dry_run: bool = False

    def per_kind(self) -> dict[str, int]:
        """How many objects of each kind the graph holds."""
        return dict(Counter(o.kind for o in self.objects))


def _moved_uids(target: ObjectStore, namespaces: Iterable[str | None]) -> dict[str, KubeObject]:
    """Objects on the target that a move created, by the uid of their source object."""
    found: dict[str, KubeObject] = {}
    for namespace in set(namespaces):
        for kind in MOVABLE_KINDS:
            for obj in target.list(kind, namespace=namespace):
                source_uid = obj.metadata.annotations.get(MOVED_FROM_UID)
                if source_uid:
                    found[source_uid] = obj
    return found


def _copy_for_target(obj: KubeObject, uid_map: dict[str, str], source_uid: str) -> KubeObject:
    copy = obj.model_copy(deep=True)
    meta = copy.metadata
    meta.annotations[MOVED_FROM_UID] = obj.uid
    if isinstance(obj, AWSCluster | AWSMachine | AWSMachinePool):
        # Their AWS resources carry the source store's uid in their store tag: keep using it.
        meta.annotations.setdefault(STORE_UID_ANNOTATION, source_uid)
    meta.owner_references = [r for r in meta.owner_references if r.uid in uid_map]
    for ref in meta.owner_references:
        ref.uid = uid_map[ref.uid]
    meta.uid = None
    meta.resource_version = None
    meta.creation_timestamp = None
    meta.generation = None
    meta.deletion_timestamp = None
    return copy


def move(
    source: ObjectStore,
    target: ObjectStore,
    namespace: str | None = None,
    cluster: str | None = None,
    dry_run: bool = False,
    after_write: Callable[[str], None] | None = None,
    identity_secret_namespace: str = IDENTITY_SECRET_NAMESPACE,
) -> MoveResult:
    """Move the clusters of ``namespace`` (every namespace when None), or the one named ``cluster`` (in
    ``namespace``, default ``default``), with their graphs from ``source`` to ``target``.

    ``after_write`` is called after every write with a short description of it (progress, and the place
    where tests interrupt a move). ``identity_secret_namespace`` is where static identities' Secrets are
    (the controller's namespace). Raises :class:`MoveError` before changing anything when the target holds
    an object of the graph's name that no move created (for a global object: one that says something
    else); :class:`StoreError` from either store otherwise (a re-run completes the move).
    """
    notify = after_write or (lambda _: None)
    result = MoveResult(dry_run=dry_run)
    clusters = select_clusters(source, namespace, cluster)
    # Where earlier runs of this move may have left objects on the target (None: every namespace).
    namespaces: set[str | None] = {namespace or "default"} if cluster is not None else {namespace}
    if cluster is not None and not clusters:
        require_cluster(source, target, namespace or "default", cluster)
    moved = _moved_uids(target, namespaces)
    discovered = Graph(source, set(moved)).discover(clusters)
    identities = find_identities(source, discovered, identity_secret_namespace)
    global_uids = {g.uid for g in identities.objects}
    # A static identity's Secret in a moved cluster's namespace is still global: never deleted here.
    graph = [o for o in discovered if o.uid not in global_uids]
    result.objects = [*identities.objects, *graph]
    result.global_objects = identities.objects
    result.missing = identities.missing
    result.clusters = [f"{c.namespace}/{c.name}" for c in clusters]
    _refuse_taken_names(target, graph, moved)
    problems = conflicts(target, identities.objects, MOVED_FROM_UID)
    if problems:
        raise MoveError("; ".join(problems) + "; nothing was changed")
    if dry_run:
        return result
    if identities.missing:
        _log.warning("referenced objects missing on the source", missing=identities.missing)
    _log.info("move started", clusters=result.clusters, objects=len(result.objects))

    for c in (o for o in graph if isinstance(o, Cluster)):
        if c.spec.paused and PAUSED_BY_MOVE not in c.metadata.annotations:
            continue  # paused by its user: it stays paused on the target
        if not c.spec.paused:
            c.spec.paused = True
            c.metadata.annotations[PAUSED_BY_MOVE] = "true"
            updated = source.update(c)
            c.metadata = updated.metadata
            c.spec = updated.spec
            notify(f"paused Cluster {c.namespace}/{c.name} on the source")

    uid_map: dict[str, str] = {}
    for obj in identities.objects:
        existing = on_target(target, obj)
        if existing is None:
            existing = _create(target, _copy_for_target(obj, uid_map, source.uid))
            result.created[obj.kind] += 1
            notify(f"created {obj.ref()} on the target")
        else:
            result.kept[obj.kind] += 1
        uid_map[obj.uid] = existing.uid

    for obj in graph:
        existing = moved.get(obj.uid)
        copy = _copy_for_target(obj, uid_map, source.uid)
        if existing is None:
            written = _create(target, copy)
            result.created[obj.kind] += 1
            notify(f"created {obj.ref()} on the target")
        else:
            copy.metadata.resource_version = existing.metadata.resource_version
            written = target.update(copy)
            result.updated[obj.kind] += 1
            notify(f"updated {obj.ref()} on the target")
        if type(obj).HAS_STATUS:
            # Over whatever the target's controllers wrote since the create (a Paused condition): the
            # status is the source's, re-applied to a fresh copy after a conflict.
            written = retry_on_conflict(target, written, _with_status(type(obj), obj), status=True)
            notify(f"wrote the status of {obj.ref()} on the target")
        uid_map[obj.uid] = written.uid

    for obj in graph:
        if obj.metadata.finalizers:
            current = get_or_none(source, type(obj), obj.name, obj.namespace)
            if current is not None and current.metadata.finalizers:
                current.metadata.finalizers = []
                source.update(current)
                notify(f"removed the finalizers of {obj.ref()} on the source")
    for obj in reversed(graph):
        try:
            source.delete(type(obj), obj.name, obj.namespace, propagation="Orphan")
        except NotFound:
            continue
        result.deleted[obj.kind] += 1
        notify(f"deleted {obj.ref()} from the source")

    for namespace_ in namespaces:
        for c in target.list(Cluster, namespace=namespace_):
            if cluster is not None and c.name != cluster:
                continue
            if PAUSED_BY_MOVE in c.metadata.annotations and MOVED_FROM_UID in c.metadata.annotations:
                del c.metadata.annotations[PAUSED_BY_MOVE]
                c.spec.paused = False
                target.update(c)
                notify(f"unpaused Cluster {c.namespace}/{c.name} on the target")
    _log.info("move finished", created=sum(result.created.values()), deleted=sum(result.deleted.values()))
    return result


def require_cluster(source: ObjectStore, target: ObjectStore | None, namespace: str, name: str) -> None:
    """Raise :class:`UnknownCluster` unless the cluster is in ``source`` or a move put it on ``target``
    (an earlier move, complete or stopped after deleting it from the source: running it again completes
    it, or changes nothing). ``target`` None: a target that does not exist yet, so holds no such copy."""
    if get_or_none(source, Cluster, name, namespace) is not None:
        return
    found = get_or_none(target, Cluster, name, namespace) if target is not None else None
    if found is None or MOVED_FROM_UID not in found.metadata.annotations:
        raise UnknownCluster(
            f"cluster {namespace}/{name} is neither in the source store nor moved to the target: "
            "nothing was moved"
        )


def _with_status(kind: type[KubeObject], source: KubeObject) -> Callable[[KubeObject], None]:
    """A change that gives an object of ``kind`` the status ``source`` has."""
    status = source.to_dict().get("status", {})

    def apply(current: KubeObject) -> None:
        cast(Any, current).status = cast(
            Any, kind.model_validate({**current.to_dict(), "status": status})
        ).status

    return apply


def _create(target: ObjectStore, obj: KubeObject) -> KubeObject:
    """Create ``obj``, creating its namespace first when the target (a real API server) says it is missing."""
    try:
        return target.create(obj)
    except NotFound:
        if not obj.namespace:
            raise
    with contextlib.suppress(AlreadyExists):
        target.create(Namespace.model_validate({"metadata": {"name": obj.namespace}}))
    return target.create(obj)


def _refuse_taken_names(target: ObjectStore, graph: list[KubeObject], moved: dict[str, KubeObject]) -> None:
    for obj in graph:
        if obj.uid in moved:
            continue
        try:
            found = target.get(type(obj), obj.name, obj.namespace)
        except NotFound:
            continue
        except StoreError as exc:
            raise MoveError(f"cannot read the target: {exc}") from exc
        raise MoveError(
            f"{found.ref()} already exists on the target and was not moved there from this source; "
            "nothing was changed"
        )


__all__ = [
    "CLUSTER_NAME_LABEL",
    "MOVABLE_KINDS",
    "MOVED_FROM_UID",
    "PAUSED_BY_MOVE",
    "Key",
    "MoveError",
    "MoveResult",
    "UnknownCluster",
    "discover",
    "move",
    "require_cluster",
]
