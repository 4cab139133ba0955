"""Finding the unrecorded resource of a role before creating one: by its tags, else by its natural key.

Whatever is found is first compared with the desired state (:func:`compared`): a differing immutable
attribute refuses the adoption (:class:`~capa_py.engine.errors.AdoptionRefused`) before anything is
tagged, changed or recorded. Reads go through the resource class's
:class:`~capa_py.cache.front.ReadThrough`.
"""

from __future__ import annotations

from typing import TypeVar

from capa_py.cache.front import ReadThrough
from capa_py.engine.errors import AdoptionRefused, NaturalKeyTaken
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.scope import Scope, owned, refuse_foreign
from capa_py.engine.tags import has_role, owning_cluster
from capa_py.engine.traits import Traits
from capa_py.logging import get_logger

D = TypeVar("D")
_log = get_logger("engine")


def found(
    reads: ReadThrough[D],
    traits: Traits,
    role: str,
    desired: D,
    scope: Scope,
    by_tags: bool,
    require_owned: bool,
) -> Observed | None:
    """The unrecorded resource of ``role`` found by its tags (when ``by_tags``) or else by its natural
    key, once its immutable attributes are known to match ``desired``."""
    rc = reads.rc
    if by_tags:
        observed = find_by_tags(reads, traits, role, desired, scope)
        if observed is not None:
            return compared(rc, observed, desired, "found by its tags")
    observed = find_by_key(reads, traits, role, desired, scope, require_owned=require_owned)
    if observed is not None:
        return compared(rc, observed, desired, f"found by its key {rc.key_of(desired)}")
    return None


def compared(rc: ResourceClass[D], observed: Observed, desired: D, how: str) -> Observed:
    """``observed`` when it is what ``desired`` asks for; else :class:`AdoptionRefused`, before the
    engine tags, modifies or records anything."""
    mismatches = rc.mismatches(observed, desired)
    if mismatches:
        _log.warning(
            "refusing to adopt a resource that differs from the spec",
            kind=rc.kind,
            resource_id=observed.id,
            found_by=how,
            attributes=[m.attribute for m in mismatches],
        )
        raise AdoptionRefused(rc.kind, observed.id, how, mismatches)
    return observed


def find_by_tags(
    reads: ReadThrough[D], traits: Traits, role: str, desired: D, scope: Scope
) -> Observed | None:
    """The oldest resource carrying this cluster's owned tag and ``role``'s tags (never another store's)."""
    if not (traits.taggable or traits.tag_on_create):
        return None
    # Listed by the owned tag alone and matched on capa-py's role here: one call finds resources made
    # before ``capa-py.io/role`` existed (role in CAPA's key) as well.
    listed = reads.tagged(scope.cluster, desired)
    matching = [o for o in listed if has_role(o.tags, scope.cluster, role)]
    if not matching:
        return None
    for observed in matching:
        refuse_foreign(reads.kind, observed, scope)
    matching.sort(key=lambda o: (o.created_at is None, o.created_at or 0, o.id))
    if len(matching) > 1:
        _log.warning(
            "several resources carry this role's tags; adopting the oldest, the others are orphans "
            "for `capa audit`",
            kind=reads.kind,
            role=role,
            adopted=matching[0].id,
            others=[o.id for o in matching[1:]],
        )
    return matching[0]


def find_by_key(
    reads: ReadThrough[D], traits: Traits, role: str, desired: D, scope: Scope, require_owned: bool
) -> Observed | None:
    """The resource holding ``desired``'s natural key; :class:`NaturalKeyTaken` when another cluster (or,
    with ``require_owned``, anyone but this role) holds it."""
    if not traits.natural_key:
        return None
    rc = reads.rc
    observed = reads.by_key(desired)
    if observed is None:
        return None
    # Without require_owned an untagged holder may be ours (a create interrupted before tagging), but
    # one another cluster owns never is.
    holder = owning_cluster(observed.tags)
    if holder == scope.cluster:
        refuse_foreign(rc.kind, observed, scope)
    if (require_owned and not owned(observed, scope, role)) or holder not in (None, scope.cluster):
        raise NaturalKeyTaken(
            f"{rc.kind} {rc.key_of(desired)} already exists as {observed.id}, which cluster "
            f"{scope.cluster} does not own; rename it or remove the other resource"
        )
    return observed


__all__ = ["compared", "find_by_key", "find_by_tags", "found"]
