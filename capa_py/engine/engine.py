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
idempotent), and before a create with neither tags, token nor key the engine writes an *intent* to the
owner's status — with the candidates that already existed — so that after a crash it can find the one
resource its interrupted create made and adopt it, or report that it cannot decide. That adoption is
bounded by the profile's adoption window and by what the intent's first examination saw (see
``_adopt_intent``). Whatever the engine takes without having recorded it (found by tags, by key or through
an intent) is first compared with the desired state: a differing immutable attribute is
:class:`~capa_py.engine.errors.AdoptionRefused`, before anything is tagged, changed or recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from capa_py.api.aws import IntentRecord, RecordedResource
from capa_py.api.meta import utcnow
from capa_py.aws.errors import AWSError, DependencyViolation, NotFound
from capa_py.aws.observations import MISS, Observations
from capa_py.engine.errors import (
    AdoptionRefused,
    ClusterOwnedElsewhere,
    NaturalKeyTaken,
    NonRetryableError,
    RecordError,
    RetryableError,
    RollbackFailed,
    UndecidableIntent,
    Waiting,
)
from capa_py.engine.profiles import AWS, EndpointProfile
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.tags import (
    CAPA_PY_ROLE_TAG,
    OWNED,
    ROLE_TAG,
    STORE_TAG,
    cluster_tag_key,
    foreign_store,
    has_role,
    managed_tags,
    missing_tags,
    owning_cluster,
)
from capa_py.engine.tokens import client_token
from capa_py.engine.traits import StrategyClass, Traits, choose_strategy
from capa_py.logging import get_logger

D = TypeVar("D")
_log = get_logger("engine")
PREEXISTING = "preexisting"
PENDING_FRESHNESS = 2.0
"""How long an observation of a resource that is not ready yet (pending, provisioning) may be reused: long
enough for the machines of one cluster, reconciled together, to share one DescribeInstances; shorter than
the first poll after a create (3 s, :mod:`controllers.waits`), so that every poll asks AWS."""
_GOING_STATES = frozenset({"deleting", "shutting-down", "terminated", "deleted"})


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
    prefetched: dict[tuple[str, str], Observed] = field(default_factory=dict)
    """Observations made in bulk earlier in this reconcile (see :meth:`Engine.prefetch`); each is used
    once."""
    tagged: dict[str, list[Observed]] = field(default_factory=dict)
    """Per kind, every resource carrying this cluster's owned tag, listed once for the roles not yet
    recorded; ``_find_by_tags`` picks from it instead of asking per role."""
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


def _owned(observed: Observed, scope: Scope, role: str) -> bool:
    return has_role(observed.tags, scope.cluster, role)


def _this_stores(observed: Observed, scope: Scope) -> bool:
    """Whether a resource found by tags or key may be this store's (never another store's, never one
    carrying the cluster's owned tag but no capa-py store tag)."""
    if scope.store_uid is None or observed.tags.get(cluster_tag_key(scope.cluster)) != OWNED:
        return True
    return foreign_store(observed.tags, scope.store_uid) is None


def _refuse_foreign(kind: str, observed: Observed, scope: Scope) -> None:
    """Raise :class:`ClusterOwnedElsewhere` for a resource of this cluster's name another store owns."""
    if _this_stores(observed, scope):
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


def _deletable(rc: ResourceClass[D], observed: Observed, desired: D | None, role: str, how: str) -> bool:
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


def _fingerprint(values: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(values), sort_keys=True).encode()).hexdigest()[:16]


def observations_of(rc: ResourceClass[Any]) -> Observations | None:
    """The shared observations of the resource class's region, when they are in use."""
    observations = getattr(rc.aws, "observations", None)
    return observations if isinstance(observations, Observations) and observations.enabled else None


def _ttl(rc: ResourceClass[Any], observed: Observed) -> float:
    if observed.stale:
        return float("-inf")
    return rc.freshness if rc.is_ready(observed) else min(PENDING_FRESHNESS, rc.freshness)


