"""A long-running controller process: informers feed per-controller queues, worker pools reconcile.

:class:`ControllerProcess` is what ``capa controller`` runs, built on the ObjectStore protocol alone, so it
works on every store:

* one :class:`~capa_py.runtime.informer.Informer` per kind the controllers reconcile or watch, scoped to a
  namespace and (for Cluster API kinds) to a label selector; reconciles read through their cache;
* each controller has its own :class:`~capa_py.runtime.queue.WorkQueue` with controller-runtime's rate
  limiter and its own pool of worker threads (at most ``concurrency`` per controller name), started on
  demand: a worker starts when a key is due and every worker of that controller is busy, and stays; a
  controller with nothing to do has none, so the process's threads follow the work it has had, not the
  sum of every controller's limit;
* after activity, once the process is quiet again, glibc's free memory is handed back to the system
  (:mod:`capa_py.runtime.allocator`);
* every ``sync_period`` (jittered by up to 10 %, so processes do not resync in step) every cached object of a
  reconciled kind is queued again;
* a reconcile that raises is logged and counted as an error and retried with backoff; a worker survives
  anything a reconcile or the bookkeeping around it raises.

:meth:`start_informers` and :meth:`start_workers` are separate so that a process waiting for leadership keeps
its caches warm (and ready) without reconciling; :meth:`shutdown` stops the informers, lets the workers
finish what they are doing within a grace period and says whether they did.
"""

from __future__ import annotations

import contextvars
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from capa_py.api.meta import KubeObject
from capa_py.logging import get_logger
from capa_py.runtime.allocator import DEFAULT_TRIM_INTERVAL, Trimmer
from capa_py.runtime.informer import CachedStore, Informer, informers_for
from capa_py.runtime.manager import Controller, Manager, key_of
from capa_py.runtime.metrics import ControllerMetrics
from capa_py.runtime.queue import QueueRouter, WorkQueue
from capa_py.runtime.ratelimiter import RateLimiter, controller_rate_limiter
from capa_py.store.protocol import ObjectStore

_log = get_logger("runtime.process")

DEFAULT_CONCURRENCY = 10
SYNC_JITTER = 0.1
INFORMER_STOP_TIMEOUT = 10.0
WORKER_IDLE_WAKE = 60.0


@dataclass
class ProcessOptions:
    namespace: str | None = None
    """Only objects of this namespace (cluster-scoped kinds are not affected); None for every namespace."""
    label_selector: str | None = None
    """Only Cluster API objects matching this selector (``--watch-filter``); Secrets are not filtered."""
    concurrency: Mapping[str, int] = field(default_factory=dict)
    """Workers per controller name; others get ``default_concurrency``."""
    default_concurrency: int = DEFAULT_CONCURRENCY
    sync_period: float = 600.0
    rate_limiter: Callable[[], RateLimiter] = controller_rate_limiter
    unfiltered_kinds: Sequence[type[KubeObject]] = ()
    informed_kinds: Sequence[type[KubeObject]] = ()
    """Kinds cached even when no controller reconciles or watches them (Hegel's Hardware)."""
    trim_interval: float = DEFAULT_TRIM_INTERVAL
    """How often (seconds) to look whether a reconcile burst ended, to hand freed memory back; 0: never."""


