"""Running the controllers in-process until a set of objects converges (``capa apply``/``delete --wait``).

Only the targets and their relatives are reconciled (:mod:`controllers.scope`): other objects in the store
cost no reconcile and no AWS call. Whether the targets are done is decided from what the manager hears —
the objects its watch delivers and the reconciles it finishes — not by reading every target again on every
tick: a check runs when something in scope changed, plus a slow safety re-check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import CallCounter, call_scope
from capa_py.runtime.manager import Controller, Manager, key_of
from capa_py.runtime.queue import ObjectKey
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore, WatchEvent
from controllers.blocking import Blocked, find_blocked
from controllers.scope import reconcile_scope

BLOCKED_CHECK_INTERVAL = 0.5
RECHECK_INTERVAL = 2.0
"""Seconds between checks of the targets when nothing was heard of them (a safety net: events drive it)."""
Readiness = Literal["ready", "failed", "pending", "gone"]


def readiness(obj: KubeObject | None) -> Readiness:
    """Whether an object is ready, failed or still pending, by its kind's status conventions."""
    if obj is None:
        return "gone"
    status = getattr(obj, "status", None)
    if status is None:
        return "ready"
    phase = getattr(status, "phase", None)
    # A failure is final only where it is the object's own and current: Cluster, Machine and MachinePool
    # mirror their infrastructure's (which is judged on its own), and an infrastructure failure recorded
    # for an older generation is being retried with the new spec.
    own_failure = obj.KIND not in ("Cluster", "Machine", "MachinePool")
    observed = getattr(status, "observed_generation", None)
    current = observed is None or obj.metadata.generation is None or observed >= obj.metadata.generation
    if own_failure and current and (obj.failure() is not None or phase == "Failed"):
        return "failed"
    settled = obj.settled()
    if settled is not None:
        return "ready" if settled and current else "pending"
    if obj.KIND == "Cluster":
        return "ready" if phase == "Provisioned" else "pending"
    if obj.KIND == "Machine":
        return "ready" if phase in ("Provisioned", "Running") else "pending"
    if hasattr(status, "ready"):
        return "ready" if status.ready else "pending"
    return "ready"


@dataclass
class ConvergeResult:
    converged: bool
    timed_out: bool
    states: dict[str, Readiness]
    objects: list[KubeObject]
    calls: CallCounter
    elapsed: float
    reconciles: dict[str, int] = field(default_factory=dict)
    reconciled_keys: frozenset[ObjectKey] = frozenset()
    """Every object reconciled during the wait."""
    scope: frozenset[ObjectKey] = frozenset()
    """The objects the wait was allowed to reconcile: the targets and their relatives."""
    blocked: dict[str, Blocked] = field(default_factory=dict)
    """Why each target not done cannot get there by itself, when that ended the wait (else empty)."""

    @property
    def failed(self) -> list[str]:
        return [ref for ref, state in self.states.items() if state == "failed"]


def _refresh(store: ObjectStore, targets: Sequence[KubeObject]) -> list[KubeObject | None]:
    current: list[KubeObject | None] = []
    for obj in targets:
        try:
            current.append(store.get(type(obj), obj.metadata.name, obj.metadata.namespace))
        except NotFound:
            current.append(None)
    return current


class TargetWatch:
    """Each target's latest state as the manager listed or dispatched it, and whether anything in scope
    changed since the last look (an event, or a finished reconcile: ``has_work`` and error streaks move
    with those)."""

    def __init__(self, targets: Sequence[KubeObject], watched_kinds: set[str]) -> None:
        self.targets = list(targets)
        self.watched_kinds = watched_kinds
        self._slots: dict[ObjectKey, list[int]] = {}
        for i, target in enumerate(self.targets):
            self._slots.setdefault(key_of(target), []).append(i)
        self._current: list[KubeObject | None] = [None] * len(self.targets)
        self._changed = threading.Event()

    def _set(self, key: ObjectKey, obj: KubeObject | None) -> None:
        for i in self._slots.get(key, ()):
            self._current[i] = obj

    def listed(self, kind: str, objects: Sequence[KubeObject]) -> None:
        if kind not in {key.kind for key in self._slots}:
            return
        found = {key_of(o): o for o in objects}
        for key in self._slots:
            if key.kind == kind:
                self._set(key, found.get(key))
        self._changed.set()

    def dispatched(self, event: WatchEvent[KubeObject]) -> None:
        self._set(key_of(event.object), None if event.type == "DELETED" else event.object)
        self._changed.set()

    def reconciled(self, key: ObjectKey) -> None:
        self._changed.set()

    def take_changed(self) -> bool:
        """Whether anything changed since the last call (and start afresh). A change flagged between the
        two lines is not lost: it happened before the look at the targets that follows."""
        changed = self._changed.is_set()
        self._changed.clear()
        return changed

    def refresh_unwatched(self, store: ObjectStore) -> None:
        """Read the targets no controller watches (the manager hears nothing of them)."""
        unwatched = [i for i, t in enumerate(self.targets) if t.KIND not in self.watched_kinds]
        for i, obj in zip(unwatched, _refresh(store, [self.targets[i] for i in unwatched]), strict=True):
            self._current[i] = obj

    def current(self) -> list[KubeObject | None]:
        return list(self._current)


