"""Removing the resource of a role: the recorded one, or whatever its tags, its key or its intent find.

A delete acts on what AWS holds now: the lookups here ask AWS, never the shared observations; what is
deleted is forgotten through the resource class's :class:`~capa_py.cache.front.ReadThrough`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from capa_py.aws.errors import DependencyViolation, NotFound
from capa_py.cache.front import ReadThrough
from capa_py.engine.errors import NonRetryableError, RecordError, RetryableError, UndecidableIntent, Waiting
from capa_py.engine.intents import adopt_intent
from capa_py.engine.profiles import EndpointProfile
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.scope import Scope, deletable, owned, this_stores
from capa_py.engine.steps import forget_record
from capa_py.engine.tags import OWNED, cluster_tag_key, owning_cluster
from capa_py.engine.traits import Traits
from capa_py.logging import get_logger

D = TypeVar("D")
_log = get_logger("engine")
_GOING_STATES = frozenset({"deleting", "shutting-down", "terminated", "deleted"})


def remove(
    rc: ResourceClass[D],
    role: str,
    scope: Scope,
    desired: D | None,
    traits: Traits,
    profile: EndpointProfile,
    clock: Callable[[], datetime],
) -> None:
    """Delete the resource of ``role`` (recorded, or found by tags/key/intent) and drop its record.

    ``traits`` are the class's effective traits. Raises :class:`Waiting` while AWS is still deleting (or
    a dependency is still going away).
    """
    ids: list[str] = []
    recorded = scope.recorder.recorded(role)
    known_live: str | None = None
    live: Observed | None = None
    # A class whose id is its natural key names with its record any replacement too: the recorded id is
    # deleted as it is, without a describe first (its NotFound is done).
    by_record = recorded is not None and rc.id_is_key
    if recorded is not None and traits.client_token and not by_record:
        # After drift under a token strategy the lost record stays until its replacement is recorded
        # (see ensure): a record whose resource is gone may hide an unrecorded replacement.
        live = rc.describe_by_id(recorded.id)
        known_live = recorded.id if live is not None else None
    if recorded is not None and (known_live is not None or not traits.client_token or by_record):
        ids.append(recorded.id)
    else:
        ids += _unrecorded(rc, role, scope, desired, traits, profile, clock)
    pending: list[str] = []
    reads = ReadThrough.of(rc, scope.reads)
    for resource_id in ids:
        if by_record:
            current = None
        else:
            current = rc.describe_by_id(resource_id) if resource_id != known_live else live
            if resource_id != known_live and current is None:
                continue
        try:
            reads.delete(resource_id, scope.cluster)
        except NotFound:
            continue
        except DependencyViolation as exc:
            raise Waiting(f"{rc.kind} {resource_id}: waiting for dependents to go: {exc.code}", 5.0) from exc
        _log.info("deleting", kind=rc.kind, role=role, resource_id=resource_id)
        if scope.events is not None and (current is None or current.state not in _GOING_STATES):
            # A resource already on its way out was reported when its delete was accepted.
            scope.events.deleted(rc.kind, role, resource_id)
        if rc.deletion_is_slow and rc.describe_by_id(resource_id) is not None:
            pending.append(resource_id)
    if pending:
        raise Waiting(f"{rc.kind} {', '.join(pending)}: deletion in progress", 10.0)
    if recorded is not None or scope.recorder.intent(role) is not None:
        forget_record(scope, role)
        if scope.recorder.intent(role) is not None:
            try:
                scope.recorder.clear_intent(role)
            except RecordError as exc:
                raise RetryableError(str(exc)) from exc


def _unrecorded(
    rc: ResourceClass[D],
    role: str,
    scope: Scope,
    desired: D | None,
    traits: Traits,
    profile: EndpointProfile,
    clock: Callable[[], datetime],
) -> list[str]:
    """The ids of ``role``'s resources nothing records: found by tags, by key, or through an intent."""
    ids: list[str] = []
    if rc.traits.taggable or rc.traits.tag_on_create:
        for o in rc.describe_by_tags({cluster_tag_key(scope.cluster): OWNED}, desired):
            if not owned(o, scope, role):
                continue
            if not this_stores(o, scope):
                _log.warning(
                    "not deleting a resource of this cluster's name that another store owns",
                    kind=rc.kind,
                    role=role,
                    resource_id=o.id,
                )
            elif deletable(rc, o, desired, role, "found by its tags"):
                ids.append(o.id)
    if traits.natural_key and desired is not None:
        keyed = rc.describe_by_key(desired)
        # Judged by the effective traits, as ensure adopts: only what is tagged at creation is surely
        # tagged when ours; otherwise ours may be untagged — but never another cluster's.
        tagged_at_birth = traits.tag_on_create and traits.taggable
        if (
            keyed is not None
            and keyed.id not in ids
            and (
                (owned(keyed, scope, role) and this_stores(keyed, scope))
                or (not tagged_at_birth and owning_cluster(keyed.tags) is None)
            )
            and deletable(rc, keyed, desired, role, "found by its key")
        ):
            ids.append(keyed.id)
    if desired is not None and scope.recorder.intent(role) is not None:
        try:
            adopted = adopt_intent(rc, role, desired, scope, profile, clock)
        except UndecidableIntent as exc:
            raise NonRetryableError(str(exc)) from exc
        if adopted is not None and adopted.id not in ids:
            ids.append(adopted.id)
    return ids


__all__ = ["remove"]