def _listing_key(scope: Scope, rc: ResourceClass[D], desired: D | None) -> tuple[str, ...]:
    parent = rc.parent_of(desired) if desired is not None else None
    return ("tagged", scope.cluster, rc.kind, parent or "")


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
            observed = scope.prefetched.pop((rc.kind, recorded.id), None) or self.observe(rc, recorded.id)
            if observed is not None:
                updated = self._update(
                    rc, traits, role, recorded, observed, desired, tags, scope, shared_with_cloud_provider
                )
                return self._remember(rc, updated)
            age = (utcnow() - recorded.created_at).total_seconds() if recorded.created_at else None
            if age is not None and age < self.profile.consistency_window:
                # Just created: AWS's describe may not see it yet; creating again would duplicate it.
                raise Waiting(
                    f"{rc.kind} {recorded.id} was created {age:.0f}s ago and is not visible yet", 5.0
                )
            log.warning("recorded resource is gone from AWS; creating it again", resource_id=recorded.id)
            if not traits.client_token:
                self._forget(scope, role)
            # With a token the lost record stays until its replacement is recorded: it gives the
            # replacement a token of its own (see _client_token).
        flow = {
            StrategyClass.TAG_ON_CREATE: self._create_tag_on_create,
            StrategyClass.TOKEN_SEPARATE_TAGGING: self._create_token_then_tag,
            StrategyClass.SEPARATE_TAGGING_NO_TOKEN: self._create_then_tag,
            StrategyClass.TOKEN_NO_TAGS: self._create_with_token,
            StrategyClass.NO_TAGS_NO_TOKEN: self._create_untracked,
        }[strategy]
        observed = flow(rc, traits, role, desired, tags, scope)
        if not shared_with_cloud_provider:
            recorded = scope.recorder.recorded(role)
            self._update_attributes(
                rc, traits, role, observed, desired, scope, recorded.tags_complete if recorded else True
            )
        return self._remember(rc, observed)

    # -- shared observations ------------------------------------------------------------------------------
    def observe(self, rc: ResourceClass[Any], resource_id: str) -> Observed | None:
        """The resource ``resource_id`` as AWS holds it: a fresh shared observation when there is one, else
        one refresh that describes every due resource of the kind at once (every cluster's), else — for an
        id that refresh did not return — a describe of it alone, before anyone acts on its absence."""
        observations = observations_of(rc)
        if observations is None:
            return rc.describe_by_id(resource_id)
        hit = observations.get(rc.kind, resource_id)
        if hit is MISS:
            with observations.refreshing(rc.kind):
                hit = observations.get(rc.kind, resource_id)
                if hit is MISS:
                    self._refresh(rc, observations, [resource_id])
                    hit = observations.get(rc.kind, resource_id)
        if isinstance(hit, Observed):
            return hit
        observed = rc.describe_by_id(resource_id)
        if observed is not None:
            observations.put(rc.kind, observed.id, observed, _ttl(rc, observed))
        return observed

    @staticmethod
    def _refresh(rc: ResourceClass[Any], observations: Observations, ids: Iterable[str]) -> None:
        wanted = sorted(set(observations.stale(rc.kind)) | set(ids))
        found = rc.describe_many(wanted)
        for resource_id in wanted:
            observed = found.get(resource_id)
            if observed is None:
                observations.forget(rc.kind, resource_id)
            else:
                observations.put(rc.kind, resource_id, observed, _ttl(rc, observed))

    @staticmethod
    def learn(rc: ResourceClass[Any], observed: Observed) -> None:
        """Share what the caller just described itself (a wait step's poll) as a fresh observation."""
        observations = observations_of(rc)
        if observations is not None:
            observations.put(rc.kind, observed.id, observed, _ttl(rc, observed))

    @staticmethod
    def _remember(rc: ResourceClass[Any], observed: Observed) -> Observed:
        observations = observations_of(rc)
        if observations is not None:
            observations.amend(rc.kind, observed.id, observed, _ttl(rc, observed))
        return observed

    def update(self, rc: ResourceClass[D], observed: Observed, desired: D) -> bool:
        """Bring a resource the caller observed through :meth:`ensure` to ``desired`` (attributes only,
        such as a security group's rules once the groups they name exist), keeping the shared observation
        in step."""
        changed = rc.update(observed, desired)
        if changed and not rc.tracks_updates:
            observed.stale = True
        self._remember(rc, observed)
        return changed

    def _update_attributes(
        self,
        rc: ResourceClass[D],
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
        if rc.update(observed, desired) and not rc.tracks_updates:
            observed.stale = True
        if observed.id == before:
            return False
        self._record_or_retry(scope, role, rc, observed, traits, tags_complete)
        return True

    def prefetch(self, rc: ResourceClass[Any], roles: Iterable[str], scope: Scope) -> None:
        """Describe the recorded resources of several roles in one batch, for the ensures that follow.

        Repeated Describe calls are a reconciler's main AWS cost; a batch turns N of them into one. An id
        the batch does not return is simply not prefetched, and its ensure asks for it alone.
        """
        roles = list(roles)
        records = [scope.recorder.recorded(role) for role in roles]
        ids = [record.id for record in records if record is not None and record.kind == rc.kind]
        observations = observations_of(rc)
        if observations is not None:
            # The shared observations batch across roles and clusters, and list by tags only when needed.
            due = [i for i in ids if observations.get(rc.kind, i) is MISS]
            if due:
                with observations.refreshing(rc.kind):
                    self._refresh(rc, observations, due)
            return
        if len(ids) >= 2:
            for resource_id, observed in rc.describe_many(ids).items():
                scope.prefetched[(rc.kind, resource_id)] = observed
        traits = self.traits(rc)
        unrecorded = sum(1 for record in records if record is None)
        if unrecorded >= 2 and (traits.taggable or traits.tag_on_create) and rc.kind not in scope.tagged:
            scope.tagged[rc.kind] = rc.describe_by_tags({cluster_tag_key(scope.cluster): OWNED}, None)

    def _update(
        self,
        rc: ResourceClass[D],
        traits: Traits,
        role: str,
        recorded: RecordedResource,
        observed: Observed,
        desired: D,
        tags: dict[str, str],
        scope: Scope,
        shared: bool,
    ) -> Observed:
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
                    self._record(scope, role, rc, observed, traits, tags_complete=False, quiet=True)
                    raise RetryableError(f"{rc.kind} {observed.id}: tagging failed: {exc}") from exc
        if not shared and self._update_attributes(rc, traits, role, observed, desired, scope, tags_complete):
            return observed
        strategy = choose_strategy(traits).label
        if recorded.tags_complete != tags_complete or recorded.strategy != strategy:
            self._record(scope, role, rc, observed, traits, tags_complete)
        return observed

    # -- the five create flows --------------------------------------------------------------------------
    def _create_tag_on_create(
        self, rc: ResourceClass[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        observed = self._found(rc, traits, role, desired, scope, by_tags=True, require_owned=traits.taggable)
        if observed is None:
            token = self._client_token(scope, role) if traits.client_token else None
            observed = self._create(rc, role, desired, tags, token, traits, scope)
        self._record_or_retry(scope, role, rc, observed, traits, tags_complete=True)
        return observed

    def _create_token_then_tag(
        self, rc: ResourceClass[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        observed = self._found(rc, traits, role, desired, scope, by_tags=False, require_owned=False)
        if observed is None:
            observed = self._create(rc, role, desired, None, self._client_token(scope, role), traits, scope)
        self._record_or_retry(scope, role, rc, observed, traits, tags_complete=False)
        self._tag_or_retry(rc, observed, tags)
        self._record(scope, role, rc, observed, traits, tags_complete=True, quiet=True)
        return observed

    def _create_then_tag(
        self, rc: ResourceClass[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        observed = self._found(rc, traits, role, desired, scope, by_tags=True, require_owned=False)
        if observed is not None:
            self._record_or_retry(scope, role, rc, observed, traits, tags_complete=False)
            self._tag_or_retry(rc, observed, missing_tags(observed.tags, tags))
            self._record(scope, role, rc, observed, traits, tags_complete=True, quiet=True)
            return observed
        adopted = self._adopt_intent(rc, role, desired, scope)
        if adopted is None:
            self._write_intent(rc, role, desired, scope, needed=not traits.natural_key)
            adopted = self._create(rc, role, desired, None, None, traits, scope)
        observed = adopted
        record_error: Exception | None = None
        tag_error: Exception | None = None
        try:
            self._record(scope, role, rc, observed, traits, tags_complete=False)
        except RecordError as exc:
            record_error = exc
        try:
            rc.tag(observed.id, missing_tags(observed.tags, tags))
            observed.tags.update(tags)
        except AWSError as exc:
            tag_error = exc
        if record_error is not None and tag_error is not None:
            self._rollback(
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
        self._record(scope, role, rc, observed, traits, tags_complete=True, quiet=True)
        return observed

    def _create_with_token(
        self, rc: ResourceClass[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        observed = self._found(rc, traits, role, desired, scope, by_tags=False, require_owned=False)
        if observed is None:
            observed = self._create(rc, role, desired, None, self._client_token(scope, role), traits, scope)
        self._record_or_retry(scope, role, rc, observed, traits, tags_complete=True)
        return observed

    def _create_untracked(
        self, rc: ResourceClass[D], traits: Traits, role: str, desired: D, tags: dict[str, str], scope: Scope
    ) -> Observed:
        observed = self._found(rc, traits, role, desired, scope, by_tags=False, require_owned=False)
        if observed is not None:
            self._record_or_retry(scope, role, rc, observed, traits, tags_complete=True)
            return observed
        adopted = self._adopt_intent(rc, role, desired, scope)
        if adopted is None:
            self._write_intent(rc, role, desired, scope, needed=not traits.natural_key)
            adopted = self._create(rc, role, desired, None, None, traits, scope)
        try:
            self._record(scope, role, rc, adopted, traits, tags_complete=True)
        except RecordError as exc:
            self._rollback(rc, adopted, role, f"recording failed ({exc})")
        return adopted

    # -- steps -------------------------------------------------------------------------------------------
    def _create(
        self,
        rc: ResourceClass[D],
        role: str,
        desired: D,
        tags: dict[str, str] | None,
        token: str | None,
        traits: Traits,
        scope: Scope,
    ) -> Observed:
        observations = observations_of(rc)
        try:
            observed = rc.create(desired, tags, token)
        except Exception:
            if observations is not None:
                # The create may have happened all the same (a lost response): what this process knows is
                # no longer the whole truth, so the next lookup asks AWS.
                observations.doubt(rc.parent_of(desired))
                observations.forget_facts(_listing_key(scope, rc, desired)[:3])
            raise
        if observations is not None:
            # What this process just made: inside it nothing else can exist yet, and the listing by tags
            # made before it must now show it (a failed record must find it there, not create another).
            observations.born(observed.id)
            parent = rc.parent_of(desired)
            if parent is not None:
                observations.add_child(parent, rc.kind, observed.id, rc.key_of(desired), observed)
            observations.extend_fact(_listing_key(scope, rc, desired), observed)
            observations.put(rc.kind, observed.id, observed, _ttl(rc, observed))
        if scope.events is not None:
            scope.events.created(rc.kind, role, observed.id)
        _log.info(
            "created",
            kind=rc.kind,
            role=role,
            resource_id=observed.id,
            strategy=choose_strategy(traits).label,
        )
        return observed

    @staticmethod
    def _client_token(scope: Scope, role: str) -> str:
        """The token for a create of ``role``: the owner's and the role's, or — when the role's recorded
        resource is gone (drift) — one derived from the lost id as well.

        AWS answers a token with the result of its first request for at least a day, even after that
        resource was deleted, so the lost resource's token would return the lost resource. A create with
        a record still in status happens only after drift under a token strategy (see ``ensure``); the lost
        record stays until its replacement is recorded, so a crash in between derives the same token again
        and gets the same replacement back.
        """
        lost = scope.recorder.recorded(role)
        return client_token(scope.owner_uid, role if lost is None else f"{role}:replacing:{lost.id}")

    def _find_by_tags(
        self, rc: ResourceClass[D], traits: Traits, role: str, desired: D, scope: Scope
    ) -> Observed | None:
        if not (traits.taggable or traits.tag_on_create):
            return None
        # Listed by the owned tag alone and matched on capa-py's role here: one call finds resources made
        # before ``capa-py.io/role`` existed (role in CAPA's key) as well.
        observations = observations_of(rc)
        parent = rc.parent_of(desired)
        owned = {cluster_tag_key(scope.cluster): OWNED}
        listed: list[Observed]
        if observations is not None and observations.born_here(parent):
            assert parent is not None
            listed = [o for _, o in observations.children(parent, rc.kind)]
        elif rc.kind in scope.tagged:
            listed = scope.tagged[rc.kind]
        elif observations is not None:
            listed = observations.fact(
                _listing_key(scope, rc, desired), rc.freshness, lambda: rc.describe_by_tags(owned, desired)
            )
        else:
            listed = rc.describe_by_tags(owned, desired)
        found = [o for o in listed if has_role(o.tags, scope.cluster, role)]
        if not found:
            return None
        for observed in found:
            _refuse_foreign(rc.kind, observed, scope)
        found.sort(key=lambda o: (o.created_at is None, o.created_at or 0, o.id))
        if len(found) > 1:
            _log.warning(
                "several resources carry this role's tags; adopting the oldest, the others are orphans "
                "for `capa audit`",
                kind=rc.kind,
                role=role,
                adopted=found[0].id,
                others=[o.id for o in found[1:]],
            )
        return found[0]

    def _find_by_key(
        self, rc: ResourceClass[D], traits: Traits, role: str, desired: D, scope: Scope, require_owned: bool
    ) -> Observed | None:
        if not traits.natural_key:
            return None
        observations = observations_of(rc)
        parent = rc.parent_of(desired)
        if observations is not None and observations.born_here(parent):
            assert parent is not None
            key = rc.key_of(desired)
            observed: Observed | None = next(
                (o for k, o in observations.children(parent, rc.kind) if k == key), None
            )
        else:
            observed = rc.describe_by_key(desired)
        if observed is None:
            return None
        # Without require_owned an untagged holder may be ours (a create interrupted before tagging), but
        # one another cluster owns never is.
        holder = owning_cluster(observed.tags)
        if holder == scope.cluster:
            _refuse_foreign(rc.kind, observed, scope)
        if (require_owned and not _owned(observed, scope, role)) or holder not in (None, scope.cluster):
            raise NaturalKeyTaken(
                f"{rc.kind} {rc.key_of(desired)} already exists as {observed.id}, which cluster "
                f"{scope.cluster} does not own; rename it or remove the other resource"
            )
        return observed

    def _found(
        self,
        rc: ResourceClass[D],
        traits: Traits,
        role: str,
        desired: D,
        scope: Scope,
        by_tags: bool,
        require_owned: bool,
    ) -> Observed | None:
        """The unrecorded resource of ``role`` found by its tags (when ``by_tags``) or else by its natural
        key, once its immutable attributes are known to match ``desired``."""
        if by_tags:
            observed = self._find_by_tags(rc, traits, role, desired, scope)
            if observed is not None:
                return self._compared(rc, observed, desired, "found by its tags")
        observed = self._find_by_key(rc, traits, role, desired, scope, require_owned=require_owned)
        if observed is not None:
            return self._compared(rc, observed, desired, f"found by its key {rc.key_of(desired)}")
        return None

    @staticmethod
    def _compared(rc: ResourceClass[D], observed: Observed, desired: D, how: str) -> Observed:
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

    def _adopt_intent(self, rc: ResourceClass[D], role: str, desired: D, scope: Scope) -> Observed | None:
        """After a crash between create and record: find the one resource the interrupted create made.

        Evidence bounds it (see docs/strategies.md, "Intents"): candidates that existed when the intent was
        written are excluded; a candidate whose creation time AWS reports must have been created within
        ``[started_at - clock_skew, started_at + adoption_window]``; the first examination is written into
        the intent and later ones consider only what it saw; a first examination after the window that
        sees a candidate without a creation time cannot attribute it (undecidable). One candidate left is
        adopted (after the comparison every adoption makes), none means create anew, several are
        undecidable.
        """
        intent = scope.recorder.intent(role)
        if intent is None:
            return None
        now = self.clock()
        window_end = intent.started_at + timedelta(seconds=self.profile.adoption_window)
        earliest = intent.started_at - timedelta(seconds=self.profile.clock_skew)
        preexisting = set(filter(None, intent.request.get(PREEXISTING, "").split(",")))
        candidates = [
            c
            for c in rc.describe_candidates(desired)
            if c.id not in preexisting and (c.created_at is None or earliest <= c.created_at <= window_end)
        ]
        if intent.examined_at is None:
            examined_at = now
            self._note_examination(rc, role, intent, now, sorted(c.id for c in candidates), scope)
        else:
            examined_at = intent.examined_at
            seen_first = set(intent.seen)
            candidates = [c for c in candidates if c.id in seen_first]
        undated = sorted(c.id for c in candidates if c.created_at is None)
        if examined_at > window_end and undated:
            raise UndecidableIntent(
                f"{rc.kind} for role {role}: the interrupted create of "
                f"{intent.started_at:%Y-%m-%d %H:%M:%S} was first examined "
                f"{(examined_at - intent.started_at).total_seconds():.0f}s later, after the "
                f"{self.profile.adoption_window:.0f}s adoption window, and {', '.join(undated)} cannot be "
                "dated: it may be someone else's; nothing is adopted. Check it (see `capa audit`); once it "
                "is deleted (or tagged by its owner) the next reconcile creates anew",
                sorted(c.id for c in candidates),
            )
        if len(candidates) == 1:
            _log.warning(
                "adopting the resource an interrupted create made",
                kind=rc.kind,
                role=role,
                resource_id=candidates[0].id,
                intent_started=str(intent.started_at),
            )
            return self._compared(rc, candidates[0], desired, "adopted from an interrupted create's intent")
        if len(candidates) > 1:
            ids = sorted(c.id for c in candidates)
            raise UndecidableIntent(
                f"{rc.kind} for role {role}: an interrupted create may have made one of {', '.join(ids)}; "
                "cannot decide which; delete the strays (see `capa audit`): the next reconcile adopts the "
                "one left",
                ids,
            )
        return None

    @staticmethod
    def _note_examination(
        rc: ResourceClass[D], role: str, intent: IntentRecord, now: datetime, seen: list[str], scope: Scope
    ) -> None:
        """Write what the first examination of an intent saw, before deciding anything from it."""
        examined = intent.model_copy(update={"examined_at": now, "seen": seen})
        try:
            scope.recorder.write_intent(role, examined)
        except RecordError as exc:
            raise RetryableError(
                f"{rc.kind} for role {role}: cannot record the examination of the intent; nothing adopted"
            ) from exc

    def _write_intent(self, rc: ResourceClass[D], role: str, desired: D, scope: Scope, needed: bool) -> None:
        if not needed:
            return
        request = dict(rc.fingerprint(desired))
        request[PREEXISTING] = ",".join(sorted(c.id for c in rc.describe_candidates(desired)))
        intent = IntentRecord(
            kind=rc.kind, started_at=self.clock(), fingerprint=_fingerprint(request), request=request
        )
        try:
            scope.recorder.write_intent(role, intent)
        except RecordError as exc:
            raise RetryableError(
                f"{rc.kind} for role {role}: cannot write the intent; nothing was created"
            ) from exc

    def _record(
        self,
        scope: Scope,
        role: str,
        rc: ResourceClass[D],
        observed: Observed,
        traits: Traits,
        tags_complete: bool,
        quiet: bool = False,
    ) -> None:
        resource = RecordedResource(
            kind=rc.kind,
            id=observed.id,
            strategy=choose_strategy(traits).label,
            tags_complete=tags_complete,
            created_at=observed.created_at.replace(microsecond=0) if observed.created_at else utcnow(),
        )
        try:
            scope.recorder.record(role, resource)
        except RecordError:
            if quiet:
                _log.info("status write failed; the update flow will record it", kind=rc.kind, role=role)
                return
            raise

    def _record_or_retry(
        self,
        scope: Scope,
        role: str,
        rc: ResourceClass[D],
        observed: Observed,
        traits: Traits,
        tags_complete: bool,
    ) -> None:
        try:
            self._record(scope, role, rc, observed, traits, tags_complete)
        except RecordError as exc:
            raise RetryableError(
                f"{rc.kind} {observed.id}: recording failed, requeueing the create: {exc}"
            ) from exc

    def _tag_or_retry(self, rc: ResourceClass[D], observed: Observed, tags: Mapping[str, str]) -> None:
        if not tags:
            return
        try:
            rc.tag(observed.id, tags)
            observed.tags.update(tags)
        except AWSError as exc:
            raise RetryableError(
                f"{rc.kind} {observed.id}: tagging failed, reconciled on update: {exc}"
            ) from exc

    def _rollback(self, rc: ResourceClass[D], observed: Observed, role: str, why: str) -> None:
        try:
            with contextlib.suppress(NotFound):  # already gone is what a rollback wants
                rc.delete(observed.id)
        except AWSError as exc:
            _log.error(
                "ORPHANED AWS RESOURCE: could not record it and could not delete it; delete it by hand or "
                "run `capa audit --delete`",
                kind=rc.kind,
                role=role,
                resource_id=observed.id,
                cause=why,
                delete_error=str(exc),
            )
            raise RollbackFailed(
                f"{rc.kind} {observed.id} was created but {why}, and deleting it failed ({exc}): "
                "it is orphaned",
                observed.id,
                rc.kind,
            ) from exc
        _log.warning(
            "rolled back a create that could not be recorded",
            kind=rc.kind,
            resource_id=observed.id,
            cause=why,
        )
        raise RetryableError(
            f"{rc.kind} {observed.id}: {why}; the create was rolled back and will be retried"
        )

    def _forget(self, scope: Scope, role: str) -> None:
        try:
            scope.recorder.forget(role)
        except RecordError as exc:
            raise RetryableError(f"cannot drop the record of role {role}: {exc}") from exc

    @staticmethod
    def forget(rc: ResourceClass[Any], resource_id: str, cluster: str | None = None) -> None:
        """Drop what is known of a resource being deleted (and the cluster's listings of its kind)."""
        observations = observations_of(rc)
        if observations is None:
            return
        observations.forget(rc.kind, resource_id)
        if cluster is not None:
            observations.forget_facts(("tagged", cluster, rc.kind))

    # -- remove ---------------------------------------------------------------------------------------
    def remove(self, rc: ResourceClass[D], role: str, scope: Scope, desired: D | None = None) -> None:
        """Delete the resource of ``role`` (recorded, or found by tags/key/intent) and drop its record.

        Raises :class:`Waiting` while AWS is still deleting (or a dependency is still going away).
        """
        traits = self.traits(rc)
        ids: list[str] = []
        recorded = scope.recorder.recorded(role)
        known_live: str | None = None
        live: Observed | None = None
        if recorded is not None and traits.client_token:
            # After drift under a token strategy the lost record stays until its replacement is recorded
            # (see ensure): a record whose resource is gone may hide an unrecorded replacement.
            live = rc.describe_by_id(recorded.id)
            known_live = recorded.id if live is not None else None
        if recorded is not None and (known_live is not None or not traits.client_token):
            ids.append(recorded.id)
        else:
            if rc.traits.taggable or rc.traits.tag_on_create:
                owned = rc.describe_by_tags({cluster_tag_key(scope.cluster): OWNED}, desired)
                for o in owned:
                    if not _owned(o, scope, role):
                        continue
                    if not _this_stores(o, scope):
                        _log.warning(
                            "not deleting a resource of this cluster's name that another store owns",
                            kind=rc.kind,
                            role=role,
                            resource_id=o.id,
                        )
                    elif _deletable(rc, o, desired, role, "found by its tags"):
                        ids.append(o.id)
            if traits.natural_key and desired is not None:
                keyed = rc.describe_by_key(desired)
                # Judged by the effective traits, as ensure adopts: only what is tagged at creation is
                # surely tagged when ours; otherwise ours may be untagged — but never another cluster's.
                tagged_at_birth = traits.tag_on_create and traits.taggable
                if (
                    keyed is not None
                    and keyed.id not in ids
                    and (
                        (_owned(keyed, scope, role) and _this_stores(keyed, scope))
                        or (not tagged_at_birth and owning_cluster(keyed.tags) is None)
                    )
                    and _deletable(rc, keyed, desired, role, "found by its key")
                ):
                    ids.append(keyed.id)
            if desired is not None and scope.recorder.intent(role) is not None:
                try:
                    adopted = self._adopt_intent(rc, role, desired, scope)
                except UndecidableIntent as exc:
                    raise NonRetryableError(str(exc)) from exc
                if adopted is not None and adopted.id not in ids:
                    ids.append(adopted.id)
        pending: list[str] = []
        for resource_id in ids:
            current = rc.describe_by_id(resource_id) if resource_id != known_live else live
            if resource_id != known_live and current is None:
                continue
            try:
                rc.delete(resource_id)
            except NotFound:
                continue
            except DependencyViolation as exc:
                raise Waiting(
                    f"{rc.kind} {resource_id}: waiting for dependents to go: {exc.code}", 5.0
                ) from exc
            self.forget(rc, resource_id, scope.cluster)
            _log.info("deleting", kind=rc.kind, role=role, resource_id=resource_id)
            if scope.events is not None and (current is None or current.state not in _GOING_STATES):
                # A resource already on its way out was reported when its delete was accepted.
                scope.events.deleted(rc.kind, role, resource_id)
            if rc.deletion_is_slow and rc.describe_by_id(resource_id) is not None:
                pending.append(resource_id)
        if pending:
            raise Waiting(f"{rc.kind} {', '.join(pending)}: deletion in progress", 10.0)
        if recorded is not None or scope.recorder.intent(role) is not None:
            self._forget(scope, role)
            if scope.recorder.intent(role) is not None:
                try:
                    scope.recorder.clear_intent(role)
                except RecordError as exc:
                    raise RetryableError(str(exc)) from exc


__all__ = [
    "Engine",
    "NonRetryableError",
    "Recorder",
    "ResourceEvents",
    "RetryableError",
    "Scope",
    "Waiting",
]