class ControllerProcess:
    def __init__(
        self,
        store: ObjectStore,
        build_controllers: Callable[[ObjectStore], Sequence[Controller]],
        options: ProcessOptions | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.options = options or ProcessOptions()
        self.metrics = metrics or ControllerMetrics()
        self.store = store
        # The controllers' kinds are known only once they are built, and they must be built on the cache:
        # build them on a placeholder cache first, then give them the real one.
        self.cache = CachedStore(store, [])
        self.controllers = list(build_controllers(self.cache))
        kinds: dict[tuple[str, str], type[KubeObject]] = {}
        for controller in self.controllers:
            for kind in (controller.kind, *controller.watched_kinds):
                kinds.setdefault((kind.API_VERSION, kind.KIND), kind)
        for kind in self.options.informed_kinds:
            kinds.setdefault((kind.API_VERSION, kind.KIND), kind)
        self.informers: list[Informer] = informers_for(
            store,
            list(kinds.values()),
            self.options.namespace,
            self.options.label_selector,
            unfiltered=self.options.unfiltered_kinds,
        )
        self.cache.informers = {(i.kind.API_VERSION, i.kind.KIND): i for i in self.informers}
        self.queues: dict[str, WorkQueue] = {}
        for controller in self.controllers:
            self.metrics.add_controller(controller.name)
            self.queues[controller.kind.KIND] = WorkQueue(
                rate_limiter=self.options.rate_limiter(), metrics=self.metrics.queue(controller.name)
            )
        self.router = QueueRouter(self.queues)
        self.manager = Manager(self.cache, self.controllers, queue=self.router, observer=self.metrics)
        for informer in self.informers:
            informer.add_handler(self.manager.dispatch)
        self.worker_failures = 0
        """Exceptions raised around a reconcile (not by it: those are reconcile errors), each survived."""
        self._informers_stop = threading.Event()
        self._workers_stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._workers_lock = threading.Lock()
        self._started: dict[str, int] = {c.name: 0 for c in self.controllers}
        self._reconciling = False
        self._resyncer: threading.Thread | None = None
        self.trimmer = Trimmer(
            lambda: sum(self.manager.reconciles.values()),
            lambda: not self.router.quiet(),
            self.options.trim_interval,
        )

    # -- informers ----------------------------------------------------------------------------------
    def start_informers(self) -> None:
        for informer in self.informers:
            informer.start(self._informers_stop)

    def has_synced(self) -> bool:
        """Whether every informer has its first list (what ``/readyz`` reports)."""
        return self.cache.has_synced()

    def wait_for_sync(self, timeout: float | None = None, stop: threading.Event | None = None) -> bool:
        """Wait until every informer has its first list; False after ``timeout`` or once ``stop`` is set."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.has_synced():
            if stop is not None and stop.is_set():
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return False
            (stop or self._workers_stop).wait(0.05)
        return True

    # -- workers ------------------------------------------------------------------------------------
    def concurrency_of(self, controller: Controller) -> int:
        return max(1, self.options.concurrency.get(controller.name, self.options.default_concurrency))

    def start_workers(self, stop: threading.Event | None = None) -> bool:
        """Once every informer has synced, start every controller's worker pool and the periodic resync.

        Reconciling from a partial cache would take objects not listed yet for absent, so this waits
        (as controller-runtime waits for its caches); False when ``stop`` was set first."""
        if not self.wait_for_sync(stop=stop):
            return False
        # Workers run in a copy of this context, so log context follows them.
        context = contextvars.copy_context()
        with self._workers_lock:
            self._reconciling = True
        for controller in self.controllers:
            queue = self.queues[controller.kind.KIND]
            queue.on_starved = lambda c=controller: self._add_worker(c, context)
            if len(queue):
                self._add_worker(controller, context)
        self._resyncer = threading.Thread(target=self._resync_loop, name="capa-resync", daemon=True)
        self._resyncer.start()
        self.trimmer.start(self._workers_stop)
        _log.info(
            "controllers started",
            workers={c.name: self.concurrency_of(c) for c in self.controllers},
            sync_period=self.options.sync_period,
        )
        return True

    def workers_started(self) -> dict[str, int]:
        """How many workers each controller has (started on demand, up to its concurrency)."""
        with self._workers_lock:
            return dict(self._started)

    def _add_worker(self, controller: Controller, context: contextvars.Context) -> None:
        """One more worker for ``controller``, unless it has its ``concurrency`` already."""
        with self._workers_lock:
            index = self._started[controller.name]
            stopped = not self._reconciling or self._workers_stop.is_set()
            if stopped or index >= self.concurrency_of(controller):
                return
            self._started[controller.name] = index + 1
            thread = threading.Thread(
                target=context.copy().run,
                args=(self._work, self.queues[controller.kind.KIND]),
                name=f"capa-{controller.name}-worker-{index}",
                daemon=True,
            )
            self._workers.append(thread)
        thread.start()

    def _work(self, queue: WorkQueue) -> None:
        while not self._workers_stop.is_set():
            # Stopping shuts the queues down, which wakes every worker waiting here at once: the timeout
            # is only a safety net, not how a stop is noticed (an idle worker wakes once a minute).
            key = queue.get(timeout=WORKER_IDLE_WAKE)
            if key is None:
                continue
            try:
                self.manager.reconcile_key(key)
            except Exception:
                # The reconcile's own exceptions are already results; this is the bookkeeping around it.
                self.worker_failures += 1
                _log.exception("worker caught an exception; carrying on", key=str(key))
                try:
                    queue.add_rate_limited(key)
                except Exception:
                    _log.exception("could not requeue", key=str(key))
            finally:
                queue.done(key)
                if queue.in_progress() == 0 and not queue.has_due():
                    self.trimmer.poke()  # maybe the end of a burst: the trimmer looks at every queue

    def resync(self) -> int:
        """Queue every cached object of every reconciled kind; returns how many."""
        queued = 0
        for controller in self.controllers:
            for obj in self.cache.list(controller.kind):
                self.router.add(key_of(obj))
                queued += 1
        return queued

    def _next_resync(self) -> float:
        return self.options.sync_period * (1.0 + random.uniform(0.0, SYNC_JITTER))

    def _resync_loop(self) -> None:
        if self.options.sync_period <= 0:
            return
        while not self._workers_stop.wait(self._next_resync()):
            try:
                queued = self.resync()
                _log.debug("resync", queued=queued)
            except Exception:
                _log.exception("resync failed")

    # -- stopping -----------------------------------------------------------------------------------
    def stop_informers(self, timeout: float = INFORMER_STOP_TIMEOUT) -> None:
        """Stop the informers and wait for them (a watch notices within its poll interval)."""
        self._informers_stop.set()
        for informer in self.informers:
            informer.join(timeout)

    def stop_reconciling(self) -> None:
        """Hand out no more work (reconciles in progress go on); safe from any thread."""
        self.router.shut_down()
        self._workers_stop.set()

    def shutdown(self, grace: float) -> bool:
        """Stop watching and taking new work; give reconciles in progress ``grace`` seconds to finish.

        True when every worker ended in time."""
        self.stop_informers()
        self.stop_reconciling()
        deadline = time.monotonic() + grace
        with self._workers_lock:
            workers = list(self._workers)
        for thread in workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.trimmer.join(max(0.0, deadline - time.monotonic()))
        if self._resyncer is not None:
            self._resyncer.join(max(0.0, deadline - time.monotonic()))
        unfinished = [t.name for t in workers if t.is_alive()]
        if unfinished:
            _log.warning("reconciles still running after the grace period", workers=unfinished)
            return False
        return True
