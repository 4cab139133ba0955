"""The controller manager: watches the store, queues keys, runs reconciles on worker threads.

Each controller names the kind it reconciles and, through ``map_event``, which of its objects an event on
another kind concerns (an AWSCluster becoming ready wakes its AWSMachines). Results drive the queue as in
controller-runtime: an error or ``requeue`` backs off exponentially per key, ``requeue_after`` schedules
the key, and a clean result waits for the next event. What a controller provides, and what the manager
tells its observers and listeners, is in :mod:`capa_py.runtime.controller`.

A manager may be given a *scope* (``capa apply`` reconciles only what it was given and what that depends
on): objects outside it are neither queued nor mapped, their events cost nothing but being read. A
*listener* hears what the manager saw (every listed object, every in-scope event) and every reconcile it
finished, so a caller waiting on some objects learns of their changes without reading them again.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence

from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import CallCounter, call_scope
from capa_py.aws.deadline import DeadlinePassed
from capa_py.aws.deadline import current as current_deadline
from capa_py.ctrlkit.result import Result
from capa_py.logging import get_logger
from capa_py.runtime.context import current_controller
from capa_py.runtime.controller import (
    Controller,
    ManagerListener,
    ReconcileObserver,
    Scope,
    desired_fingerprint,
    key_of,
    result_label,
)
from capa_py.runtime.queue import ObjectKey, QueueRouter, WorkQueue
from capa_py.store.errors import Conflict, Expired, NotFound, ObjectRef
from capa_py.store.protocol import ObjectStore, WatchEvent, change_sequence_of, change_signal_of

_log = get_logger("runtime")

IDLE_WAIT_SECONDS = 1.0
"""How long :meth:`Manager.run` waits for a change of a store that signals them before looking anyway."""
TICK_SECONDS = 0.1
"""The longest wait between two ``on_tick`` calls of :meth:`Manager.run` (a progress view, or a condition
on the work queue rather than on the store)."""


def _is_about(exc: NotFound, key: ObjectKey) -> bool:
    """Whether ``exc`` says the object of ``key`` itself is missing (whatever its message reads)."""
    return exc.about == ObjectRef(key.kind, key.namespace, key.name)


class Manager:
    def __init__(
        self,
        store: ObjectStore,
        controllers: Sequence[Controller],
        workers: int = 4,
        base_backoff: float = 0.5,
        max_backoff: float = 300.0,
        poll_interval: float = 0.05,
        queue: WorkQueue | QueueRouter | None = None,
        observer: ReconcileObserver | None = None,
        scope: Scope | None = None,
        listener: ManagerListener | None = None,
    ) -> None:
        self.store = store
        self.scope = scope
        self.listener = listener
        self.controllers = {c.kind.KIND: c for c in controllers}
        self.queue: WorkQueue | QueueRouter = (
            queue if queue is not None else WorkQueue(base_backoff, max_backoff)
        )
        self.observer = observer
        self._dispatch_lock = threading.RLock()
        self.workers = workers
        self.poll_interval = poll_interval
        self.reconciles: Counter[str] = Counter()
        self.calls_by_controller: dict[str, CallCounter] = {}
        self.reconciled_keys: set[ObjectKey] = set()
        """Every key reconciled at least once by this manager (its statuses are this run's)."""
        """AWS calls per controller, summed over its reconciles (for metrics and benchmarks)."""
        self.errors: deque[tuple[ObjectKey, str]] = deque(maxlen=1000)
        """The latest errors (bounded: a long-running process keeps only the last thousand)."""
        self.error_streaks: dict[ObjectKey, tuple[int, BaseException]] = {}
        """Per key: reconciles in a row that ended in an error, and the last error (a clean one clears it)."""
        self._versions: dict[str, str] = {}
        self._kinds: dict[str, type[KubeObject]] = {}
        for controller in controllers:
            for kind in (controller.kind, *controller.watched_kinds):
                self._kinds[kind.KIND] = kind
        self._seen: dict[ObjectKey, str] = {}
        self._settled: dict[ObjectKey, int] = {}
        self._views: dict[tuple[str, ObjectKey], object] = {}
        # A store telling its latest resourceVersion cheaply (the embedded SQLite store: one row) makes
        # an idle poll one read instead of a watch read per kind.
        self._head = change_sequence_of(store)
        self._polled_head: str | None = None

    def in_scope(self, key: ObjectKey) -> bool:
        return self.scope is None or self.scope(key)

    # -- events -------------------------------------------------------------------------------------
    def prime(self) -> None:
        """List every watched kind: queue every object in scope of a controlled kind, remember where to
        watch from."""
        for kind_name, kind in self._kinds.items():
            listed = self.store.list(kind)
            self._versions[kind_name] = listed.resource_version
            for obj in listed:
                key = key_of(obj)
                if not self.in_scope(key):
                    continue
                self._seen[key] = desired_fingerprint(obj)
                if kind_name in self.controllers:
                    self.queue.add(key)
            if self.listener is not None:
                self.listener.listed(kind_name, listed)

    def poll_changes(self) -> int:
        """Dispatch what changed since the last poll; with a store that tells its latest resourceVersion
        cheaply, nothing is read per kind while that stays the same."""
        if self._head is not None:
            head = self._head()
            if head == self._polled_head:
                return 0
            seen = self.poll_events()
            # Read before the poll: a write landing during it is seen again next time, never lost.
            self._polled_head = head
            return seen
        return self.poll_events()

    def poll_events(self) -> int:
        seen = 0
        for kind_name, kind in self._kinds.items():
            try:
                events = list(self.store.watch(kind, resource_version=self._versions[kind_name], timeout=0))
            except Expired:
                self.prime()
                return seen
            for event in events:
                seen += 1
                self._versions[kind_name] = event.resource_version
                self.dispatch(event)
        return seen

    def dispatch(self, event: WatchEvent[KubeObject]) -> None:
        # Informers call this from a thread per kind: one event at a time keeps the bookkeeping whole.
        with self._dispatch_lock:
            self._dispatch(event)

    def _dispatch(self, event: WatchEvent[KubeObject]) -> None:
        key = key_of(event.object)
        if not self.in_scope(key):
            return
        if self.listener is not None:
            self.listener.dispatched(event)
        fingerprint = desired_fingerprint(event.object)
        status_only = event.type == "MODIFIED" and self._seen.get(key) == fingerprint
        if event.type == "DELETED":
            # Forget what was kept per object, so a long-running manager does not grow with every
            # object it ever saw.
            self._seen.pop(key, None)
            self._settled.pop(key, None)
            self.error_streaks.pop(key, None)
        else:
            self._seen[key] = fingerprint
        if event.object.KIND in self.controllers:
            # Like controller-runtime's generation predicate: a controller's own status writes do not
            # wake it again (it asks for a requeue when it needs one); anything else does. Writes made
            # up to the state a reconcile reported it ended with are its own, and are settled too.
            own_write = int(event.resource_version) <= self._settled.get(key, -1)
            if not (status_only or own_write):
                self.queue.add(key)
        for controller in self.controllers.values():
            if status_only and event.object.KIND not in {
                k.KIND for k in getattr(controller, "status_kinds", ())
            }:
                continue
            if not self._view_changed(controller, event):
                continue
            for mapped in controller.map_event(event):
                if self.in_scope(mapped):
                    self.queue.add(mapped)

    def _view_changed(self, controller: Controller, event: WatchEvent[KubeObject]) -> bool:
        view_of = getattr(controller, "views", {}).get(event.object.KIND)
        if view_of is None:
            return True
        slot = (controller.name, key_of(event.object))
        view = None if event.type == "DELETED" else view_of(event.object)
        unchanged = event.type == "MODIFIED" and slot in self._views and self._views[slot] == view
        if event.type == "DELETED":
            self._views.pop(slot, None)
        else:
            self._views[slot] = view
        return not unchanged

    # -- work ---------------------------------------------------------------------------------------
    def process_one(self, timeout: float | None = 0.0) -> bool:
        key = self.queue.get(timeout)
        if key is None:
            return False
        try:
            self._reconcile(key)
        finally:
            self.queue.done(key)
            # Told once the key's queue state is final, so a listener asking ``has_work`` sees it.
            if self.listener is not None:
                self.listener.reconciled(key)
        return True

    def reconcile_key(self, key: ObjectKey) -> None:
        """One reconcile of ``key`` (taken from a queue by the caller, who marks it done afterwards)."""
        self._reconcile(key)

    def _reconcile(self, key: ObjectKey) -> None:
        controller = self.controllers[key.kind]
        self.reconciles[controller.name] += 1
        counter = self.calls_by_controller.setdefault(controller.name, CallCounter())
        token = current_controller.set(controller.name)
        started = time.monotonic()
        try:
            with call_scope(counter), call_scope() as this_reconcile:
                try:
                    result = controller.reconcile(key)
                except DeadlinePassed as exc:
                    # The command's time is up: the reconcile stopped where it was, before its next AWS
                    # call, as if the process had stopped there. Its next run carries on from there.
                    stopped = current_deadline()
                    if stopped is not None:
                        stopped.note(f"{key.kind.lower()}/{key.name} before {exc.call}")
                    _log.info("deadline passed; reconcile stopped", key=str(key), before=exc.call)
                    result = Result(requeue=True)
                except Conflict as exc:
                    # Someone wrote the object after this reconcile read it: expected with concurrent
                    # writers, not a fault. Retried with back-off like any error; no traceback.
                    _log.info("object changed during the reconcile; retrying", key=str(key), error=str(exc))
                    result = Result(error=exc)
                except NotFound as exc:
                    if not _is_about(exc, key):
                        _log.exception("reconcile raised", key=str(key))
                        result = Result(error=exc)
                    else:
                        # The object itself went away under the reconcile (deleted, or moved to another
                        # store): nothing is left to reconcile, and its deletion event says the rest.
                        _log.info("object gone during the reconcile", key=str(key))
                        result = Result()
                except Exception as exc:
                    _log.exception("reconcile raised", key=str(key))
                    result = Result(error=exc)
        finally:
            current_controller.reset(token)
        if self.observer is not None:
            self.observer.reconciled(controller.name, result_label(result), time.monotonic() - started)
        self._settle(controller, key)
        self.reconciled_keys.add(key)
        _log.debug(
            "reconciled",
            key=str(key),
            result=str(result),
            aws_calls=this_reconcile.total(),
            aws_mutating_calls=this_reconcile.total(mutating=True),
        )
        if result.error is None:
            self.error_streaks.pop(key, None)
        else:
            self.error_streaks[key] = (self.error_streaks.get(key, (0, result.error))[0] + 1, result.error)
        if result.error is not None:
            self.errors.append((key, str(result.error)))
            delay = self.queue.add_rate_limited(key)
            _log.info(
                "reconcile failed; retrying", key=str(key), error=str(result.error), retry_in=round(delay, 2)
            )
        elif result.requeue:
            self.queue.add_rate_limited(key)
        elif result.requeue_after > 0:
            self.queue.forget(key)
            self.queue.add(key, result.requeue_after)
        else:
            self.queue.forget(key)

    def _settle(self, controller: Controller, key: ObjectKey) -> None:
        reported = getattr(controller, "final_state", {}).pop(key, None)
        if reported is None:
            return
        try:
            current = self.store.get(controller.kind, key.name, key.namespace or None)
        except NotFound:
            return
        # Only when nothing changed since the controller's last look: a write by someone else in the
        # meantime keeps its event, and so its reconcile. A deletion is never settled: a status write
        # retried after a conflict re-reads the object, so the view a reconcile reports can carry a
        # deletionTimestamp that landed while it ran and that it never acted on.
        if current.being_deleted:
            return
        if desired_fingerprint(current) == reported and current.metadata.resource_version:
            self._settled[key] = int(current.metadata.resource_version)

    def has_work(self, keys: Iterable[ObjectKey]) -> bool:
        """Whether any of ``keys`` still has a reconcile queued or running (other objects' retries, such
        as a failed object's long back-off, do not count)."""
        return self.queue.has_work(keys)

    def run(
        self,
        until: Callable[[], bool] | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
        on_tick: Callable[[], None] | None = None,
    ) -> bool:
        """Reconcile until ``until()`` holds (True), the timeout passes or ``stop`` is set (False)."""
        stop = stop or threading.Event()
        done = threading.Event()
        self.prime()

        def work() -> None:
            while not done.is_set():
                self.process_one(timeout=0.1)

        # Workers run in a copy of this context, so call accounting scopes and log context follow them.
        threads = [
            threading.Thread(
                target=contextvars.copy_context().run, args=(work,), name=f"capa-worker-{i}", daemon=True
            )
            for i in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        outcome = False
        signal = change_signal_of(self.store)
        try:
            while not stop.is_set():
                generation = signal.generation() if signal is not None else 0
                self.poll_changes()
                if on_tick is not None:
                    on_tick()
                if until is not None and until():
                    outcome = True
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    break
                if signal is None:
                    stop.wait(self.poll_interval)
                    continue
                # Woken by the store's next commit (this process's reconciles' or another's); where other
                # processes cannot signal, polled as before.
                wait = max(self.poll_interval, IDLE_WAIT_SECONDS) if signal.listening else self.poll_interval
                if on_tick is not None:
                    wait = min(wait, TICK_SECONDS)
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
                signal.wait(generation, wait, stop)
        finally:
            done.set()
            for thread in threads:
                thread.join(timeout=120)
        return outcome


__all__ = [
    "Controller",
    "Manager",
    "ManagerListener",
    "ReconcileObserver",
    "Scope",
    "desired_fingerprint",
    "key_of",
    "result_label",
]
