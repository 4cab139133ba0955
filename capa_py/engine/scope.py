"""What a reconcile tells the engine about the owner (:class:`Scope`), where the engine records
(:class:`Recorder`) and reports (:class:`ResourceEvents`), and whose resources it may take.

A resource found by tags or key is this store's only when it carries this store's tag (or no cluster's
owned tag at all): another store's resource of the same cluster name is never adopted nor deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from capa_py.api.aws import IntentRecord, RecordedResource
from capa_py.cache.front import PassReads
from capa_py.engine.errors import ClusterOwnedElsewhere
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.tags import OWNED, cluster_tag_key, foreign_store, has_role
from capa_py.logging import get_logger

D = TypeVar("D")
_log = get_logger("engine")


class Recorder(Protocol):
    """Where the engine records what it created: the owning object's status, persisted at once.

    Every write method persists immediately and raises :class:`RecordError` when it cannot.
    """

    def recorded(self, role: str) -> RecordedResource | None: ...

    def record(self, role: str, resource: RecordedResource) -> None:
        """Persist ``resource`` under ``role`` and clear any intent for the role."""

    def forget(self, role: str) -> None: ...

    def intent(self, role: str) -> IntentRecord | None: ...

    def write_intent(self, role: str, intent: IntentRecord) -> None: ...

    def clear_intent(self, role: str) -> None: ...


class ResourceEvents(Protocol):
    """What the engine reports as it changes AWS: a create that returned, a delete AWS accepted.

    Implementations must not raise (the controllers record Kubernetes Events with it)."""

    def created(self, kind: str, role: str, resource_id: str) -> None: ...

    def deleted(self, kind: str, role: str, resource_id: str) -> None: ...


@dataclass
class Scope:
    """What a reconcile tells the engine about the owner: cluster, uid, where to record, extra tags."""

    cluster: str
    owner_uid: str
    recorder: Recorder
    additional_tags: Mapping[str, str] = field(default_factory=dict)
    reads: PassReads = field(default_factory=PassReads)
    """What this reconcile read in bulk earlier (see :meth:`Engine.prefetch`), for the lookups that
    follow."""
    store_uid: str | None = None
    """The uid of the store the owner lives in, written as ``capa-py.io/store`` and required of every
    resource adopted or deleted by tags; taken from the recorder's store when not given (None when the
    recorder has no store: no store tag is written or checked)."""
    events: ResourceEvents | None = None
    """Told of every resource this engine creates or deletes for the owner (Kubernetes Events)."""

    def __post_init__(self) -> None:
        if self.store_uid is None:
            uid = getattr(getattr(self.recorder, "store", None), "uid", None)
            self.store_uid = uid if isinstance(uid, str) else None


def owned(observed: Observed, scope: Scope, role: str) -> bool:
    return has_role(observed.tags, scope.cluster, role)


def this_stores(observed: Observed, scope: Scope) -> bool:
    """Whether a resource found by tags or key may be this store's (never another store's, never one
    carrying the cluster's owned tag but no capa-py store tag)."""
    if scope.store_uid is None or observed.tags.get(cluster_tag_key(scope.cluster)) != OWNED:
        return True
    return foreign_store(observed.tags, scope.store_uid) is None


def refuse_foreign(kind: str, observed: Observed, scope: Scope) -> None:
    """Raise :class:`ClusterOwnedElsewhere` for a resource of this cluster's name another store owns."""
    if this_stores(observed, scope):
        return
    assert scope.store_uid is not None
    other = foreign_store(observed.tags, scope.store_uid) or ""
    _log.error(
        "a resource with this cluster's owned tag belongs to another store; nothing is adopted",
        kind=kind,
        resource_id=observed.id,
        cluster=scope.cluster,
        other_store=other or None,
    )
    raise ClusterOwnedElsewhere(scope.cluster, kind, observed.id, other)


def deletable(rc: ResourceClass[D], observed: Observed, desired: D | None, role: str, how: str) -> bool:
    """Whether an unrecorded resource found for ``role`` may be deleted: not when it differs from the
    spec in an immutable attribute (ensure would have refused to adopt it, so it is not ours)."""
    mismatches = rc.mismatches(observed, desired) if desired is not None else []
    if mismatches:
        _log.warning(
            "not deleting a resource that differs from the spec: it was never adopted",
            kind=rc.kind,
            role=role,
            resource_id=observed.id,
            found_by=how,
            attributes=[m.attribute for m in mismatches],
        )
    return not mismatches


__all__ = ["Recorder", "ResourceEvents", "Scope", "deletable", "owned", "refuse_foreign", "this_stores"]
