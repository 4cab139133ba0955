"""The generic reconciler: one create/update/rollback flow per strategy class, for every resource.

``Engine.ensure`` makes one resource exist for a role of an owning object and records it in the owner's
status; ``Engine.remove`` deletes it. The flow is chosen from the resource class's *effective* traits (the
declared AWS facts, lowered by the endpoint profile), following the design "AWS Resource Handling":

=====  =========================  ==============================================================
class  traits                     create flow
=====  =========================  ==============================================================
1      tag on create              find by tags → [find by key] → create with tags (and token) → record
2      token, separate tagging    [find by key] → create with token → record → tag
3      separate tagging, no token find by tags → [find by key] → intent → create → record, tag;
                                  both failed → delete; delete failed → log + non-retryable
4      token, no tags             [find by key] → create with token → record
5      no tags, no token          [find by key] → intent → create → record; failed → delete;
                                  delete failed → log + non-retryable
=====  =========================  ==============================================================

Update (a recorded id): describe by id → add missing managed tags (never touching other tags) → update
mutable attributes → record. A recorded id AWS no longer knows is drift: the record is dropped and the
resource is created again (with a client token, the record is kept until its replacement is recorded, and
gives the replacement a token of its own: the lost resource's token would only return the lost resource).
Resources shared with the cloud provider are create/delete only.

Beyond the seed: a natural key is looked up before every create that has one (what makes classes 3 and 5
idempotent) — unless the create itself refuses a taken key and then makes nothing (a secret's name; a target
group in a VPC this process has just made: :meth:`~capa_py.cache.front.ReadThrough.creates_first`), when the
key is looked up only on that refusal — and before a create with neither tags, token nor key the engine
writes an *intent* to the owner's status — with the candidates that already existed — so that after a
crash it can find the one resource its interrupted create made and adopt it, or report that it cannot
decide. That adoption is
bounded by the profile's adoption window and by what the intent's first examination saw (see
:mod:`capa_py.engine.intents`). Whatever the engine takes without having recorded it (found by tags, by key
or through an intent) is first compared with the desired state: a differing immutable attribute is
:class:`~capa_py.engine.errors.AdoptionRefused`, before anything is tagged, changed or recorded.

This module holds the flows; the lookups (:mod:`~capa_py.engine.lookup`), intents
(:mod:`~capa_py.engine.intents`), steps (:mod:`~capa_py.engine.steps`) and removal
(:mod:`~capa_py.engine.removal`) live beside it. Every read and write of a resource goes through its
:class:`~capa_py.cache.front.ReadThrough`, which decides what AWS is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

from capa_py.api.aws import RecordedResource
from capa_py.api.meta import utcnow
from capa_py.aws.errors import AlreadyExists, AWSError
from capa_py.cache.front import ReadThrough
from capa_py.engine.errors import NonRetryableError, RecordError, RetryableError, Waiting
from capa_py.engine.intents import PREEXISTING, adopt_intent, write_intent
from capa_py.engine.lookup import found
from capa_py.engine.profiles import AWS, EndpointProfile
from capa_py.engine.removal import remove
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.scope import Recorder, ResourceEvents, Scope
from capa_py.engine.steps import (
    client_token,
    create,
    forget_record,
    record,
    record_or_retry,
    rollback,
    tag_or_retry,
)
from capa_py.engine.tags import CAPA_PY_ROLE_TAG, ROLE_TAG, STORE_TAG, managed_tags, missing_tags
from capa_py.engine.traits import StrategyClass, Traits, choose_strategy
from capa_py.logging import get_logger

D = TypeVar("D")
_log = get_logger("engine")


class Engine:
    """Runs the strategy flows. One engine serves every resource class under one endpoint profile."""

    def __init__(self, profile: EndpointProfile = AWS, clock: Callable[[], datetime] = utcnow) -> None:
        self.profile = profile
        self.clock = clock
        """Now, in UTC: intents are stamped and judged with it (tests move it past the adoption window)."""

    def traits(self, rc: ResourceClass[Any]) -> Traits:
        return self.profile.effective(rc.kind, rc.traits)

    def strategy(self, rc: ResourceClass[Any]) -> StrategyClass:
        return choose_strategy(self.traits(rc))

    # -- ensure ---------------------------------------------------------------------------------------
    def ensure(
        self,
        rc: ResourceClass[D],
        role: str,
        desired: D,
        scope: Scope,
        name: str | None = None,
        shared_with_cloud_provider: bool = False,
        capa_role_value: str | None = None,
    ) -> Observed:
        """Make the resource for ``role`` exist as ``desired`` and be recorded; return what AWS holds.

        ``capa_role_value`` is CAPA's role tag value where the role alone does not say it (an instance is
        ``control-plane`` or ``node``)."""
        reads = ReadThrough.of(rc, scope.reads)
        traits = self.traits(rc)
        strategy = choose_strategy(traits)
        tags = managed_tags(
            scope.cluster,
            role,
            name,
            scope.additional_tags,
            shared_with_cloud_provider,
            store_uid=scope.store_uid,
            capa_role_value=capa_role_value,
        )
        log = _log.bind(kind=rc.kind, role=role, strategy=strategy.label)
        recorded = scope.recorder.recorded(role)
        if recorded is not None:
            observed = reads.describe(recorded.id)
            if observed is not None:
                updated = self._update(
                    reads, traits, role, recorded, observed, desired, tags, scope, shared_with_cloud_provider
                )
                return reads.remember(updated)
            age = (utcnow() - recorded.created_at).total_seconds() if recorded.created_at else None
            if age is not None and age < self.profile.consistency_window:
                # Just created: AWS's describe may not see it yet; creating again would duplicate it.
                raise Waiting(
                    f"{rc.kind} {recorded.id} was created {age:.0f}s ago and is not visible yet", 5.0
                )
            log.warning("recorded resource is gone from AWS; creating it again", resource_id=recorded.id)
            if not traits.client_token:
                forget_record(scope, role)
            # With a token the lost record stays until its replacement is recorded: it gives the
            # replacement a token of its own (see steps.client_token).
        flow = {
            StrategyClass.TAG_ON_CREATE: self._create_tag_on_create,
            StrategyClass.TOKEN_SEPARATE_TAGGING: self._create_token_then_tag,
            StrategyClass.SEPARATE_TAGGING_NO_TOKEN: self._create_then_tag,
            StrategyClass.TOKEN_NO_TAGS: self._create_with_token,
            StrategyClass.NO_TAGS_NO_TOKEN: self._create_untracked,
        }[strategy]
        observed = flow(reads, traits, role, desired, tags, scope)
        if not shared_with_cloud_provider:
            recorded = scope.recorder.recorded(role)
            self._update_attributes(
                reads, traits, role, observed, desired, scope, recorded.tags_complete if recorded else True
            )
        return reads.remember(observed)

    def update(self, rc: ResourceClass[D], observed: Observed, desired: D) -> bool:
        """Bring a resource the caller observed through :meth:`ensure` to ``desired`` (attributes only,
        such as a security group's rules once the groups they name exist), keeping the shared observation
        in step."""
        reads = ReadThrough.of(rc)
        changed = reads.update(observed, desired)
        reads.remember(observed)
        return changed

    def _update_attributes(
        self,
        reads: ReadThrough[D],
        traits: Traits,
        role: str,
        observed: Observed,
        desired: D,
        scope: Scope,
        tags_complete: bool,
    ) -> bool:
        """Bring mutable attributes to the desired state; re-record (and say so) when the update changed
        the resource's id (a replaced route-table association)."""
        before = observed.id
        reads.update(observed, desired)
        if observed.id == before:
            return False
        record_or_retry(scope, role, reads.rc, observed, traits, tags_complete)
        return True

    def prefetch(self, rc: ResourceClass[Any], roles: Iterable[str], scope: Scope) -> None:
        """Describe the recorded resources of several roles in one batch, for the ensures that follow
        (see :meth:`~capa_py.cache.front.ReadThrough.prefetch`)."""
        records = [scope.recorder.recorded(role) for role in roles]
        ids = [record.id for record in records if record is not None and record.kind == rc.kind]
        traits = self.traits(rc)
        ReadThrough.of(rc, scope.reads).prefetch(
            ids,
            unrecorded=sum(1 for record in records if record is None),
            cluster=scope.cluster,
            by_tags=traits.taggable or traits.tag_on_create,
        )

    def _update(
        self,
        reads: ReadThrough[D],
        traits: Traits,
        role: str,
        recorded: RecordedResource,
        observed: Observed,
        desired: D,
        tags: dict[str, str],
        scope: Scope,
        shared: bool,
    ) -> Observed:
        rc = reads.rc
        tags_complete = True
        # A shared resource is handed off to the cloud provider, but only once its creation's tags arrived.
        if traits.taggable:
            if not shared or not recorded.tags_complete:
                missing = missing_tags(observed.tags, tags)
            else:
                # Handed off, but capa-py's identity tags are added when missing (made by an older version,
                # whose CAPA role tag held capa-py's role: it gets CAPA's value once).
                identity = (STORE_TAG, CAPA_PY_ROLE_TAG)
                missing = {k: tags[k] for k in identity if k in tags and k not in observed.tags}
                if CAPA_PY_ROLE_TAG in missing and ROLE_TAG in tags and observed.tags.get(ROLE_TAG) == role:
                    missing[ROLE_TAG] = tags[ROLE_TAG]
            if missing:
                try:
                    rc.tag(observed.id, missing)
                    observed.tags.update(missing)
                except AWSError as exc:
                    tags_complete = False
                    record(scope, role, rc, observed, traits, tags_complete=False, quiet=True)
                    raise RetryableError(f"{rc.kind} {observed.id}: tagging failed: {exc}") from exc
        if not shared and self._update_attributes(
            reads, traits, role, observed, desired, scope, tags_complete
        ):
            return observed
        strategy = choose_strategy(traits).label
        if recorded.tags_complete != tags_complete or recorded.strategy != strategy:
            record(scope, role, rc, observed, traits, tags_complete)
        return observed

    # -- the five create flows --------------------------------------------------------------------------
    def _create_tag_on_create(
        self, reads: ReadThrough[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        token = client_token(scope, role) if traits.client_token else None
        if traits.natural_key and reads.creates_first(desired):
            observed = self._create_or_find_taken(reads, traits, role, desired, tags, token, scope)
        else:
            known = found(reads, traits, role, desired, scope, by_tags=True, require_owned=traits.taggable)
            if known is None:
                known = create(reads, role, desired, tags, token, traits, scope)
            observed = known
        record_or_retry(scope, role, reads.rc, observed, traits, tags_complete=True)
        return observed

    def _create_or_find_taken(
        self,
        reads: ReadThrough[D],
        traits: Traits,
        role: str,
        desired: D,
        tags: dict[str, str],
        token: str | None,
        scope: Scope,
    ) -> Observed:
        """Create first, for a class whose create refuses a taken key and makes nothing then: the key is
        looked up only on that refusal (a create interrupted before its record, or a key someone else
        holds), and what holds it is adopted only when it carries this role's and this store's tags."""
        try:
            return create(reads, role, desired, tags, token, traits, scope)
        except AlreadyExists as exc:
            holder = found(reads, traits, role, desired, scope, by_tags=False, require_owned=traits.taggable)
            if holder is None:
                # Refused, yet nothing live holds the key (one scheduled for deletion, or deleted since).
                raise RetryableError(
                    f"{reads.kind} {reads.rc.key_of(desired)}: the create was refused ({exc.code}) and "
                    "no live resource holds the key yet"
                ) from exc
            _log.info("adopting what holds the key", kind=reads.kind, role=role, resource_id=holder.id)
            return holder

    def _create_token_then_tag(
        self, reads: ReadThrough[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        rc = reads.rc
        observed = found(reads, traits, role, desired, scope, by_tags=False, require_owned=False)
        if observed is None:
            observed = create(reads, role, desired, None, client_token(scope, role), traits, scope)
        record_or_retry(scope, role, rc, observed, traits, tags_complete=False)
        tag_or_retry(rc, observed, tags)
        record(scope, role, rc, observed, traits, tags_complete=True, quiet=True)
        return observed

    def _create_then_tag(
        self, reads: ReadThrough[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        rc = reads.rc
        observed = found(reads, traits, role, desired, scope, by_tags=True, require_owned=False)
        if observed is not None:
            record_or_retry(scope, role, rc, observed, traits, tags_complete=False)
            tag_or_retry(rc, observed, missing_tags(observed.tags, tags))
            record(scope, role, rc, observed, traits, tags_complete=True, quiet=True)
            return observed
        adopted = adopt_intent(rc, role, desired, scope, self.profile, self.clock)
        if adopted is None:
            write_intent(rc, role, desired, scope, not traits.natural_key, self.clock)
            adopted = create(reads, role, desired, None, None, traits, scope)
        observed = adopted
        record_error: Exception | None = None
        tag_error: Exception | None = None
        try:
            record(scope, role, rc, observed, traits, tags_complete=False)
        except RecordError as exc:
            record_error = exc
        try:
            rc.tag(observed.id, missing_tags(observed.tags, tags))
            observed.tags.update(tags)
        except AWSError as exc:
            tag_error = exc
        if record_error is not None and tag_error is not None:
            rollback(
                rc, observed, role, f"recording failed ({record_error}) and tagging failed ({tag_error})"
            )
        if tag_error is not None:
            raise RetryableError(
                f"{rc.kind} {observed.id}: tagging failed, reconciled on update: {tag_error}"
            )
        if record_error is not None:
            raise RetryableError(
                f"{rc.kind} {observed.id}: recording failed, the next attempt finds it by tags: "
                f"{record_error}"
            )
        record(scope, role, rc, observed, traits, tags_complete=True, quiet=True)
        return observed

    def _create_with_token(
        self, reads: ReadThrough[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        observed = found(reads, traits, role, desired, scope, by_tags=False, require_owned=False)
        if observed is None:
            observed = create(reads, role, desired, None, client_token(scope, role), traits, scope)
        record_or_retry(scope, role, reads.rc, observed, traits, tags_complete=True)
        return observed

    def _create_untracked(
        self, reads: ReadThrough[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        rc = reads.rc
        observed = found(reads, traits, role, desired, scope, by_tags=False, require_owned=False)
        if observed is not None:
            record_or_retry(scope, role, rc, observed, traits, tags_complete=True)
            return observed
        adopted = adopt_intent(rc, role, desired, scope, self.profile, self.clock)
        if adopted is None:
            write_intent(rc, role, desired, scope, not traits.natural_key, self.clock)
            adopted = create(reads, role, desired, None, None, traits, scope)
        try:
            record(scope, role, rc, adopted, traits, tags_complete=True)
        except RecordError as exc:
            rollback(rc, adopted, role, f"recording failed ({exc})")
        return adopted

    # -- remove ---------------------------------------------------------------------------------------
    def remove(self, rc: ResourceClass[D], role: str, scope: Scope, desired: D | None = None) -> None:
        """Delete the resource of ``role`` (recorded, or found by tags/key/intent) and drop its record.

        Raises :class:`Waiting` while AWS is still deleting (or a dependency is still going away).
        """
        remove(rc, role, scope, desired, self.traits(rc), self.profile, self.clock)


__all__ = [
    "PREEXISTING",
    "Engine",
    "NonRetryableError",
    "Recorder",
    "ResourceEvents",
    "RetryableError",
    "Scope",
    "Waiting",
]
