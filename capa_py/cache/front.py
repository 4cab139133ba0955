"""The read-through front of a resource class: what the engine and the services call to read and change it.

Repeated Describe calls are a reconciler's main AWS cost. A :class:`ReadThrough` stands in front of one
:class:`~capa_py.engine.resource.ResourceClass` and serves its reads from the region's shared observations
(:mod:`capa_py.aws.observations`) while they are fresh:

* :meth:`ReadThrough.describe`: a fresh observation, else one refresh describing every due resource of the
  kind at once (every cluster's), else a describe of the id alone before anyone acts on its absence;
* :meth:`ReadThrough.tagged` and :meth:`ReadThrough.by_key`: inside a parent this process created moments
  ago, what it created there (no Describe); else the cluster's listing by tags, made once per freshness
  bound; a natural key is described;
* :meth:`ReadThrough.create` and :meth:`ReadThrough.delete`: a create is noted (its birth, its place in
  its parent, the listing that must now show it); a failed create makes the front doubt what it knew; a
  delete forgets the resource and the cluster's listings of the kind;
* :meth:`ReadThrough.prefetch`: the recorded resources of several roles in one batch.

With the shared observations disabled (library use) every read goes to AWS, and only the batch of one
reconcile pass (:class:`PassReads`) is reused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from capa_py.aws.observations import MISS, Observations
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.tags import OWNED, cluster_tag_key

D = TypeVar("D")

PENDING_FRESHNESS = 2.0
"""How long an observation of a resource that is not ready yet (pending, provisioning) may be reused: long
enough for the machines of one cluster, reconciled together, to share one DescribeInstances; shorter than
the first poll after a create (3 s, :mod:`controllers.waits`), so that every poll asks AWS."""


@dataclass
class PassReads:
    """What one reconcile pass read in bulk when the shared observations are not in use."""

    prefetched: dict[tuple[str, str], Observed] = field(default_factory=dict)
    """Resources described in one batch by :meth:`ReadThrough.prefetch`; each is used once."""
    tagged: dict[str, list[Observed]] = field(default_factory=dict)
    """Per kind, every resource carrying the cluster's owned tag, listed once for the roles not yet
    recorded; :meth:`ReadThrough.tagged` picks from it instead of asking per role."""


def _listing_key(cluster: str, kind: str, parent: str | None) -> tuple[str, ...]:
    return ("tagged", cluster, kind, parent or "")


class ReadThrough(Generic[D]):
    """One resource class's reads and writes, through what the process already observed of AWS."""

    def __init__(
        self, rc: ResourceClass[D], observations: Observations | None, reads: PassReads | None = None
    ) -> None:
        self.rc = rc
        self._observations = observations if observations is not None and observations.enabled else None
        self._pass = reads if reads is not None else PassReads()

    @classmethod
    def of(cls, rc: ResourceClass[D], reads: PassReads | None = None) -> ReadThrough[D]:
        """The front of ``rc`` over its region's shared observations (and a pass's batch, ``reads``)."""
        observations = getattr(rc.aws, "observations", None)
        return cls(rc, observations if isinstance(observations, Observations) else None, reads)

    @property
    def kind(self) -> str:
        return self.rc.kind

    def _ttl(self, observed: Observed) -> float:
        if observed.stale:
            return float("-inf")
        return self.rc.freshness if self.rc.is_ready(observed) else min(PENDING_FRESHNESS, self.rc.freshness)

    def _within(self) -> list[Observed]:
        """Fresh observations of the kind whose describe also returns this kind's resources."""
        if self._observations is None or self.rc.reads_within is None:
            return []
        return [o for o in self._observations.fresh(self.rc.reads_within) if isinstance(o, Observed)]

    def _describe_many(self, resource_ids: list[str]) -> dict[str, Observed]:
        within = self._within()
        return self.rc.describe_many(resource_ids, within) if within else self.rc.describe_many(resource_ids)

    # -- reads --------------------------------------------------------------------------------------------
    def describe(self, resource_id: str) -> Observed | None:
        """The resource ``resource_id`` as AWS holds it: prefetched in this pass, else a fresh shared
        observation, else one refresh that describes every due resource of the kind at once (every
        cluster's), else — for an id that refresh did not return — a describe of it alone."""
        prefetched = self._pass.prefetched.pop((self.kind, resource_id), None)
        if prefetched is not None:
            return prefetched
        observations = self._observations
        if observations is None:
            return self.rc.describe_by_id(resource_id)
        hit = observations.get(self.kind, resource_id)
        if hit is MISS:
            with observations.refreshing(self.kind):
                hit = observations.get(self.kind, resource_id)
                if hit is MISS:
                    self._refresh(observations, [resource_id])
                    hit = observations.get(self.kind, resource_id)
        if isinstance(hit, Observed):
            return hit
        observed = self.rc.describe_by_id(resource_id)
        if observed is not None:
            observations.put(self.kind, observed.id, observed, self._ttl(observed))
        return observed

    def _refresh(self, observations: Observations, ids: Iterable[str]) -> None:
        wanted = sorted(set(observations.stale(self.kind)) | set(ids))
        found = self._describe_many(wanted)
        for resource_id in wanted:
            observed = found.get(resource_id)
            if observed is None:
                observations.forget(self.kind, resource_id)
            else:
                observations.put(self.kind, resource_id, observed, self._ttl(observed))

    def prefetch(self, recorded_ids: list[str], unrecorded: int, cluster: str, by_tags: bool) -> None:
        """Describe the recorded resources of several roles in one batch, for the describes that follow;
        and, when ``unrecorded`` roles (at least two) will be looked up ``by_tags``, list the cluster's
        resources of the kind once for them.

        Repeated Describe calls are a reconciler's main AWS cost; a batch turns N of them into one. An id
        the batch does not return is simply not prefetched, and its describe asks for it alone.
        """
        observations = self._observations
        if observations is not None:
            # The shared observations batch across roles and clusters, and list by tags only when needed.
            due = [i for i in recorded_ids if observations.get(self.kind, i) is MISS]
            if due:
                with observations.refreshing(self.kind):
                    # Decided again under the lock: a reconcile that waited here while another refreshed
                    # the kind finds its ids fresh now, and describes nothing.
                    due = [i for i in due if observations.get(self.kind, i) is MISS]
                    if due:
                        self._refresh(observations, due)
            return
        if len(recorded_ids) >= 2:
            for resource_id, observed in self.rc.describe_many(recorded_ids).items():
                self._pass.prefetched[(self.kind, resource_id)] = observed
        if unrecorded >= 2 and by_tags and self.kind not in self._pass.tagged:
            self._pass.tagged[self.kind] = self.rc.describe_by_tags({cluster_tag_key(cluster): OWNED}, None)

    def tagged(self, cluster: str, desired: D) -> list[Observed]:
        """Every resource of the kind carrying ``cluster``'s owned tag, where ``desired`` would be."""
        # Listed by the owned tag alone: the caller matches the role (one call finds resources made
        # before ``capa-py.io/role`` existed, role in CAPA's key, as well).
        observations = self._observations
        parent = self.rc.parent_of(desired)
        owned = {cluster_tag_key(cluster): OWNED}
        inside = self._made_in(desired)
        if observations is not None and observations.born_here(inside):
            assert inside is not None
            return [o for _, o in observations.children(inside, self.kind)]
        if self.kind in self._pass.tagged:
            return self._pass.tagged[self.kind]
        if observations is not None:
            return observations.fact(
                _listing_key(cluster, self.kind, parent),
                self.rc.freshness,
                lambda: self.rc.describe_by_tags(owned, desired),
            )
        return self.rc.describe_by_tags(owned, desired)

    def _made_in(self, desired: D) -> str | None:
        """Where what this process makes of ``desired``'s kind is noted: its parent, or the resource it is
        only ever made after."""
        parent = self.rc.parent_of(desired)
        return parent if parent is not None else self.rc.made_after(desired)

    def by_key(self, desired: D) -> Observed | None:
        """The resource holding the natural key of ``desired``."""
        observations = self._observations
        parent = self.rc.parent_of(desired)
        if observations is not None and observations.born_here(parent):
            assert parent is not None
            key = self.rc.key_of(desired)
            return next((o for k, o in observations.children(parent, self.kind) if k == key), None)
        return self.rc.describe_by_key(desired)

    def creates_first(self, desired: D) -> bool:
        """Whether the engine may create ``desired`` before looking its key up (the lookup is then made
        only when the create is refused): a class whose create always refuses a taken key, or one whose
        create is safe inside a parent this process has just created."""
        if self.rc.create_refuses_taken_key:
            return True
        inside = self.rc.creates_first_in(desired)
        return self._observations is not None and self._observations.born_here(inside)

    # -- what the caller learnt or changed ----------------------------------------------------------------
    def learn(self, observed: Observed) -> None:
        """Share what the caller just described itself (a wait step's poll) as a fresh observation."""
        if self._observations is not None:
            self._observations.put(self.kind, observed.id, observed, self._ttl(observed))

    def learn_state(self, observed: Observed) -> None:
        """Share a poll that read the resource's state but not its tags (a load balancer provisioning),
        with the tags last seen of it; nothing is shared when none were seen (an observation without
        its tags would have the update flow tag it again)."""
        if self._observations is None:
            return
        seen = self._observations.last_seen(self.kind, observed.id)
        if isinstance(seen, Observed):
            observed.tags = dict(seen.tags)
            self.learn(observed)

    def remember(self, observed: Observed) -> Observed:
        """Keep what the caller changed in ``observed`` (not when it was seen)."""
        if self._observations is not None:
            self._observations.amend(self.kind, observed.id, observed, self._ttl(observed))
        return observed

    def update(self, observed: Observed, desired: D) -> bool:
        """Bring mutable attributes to ``desired``; an update the class does not write into ``observed``
        makes it stale (described again next time)."""
        changed = self.rc.update(observed, desired)
        if changed and not self.rc.tracks_updates:
            observed.stale = True
        return changed

    # -- writes -------------------------------------------------------------------------------------------
    def create(self, desired: D, tags: dict[str, str] | None, token: str | None, cluster: str) -> Observed:
        """Create the resource, noting it: inside its parent nothing else can exist yet, and the
        cluster's listing by tags made before it must now show it."""
        observations = self._observations
        try:
            observed = self.rc.create(desired, tags, token)
        except Exception:
            if observations is not None:
                # The create may have happened all the same (a lost response): what this process knows is
                # no longer the whole truth, so the next lookup asks AWS.
                observations.doubt(self._made_in(desired))
                observations.doubt(self.rc.creates_first_in(desired))
                observations.forget_facts(("tagged", cluster, self.kind))
            raise
        if observations is not None:
            # A failed record must find it in the listing, not create another.
            observations.born(observed.id)
            parent = self.rc.parent_of(desired)
            inside = self._made_in(desired)
            if inside is not None:
                observations.add_child(inside, self.kind, observed.id, self.rc.key_of(desired), observed)
            observations.extend_fact(_listing_key(cluster, self.kind, parent), observed)
            observations.put(self.kind, observed.id, observed, self._ttl(observed))
        return observed

    def delete(self, resource_id: str, cluster: str | None = None) -> None:
        """Start deleting the resource (NotFound is raised as the class raises it) and forget it."""
        self.rc.delete(resource_id)
        self.deleted(resource_id, cluster)

    def deleted(self, resource_id: str, cluster: str | None = None) -> None:
        """Drop what is known of a resource being deleted (and the cluster's listings of its kind)."""
        observations = self._observations
        if observations is None:
            return
        observations.forget(self.kind, resource_id)
        if cluster is not None:
            observations.forget_facts(("tagged", cluster, self.kind))


__all__ = ["PENDING_FRESHNESS", "PassReads", "ReadThrough"]
