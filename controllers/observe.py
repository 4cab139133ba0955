"""Waiting for objects whose controllers run elsewhere: ``capa apply --wait`` and ``capa delete --wait``
against a Kubernetes API server, where ``capa controller`` does the work.

The targets' kinds are watched (a watch event only wakes the wait up; the targets are then read again),
with a re-read every few seconds in case a watch fails, until every target is ready (or gone), one has
failed, or time runs out. "Ready" counts only once the status describes the current generation: a status
written for an older spec says nothing about the new one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal

from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import CallCounter
from capa_py.logging import get_logger
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore
from controllers.run import ConvergeResult, Readiness, _refresh, readiness

RESYNC_SECONDS = 5.0

_log = get_logger("controllers.observe")


def observed_readiness(obj: KubeObject | None) -> Readiness:
    """:func:`~controllers.run.readiness`, with "ready" held back while the status is older than the spec."""
    state = readiness(obj)
    if state != "ready" or obj is None:
        return state
    observed = getattr(getattr(obj, "status", None), "observed_generation", None)
    generation = obj.metadata.generation
    if observed is not None and generation is not None and observed < generation:
        return "pending"
    return state


def _follow(
    store: ObjectStore, kind: type[KubeObject], changed: threading.Event, stop: threading.Event
) -> None:
    """Set ``changed`` on every event of ``kind`` until ``stop`` (a failed watch starts again)."""
    while not stop.is_set():
        try:
            for _ in store.watch(kind, stop=stop):
                changed.set()
        except StoreError as exc:
            _log.info("watch ended; starting again", kind=kind.KIND, error=str(exc))
            changed.set()
            stop.wait(1.0)


def _converged(goal: str, states: list[Readiness], last: list[KubeObject | None]) -> bool:
    if goal == "gone":
        return all(s == "gone" for s in states)
    # An object being deleted is not done with "ready", whatever its status still says.
    return all(s == "ready" for s in states) and not any(o is not None and o.being_deleted for o in last)


def observe(
    store: ObjectStore,
    targets: Sequence[KubeObject],
    goal: Literal["ready", "gone"] = "ready",
    timeout: float = 1800.0,
    on_tick: Callable[[list[KubeObject | None]], None] | None = None,
) -> ConvergeResult:
    """Wait until every target reaches ``goal`` (or one has failed, or ``timeout`` passes) while other
    processes reconcile them; the result has no AWS calls (they were made elsewhere)."""
    started = time.monotonic()
    deadline = started + timeout
    changed, stop = threading.Event(), threading.Event()
    watchers = [
        threading.Thread(target=_follow, args=(store, kind, changed, stop), daemon=True, name="capa-observe")
        for kind in {type(t) for t in targets}
    ]
    for watcher in watchers:
        watcher.start()
    finished = False
    try:
        while True:
            changed.clear()
            last = _refresh(store, targets)
            states = [observed_readiness(o) for o in last]
            if on_tick is not None:
                on_tick(last)
            finished = _converged(goal, states, last) or (goal == "ready" and "failed" in states)
            remaining = deadline - time.monotonic()
            if finished or remaining <= 0:
                break
            changed.wait(min(RESYNC_SECONDS, remaining))
    finally:
        stop.set()
        for watcher in watchers:
            watcher.join(5.0)
    states_by_ref = {t.ref(): s for t, s in zip(targets, states, strict=True)}
    converged = _converged(goal, states, last)
    return ConvergeResult(
        converged=converged,
        timed_out=not finished,
        states=states_by_ref,
        objects=[o for o in last if o is not None],
        calls=CallCounter(),
        elapsed=time.monotonic() - started,
    )
