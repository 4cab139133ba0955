"""Foreground deletion: an owner stays, marked, until the garbage collector has removed its dependents.

``DELETE ?propagationPolicy=Foreground`` adds the ``foregroundDeletion`` finalizer and marks the owner for
deletion; the collector (a thread of the server) then deletes every dependent (objects whose owner
references name the owner) and, once none is left, removes the finalizer, which deletes the owner unless
other finalizers remain. The collector runs while the server runs: an owner marked when the server stops
waits for the next start, which finds it again.
"""

from __future__ import annotations

import contextlib
import threading

from capa_py.api.meta import KubeObject
from capa_py.api.registry import KindRegistry
from capa_py.logging import get_logger
from capa_py.store.errors import Conflict, NotFound, StoreError
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.protocol import ObjectStore

FOREGROUND_FINALIZER = "foregroundDeletion"

_log = get_logger("apiserver.foreground")


def mark(store: ObjectStore, current: KubeObject, precondition_rv: str | None) -> KubeObject | None:
    """Add the finalizer (unless the object is already being deleted) and mark the object for deletion."""
    if precondition_rv and precondition_rv != current.metadata.resource_version:
        raise Conflict("resourceVersion precondition failed")
    if not current.being_deleted and FOREGROUND_FINALIZER not in current.metadata.finalizers:
        current = current.model_copy(deep=True)
        current.metadata.finalizers.append(FOREGROUND_FINALIZER)
        current = store.update(current)
    return store.delete(type(current), current.metadata.name, current.metadata.namespace, "Background")


class ForegroundCollector:
    def __init__(self, store: ObjectStore, registry: KindRegistry, interval: float = 0.2) -> None:
        self.store = store
        self.registry = registry
        self.interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capa-foreground-gc", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                pending = self.collect()
            except StoreError as exc:
                _log.warning("foreground deletion pass failed", error=str(exc))
                pending = True
            except Exception:  # a bug must not stop the collector for good
                _log.exception("foreground deletion pass failed")
                pending = True
            # While owners wait, look again soon; otherwise sleep until a foreground delete wakes us.
            self._wake.wait(self.interval if pending else None)
            self._wake.clear()

    def _all(self) -> list[KubeObject]:
        return [obj for kind in self.registry.kinds() for obj in self.store.list(kind)]

    def collect(self) -> bool:
        """One pass; whether owners are still waiting for their dependents."""
        everything = self._all()
        owners = [o for o in everything if o.being_deleted and FOREGROUND_FINALIZER in o.metadata.finalizers]
        waiting = False
        for owner in owners:
            dependents = [
                o for o in everything if any(r.uid == owner.metadata.uid for r in o.metadata.owner_references)
            ]
            left = False
            for dependent in dependents:
                if dependent.being_deleted:
                    left = True
                    continue
                try:
                    gone = self.store.delete(
                        type(dependent), dependent.metadata.name, dependent.metadata.namespace, "Background"
                    )
                except NotFound:
                    continue
                left = left or (gone is not None and bool(gone.metadata.finalizers))
            if left:
                waiting = True
                continue
            _log.info("dependents gone: finishing foreground deletion", kind=owner.KIND, name=owner.name)
            with contextlib.suppress(NotFound):
                retry_on_conflict(self.store, owner, _drop_finalizer)
        return waiting


def _drop_finalizer(obj: KubeObject) -> None:
    obj.metadata.finalizers = [f for f in obj.metadata.finalizers if f != FOREGROUND_FINALIZER]
