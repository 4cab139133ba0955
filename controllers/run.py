"""Running the controllers in-process until a set of objects converges (``capa apply``/``delete --wait``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import CallCounter, call_scope
from capa_py.runtime.manager import Controller, Manager, key_of
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore
from controllers.blocking import Blocked, find_blocked

BLOCKED_CHECK_INTERVAL = 0.5
Readiness = Literal["ready", "failed", "pending", "gone"]


def readiness(obj: KubeObject | None) -> Readiness:
    """Whether an object is ready, failed or still pending, by its kind's status conventions."""
    if obj is None:
        return "gone"
    status = getattr(obj, "status", None)
    if status is None:
        return "ready"
    phase = getattr(status, "phase", None)
    # A failure is final only where it is the object's own and current: Cluster and Machine mirror their
    # infrastructure's (which is judged on its own), and an infrastructure failure recorded for an older
    # generation is being retried with the new spec.
    own_failure = obj.KIND not in ("Cluster", "Machine")
    observed = getattr(status, "observed_generation", None)
    current = observed is None or obj.metadata.generation is None or observed >= obj.metadata.generation
    if own_failure and current and (getattr(status, "failure_reason", None) or phase == "Failed"):
        return "failed"
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
    manager = Manager(store, controllers, workers=workers)
    started = time.monotonic()
    last: list[KubeObject | None] = []
    blocked: dict[str, Blocked] = {}
    checked_at = 0.0

    keys = [key_of(t) for t in targets]

    def done() -> bool:
        # A status says what the last reconcile saw, maybe in another process long ago: an object counts
        # only once this run has reconciled it, and "ready" only when none of them has work left queued.
        nonlocal last
        last = _refresh(store, targets)
        states = [readiness(o) for o in last]
        if goal == "gone":
            if all(s == "gone" for s in states):
                return True
        else:
            seen = [key in manager.reconciled_keys for key in keys]
            if any(s == "failed" and fresh for s, fresh in zip(states, seen, strict=True)):
                return True
            deleting = any(o is not None and o.being_deleted for o in last)
            settled = not deleting and not manager.has_work(keys)
            if all(s == "ready" for s in states) and all(seen) and settled:
                return True
        return _all_blocked()

    def _all_blocked() -> bool:
        # Reading what the targets wait on costs store reads: once per BLOCKED_CHECK_INTERVAL is enough.
        nonlocal blocked, checked_at
        if time.monotonic() - checked_at < BLOCKED_CHECK_INTERVAL:
            return False
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
            on_tick(last)

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
        blocked={} if converged else blocked,
    )