def converge(
    store: ObjectStore,
    controllers: Sequence[Controller],
    targets: Sequence[KubeObject],
    goal: Literal["ready", "gone"] = "ready",
    timeout: float = 1800.0,
    on_tick: Callable[[list[KubeObject | None]], None] | None = None,
    workers: int = 4,
) -> ConvergeResult:
    """Run the controllers until every target is ready (or gone), one has failed, every target not yet
    there is blocked on something that cannot change by itself (:mod:`controllers.blocking`), or time
    runs out."""
    started = time.monotonic()
    scope = reconcile_scope(store, targets, goal)
    watched = {k.KIND for c in controllers for k in (c.kind, *c.watched_kinds)}
    watch = TargetWatch(targets, watched)
    manager = Manager(store, controllers, workers=workers, scope=scope.__contains__, listener=watch)
    last: list[KubeObject | None] = watch.current()
    blocked: dict[str, Blocked] = {}
    checked_at = 0.0
    recheck_at = 0.0
    blocked_due = False

    keys = [key_of(t) for t in targets]

    def done() -> bool:
        # Only when something in scope changed (or the safety re-check is due): the targets' states come
        # from the watch, so an unchanged target is neither read nor parsed again.
        nonlocal last, recheck_at, blocked_due
        changed = watch.take_changed()
        if time.monotonic() >= recheck_at:
            recheck_at = time.monotonic() + RECHECK_INTERVAL
            watch.refresh_unwatched(store)
            changed = True
        if not changed:
            return _all_blocked()
        blocked_due = True
        last = watch.current()
        if _finished():
            return True
        return _all_blocked()

    def _finished() -> bool:
        # A status says what the last reconcile saw, maybe in another process long ago: an object counts
        # only once this run has reconciled it, and "ready" only when none of them has work left queued.
        states = [readiness(o) for o in last]
        if goal == "gone":
            if all(s == "gone" for s in states):
                return True
        else:
            # A kind no controller reconciles (a Template, a Hardware) is settled once stored.
            seen = [key in manager.reconciled_keys or key.kind not in manager.controllers for key in keys]
            if any(s == "failed" and fresh for s, fresh in zip(states, seen, strict=True)):
                return True
            deleting = any(o is not None and o.being_deleted for o in last)
            settled = not deleting and not manager.has_work(keys)
            if all(s == "ready" for s in states) and all(seen) and settled:
                return True
        return False

    def _all_blocked() -> bool:
        # Reading what the targets wait on costs store reads: only after a change, and at most once per
        # BLOCKED_CHECK_INTERVAL.
        nonlocal blocked, checked_at, blocked_due
        if not blocked_due or time.monotonic() - checked_at < BLOCKED_CHECK_INTERVAL:
            return False
        blocked_due = False
        checked_at = time.monotonic()
        # An object being deleted is not done with "ready", whatever its status still says.
        remaining = [
            t.ref()
            for t, o in zip(targets, last, strict=True)
            if readiness(o) != goal or (goal == "ready" and o is not None and o.being_deleted)
        ]
        found = find_blocked(store, manager, targets, last, goal)
        if remaining and all(ref in found for ref in remaining):
            blocked = {ref: found[ref] for ref in remaining}
            return True
        return False

    def tick() -> None:
        if on_tick is not None:
            on_tick(watch.current())

    with call_scope() as calls:
        finished = manager.run(until=done, timeout=timeout, on_tick=tick)
    last = _refresh(store, targets)
    states = {obj.ref(): readiness(cur) for obj, cur in zip(targets, last, strict=True)}
    if goal == "gone":
        converged = all(s == "gone" for s in states.values())
    else:
        converged = all(s == "ready" for s in states.values()) and not any(
            o is not None and o.being_deleted for o in last
        )
    return ConvergeResult(
        converged=converged,
        timed_out=not finished,
        states=states,
        objects=[o for o in last if o is not None],
        calls=calls,
        elapsed=time.monotonic() - started,
        reconciles=dict(manager.reconciles),
        reconciled_keys=frozenset(manager.reconciled_keys),
        scope=scope,
        blocked={} if converged else blocked,
    )
