"""What this process already knows about AWS, and since when: the shared observation behind every reconcile.

Repeated Describe calls are a reconciler's main AWS cost, and they grow as clusters times resources when
every pass of every cluster asks again. An :class:`Observations` (one per region, on
:class:`~capa_py.aws.session.AWSClients`, so every controller of the process shares it) keeps:

* **observations** by (kind, id), each stamped with when it was made and how long it may be served (a kind's
  freshness bound; much shorter while the resource is still pending). A miss is refreshed by the caller for
  *every* known id of that kind that is due (see :meth:`stale`), so one Describe serves every cluster. An id
  a refresh did not return is forgotten: whoever needs it asks AWS directly before acting on its absence.
* **births**: resources this process created, with their children by (parent, kind, key). Nothing can exist
  inside a VPC, subnet, route table or load balancer this process made moments ago except what this process
  put there, so "is there already one?" is answered from memory instead of by a Describe.
* **facts** (:meth:`fact`): values that change rarely or never — an AMI's root device, the region's zones, a
  VPC's DNS attributes after we set them — each with its own bound.

Nothing is remembered when the cache is disabled (``AWSSettings.observe`` False, the default for library
use): every read misses, every write is dropped, and callers fall back to asking AWS each time.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

T = TypeVar("T")


class _Miss:
    def __repr__(self) -> str:
        return "MISS"


MISS: Final = _Miss()
"""Nothing fresh enough is known."""

BORN_WINDOW = 900.0
"""How long a resource this process created counts as born here: long enough for a cluster's whole create,
short enough that knowledge never outlives the lease that made it true."""


@dataclass
class _Entry:
    value: Any
    at: float
    ttl: float = float("inf")

    def fresh(self, now: float) -> bool:
        return now - self.at <= self.ttl


class Observations:
    """Freshness-bounded observations, births and facts for one region (thread-safe)."""

    def __init__(self, enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.clock = clock
        self._lock = threading.RLock()
        self._entries: dict[str, dict[str, _Entry]] = {}
        self._born: dict[str, float] = {}
        self._children: dict[tuple[str, str], dict[str, _Entry]] = {}
        self._facts: dict[Hashable, _Entry] = {}
        self._refreshing: dict[Hashable, threading.Lock] = {}

    # -- observations ---------------------------------------------------------------------------------
    def get(self, kind: str, resource_id: str) -> Any:
        """A copy of the observation of ``resource_id`` while it is fresh, else :data:`MISS`."""
        if not self.enabled:
            return MISS
        with self._lock:
            entry = self._entries.get(kind, {}).get(resource_id)
            if entry is None or not entry.fresh(self.clock()):
                return MISS
            return copy.deepcopy(entry.value)

    def last_seen(self, kind: str, resource_id: str) -> Any:
        """A copy of the last observation of ``resource_id``, fresh or not, else :data:`MISS`."""
        if not self.enabled:
            return MISS
        with self._lock:
            entry = self._entries.get(kind, {}).get(resource_id)
            return MISS if entry is None else copy.deepcopy(entry.value)

    def put(self, kind: str, resource_id: str, value: Any, ttl: float) -> None:
        """Remember ``value`` as seen now, to be served for ``ttl`` seconds (0 or less: known, not served)."""
        if not self.enabled:
            return
        stored = copy.deepcopy(value)
        with self._lock:
            self._entries.setdefault(kind, {})[resource_id] = _Entry(stored, self.clock(), ttl)

    def fresh(self, kind: str) -> list[Any]:
        """Copies of every fresh observation of ``kind``."""
        if not self.enabled:
            return []
        with self._lock:
            now = self.clock()
            entries = [e.value for e in self._entries.get(kind, {}).values() if e.fresh(now)]
        return copy.deepcopy(entries)

    def amend(self, kind: str, resource_id: str, value: Any, ttl: float) -> None:
        """Replace what is known of ``resource_id`` with what the caller changed in it, keeping the time it
        was last seen (a change made by this process does not make the rest of it any fresher)."""
        if not self.enabled:
            return
        stored = copy.deepcopy(value)
        with self._lock:
            kind_entries = self._entries.setdefault(kind, {})
            entry = kind_entries.get(resource_id)
            kind_entries[resource_id] = _Entry(stored, entry.at if entry else self.clock(), ttl)

    def invalidate(self, kind: str, resource_id: str) -> None:
        """Keep the id known (the next refresh of the kind includes it) but never serve what was seen."""
        with self._lock:
            entry = self._entries.get(kind, {}).get(resource_id)
            if entry is not None:
                entry.ttl = float("-inf")

    def forget(self, kind: str, resource_id: str) -> None:
        """Drop the id altogether (deleted by us: nothing to refresh any more)."""
        with self._lock:
            self._entries.get(kind, {}).pop(resource_id, None)
            self._born.pop(resource_id, None)
            for children in self._children.values():
                children.pop(resource_id, None)

    def stale(self, kind: str) -> list[str]:
        """Every known id of ``kind`` past half its freshness: what a refresh of the kind covers. Renewing
        the half-stale along with the stale keeps a kind's observations expiring together, so the
        reconciles of one resync find them all due at once, or all fresh, never some of each."""
        if not self.enabled:
            return []
        with self._lock:
            now = self.clock()
            return sorted(i for i, e in self._entries.get(kind, {}).items() if now - e.at > e.ttl / 2)

    @contextmanager
    def refreshing(self, kind: str) -> Iterator[None]:
        """One refresh of a kind at a time: a second reconcile wanting the same kind waits, then finds it
        fresh instead of asking again."""
        with self._lock:
            lock = self._refreshing.setdefault(kind, threading.Lock())
        with lock:
            yield

    # -- births ---------------------------------------------------------------------------------------
    def born(self, resource_id: str) -> None:
        """``resource_id`` was just created by this process."""
        if not self.enabled:
            return
        with self._lock:
            self._born[resource_id] = self.clock()

    def born_here(self, resource_id: str | None) -> bool:
        """Whether ``resource_id`` was created by this process within :data:`BORN_WINDOW`."""
        if not self.enabled or resource_id is None:
            return False
        with self._lock:
            at = self._born.get(resource_id)
            return at is not None and self.clock() - at <= BORN_WINDOW

    def doubt(self, resource_id: str | None) -> None:
        """Stop treating ``resource_id`` as born here: something may now exist inside it that this process
        did not see created (a create whose answer was lost)."""
        if resource_id is None:
            return
        with self._lock:
            self._born.pop(resource_id, None)

    def add_child(self, parent_id: str, kind: str, resource_id: str, key: str, value: Any) -> None:
        """Record that this process made ``resource_id`` (natural key ``key``) inside ``parent_id``."""
        if not self.enabled:
            return
        with self._lock:
            self._children.setdefault((parent_id, kind), {})[resource_id] = _Entry(
                (key, copy.deepcopy(value)), self.clock()
            )

    def children(self, parent_id: str, kind: str) -> list[tuple[str, Any]]:
        """(key, observation copy) of every ``kind`` this process made inside ``parent_id``."""
        with self._lock:
            entries = list(self._children.get((parent_id, kind), {}).values())
        return [(key, copy.deepcopy(value)) for key, value in (e.value for e in entries)]

    # -- facts ----------------------------------------------------------------------------------------
    def fact(self, key: Hashable, max_age: float, compute: Callable[[], T]) -> T:
        """The remembered value of ``key`` when younger than ``max_age``; else ``compute()``, remembered."""
        if not self.enabled:
            return compute()
        with self._lock:
            lock = self._refreshing.setdefault(("fact", key), threading.Lock())
        with lock:  # one computation per key at a time: a concurrent reader waits for it
            with self._lock:
                entry = self._facts.get(key)
                if entry is not None and self.clock() - entry.at <= max_age:
                    return copy.deepcopy(entry.value)  # type: ignore[no-any-return]
            value = compute()
            self.learn_fact(key, value)
            return value

    def known_fact(self, key: Hashable, max_age: float) -> Any:
        """The remembered value of ``key`` when younger than ``max_age``, else :data:`MISS` (nothing is
        computed)."""
        if not self.enabled:
            return MISS
        with self._lock:
            entry = self._facts.get(key)
            if entry is None or self.clock() - entry.at > max_age:
                return MISS
            return copy.deepcopy(entry.value)

    def learn_fact(self, key: Hashable, value: Any) -> None:
        """Remember a fact known without asking (what we just set, or a documented default)."""
        if not self.enabled:
            return
        with self._lock:
            self._facts[key] = _Entry(copy.deepcopy(value), self.clock())

    def forget_fact(self, key: Hashable) -> None:
        with self._lock:
            self._facts.pop(key, None)

    def forget_facts(self, prefix: tuple[Hashable, ...]) -> None:
        """Drop every fact whose key is a tuple starting with ``prefix``."""
        with self._lock:
            for key in [k for k in self._facts if isinstance(k, tuple) and k[: len(prefix)] == prefix]:
                del self._facts[key]

    def extend_fact(self, key: Hashable, item: Any) -> None:
        """Append ``item`` to the remembered list ``key``, if one is remembered (what we just created,
        added to a listing made before it existed)."""
        with self._lock:
            entry = self._facts.get(key)
            if entry is not None and isinstance(entry.value, list):
                entry.value.append(copy.deepcopy(item))


__all__ = ["BORN_WINDOW", "MISS", "Observations"]
