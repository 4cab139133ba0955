"""Informers: one thread per kind keeping a cache of the store's objects, and passing every change on.

An :class:`Informer` lists its kind (optionally one namespace, optionally a label selector), then watches
from the list's resourceVersion for as long as it runs. A watch that ends (a server-side timeout) is
started again from the last event seen; a watch that answers ``Expired`` (the events it needed were
compacted away) makes the informer list again and pass on the differences to its cache as events: ADDED
for objects it did not know, MODIFIED for changed ones and DELETED for those gone, so no change is lost.

:class:`CachedStore` is the :class:`~capa_py.store.protocol.ObjectStore` reconciles use: ``get`` and
``list`` of an informed kind read the cache (copies, so callers may change them), everything else goes to
the store; an object a write returns goes into the cache at once, so a process reads its own writes even
before the watch delivers them. An object outside an informer's scope is not found through the cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar, cast

from capa_py.api.meta import KubeObject
from capa_py.logging import get_logger
from capa_py.store.errors import Conflict, Expired, NotFound, ObjectRef, StoreError
from capa_py.store.protocol import ObjectList, ObjectStore, Propagation, WatchEvent
from capa_py.store.selectors import LabelSelector

_log = get_logger("runtime.informer")

T = TypeVar("T", bound=KubeObject)
Handler = Callable[[WatchEvent[KubeObject]], None]
CacheKey = tuple[str, str]

QUICK_WATCH = 0.1
"""A watch ending sooner than this without an event is restarted only after this long."""
RETRY_DELAY = 1.0
"""Seconds between attempts after a list or watch failed for another reason than ``Expired``."""


def _rv(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _newer_or_same(candidate: str | None, cached: str | None) -> bool:
    """Whether ``candidate`` is not older than ``cached`` (unknown orders count as newer)."""
    new, old = _rv(candidate), _rv(cached)
    return new is None or old is None or new >= old


def namespace_of(kind: type[KubeObject], namespace: str | None) -> str:
    if not kind.NAMESPACED:
        return ""
    return namespace or "default"


class Informer:
    """Keeps the objects of one kind (within its scope) and calls the handlers for every change."""

    def __init__(
        self,
        store: ObjectStore,
        kind: type[KubeObject],
        namespace: str | None = None,
        label_selector: str | None = None,
        retry_delay: float = RETRY_DELAY,
    ) -> None:
        self.store = store
        self.kind = kind
        self.namespace = namespace if kind.NAMESPACED else None
        self.label_selector = label_selector or None
        self._selector = LabelSelector.parse(self.label_selector)
        self.retry_delay = retry_delay
        self.relists = 0
        """How many times the informer listed again after its watch expired."""
        self._handlers: list[Handler] = []
        self._objects: dict[CacheKey, KubeObject] = {}
        self._deleted: dict[CacheKey, str | None] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._resource_version: str | None = None
        self._thread: threading.Thread | None = None

    # -- handlers and lifecycle ---------------------------------------------------------------------
    def add_handler(self, handler: Handler) -> None:
        """Call ``handler`` (on the informer's thread) for every change after the cache took it."""
        self._handlers.append(handler)

    def has_synced(self) -> bool:
        """Whether the first list is in the cache."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(
            target=self.run, args=(stop,), name=f"capa-informer-{self.kind.KIND.lower()}", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self, stop: threading.Event) -> None:
        """List, then watch until ``stop`` is set: relist on ``Expired``, rewatch when a watch ends."""
        while not stop.is_set():
            try:
                if self._resource_version is None:
                    self.relist()
                started, delivered = time.monotonic(), 0
                for event in self.store.watch(
                    self.kind,
                    namespace=self.namespace,
                    resource_version=self._resource_version,
                    label_selector=self.label_selector,
                    stop=stop,
                ):
                    self.apply(event)
                    self._resource_version = event.resource_version
                    delivered += 1
                if not delivered and time.monotonic() - started < QUICK_WATCH:
                    # A watch that ends at once with nothing to say must not become a busy loop.
                    stop.wait(QUICK_WATCH)
            except Expired as exc:
                _log.info("watch expired; listing again", kind=self.kind.KIND, reason=str(exc))
                self._resource_version = None
                self.relists += 1
            except Exception as exc:
                # A store that is briefly unreachable must not end the informer: try again shortly.
                _log.warning("watch failed; retrying", kind=self.kind.KIND, error=str(exc))
                stop.wait(self.retry_delay)

    # -- keeping the cache --------------------------------------------------------------------------
    def relist(self) -> None:
        """List the kind and replace the cache, passing on what changed since the cache's last state."""
        listed = self.store.list(self.kind, namespace=self.namespace, label_selector=self.label_selector)
        events: list[WatchEvent[KubeObject]] = []
        with self._lock:
            fresh = {self._key(obj): obj for obj in listed}
            for key, obj in fresh.items():
                old = self._objects.get(key)
                if old is None:
                    events.append(WatchEvent("ADDED", obj, self._version(obj, listed.resource_version)))
                elif old.metadata.resource_version != obj.metadata.resource_version:
                    events.append(WatchEvent("MODIFIED", obj, self._version(obj, listed.resource_version)))
            for key, old in self._objects.items():
                if key not in fresh:
                    events.append(WatchEvent("DELETED", old, listed.resource_version))
            self._objects = fresh
            self._deleted.clear()
            self._resource_version = listed.resource_version
        self._synced.set()
        for event in events:
            self._emit(event)

    def apply(self, event: WatchEvent[KubeObject]) -> None:
        """Take one watch event into the cache (unless the cache holds a newer state) and pass it on."""
        key = self._key(event.object)
        with self._lock:
            if event.type == "DELETED":
                cached = self._objects.get(key)
                if cached is None or _newer_or_same(event.resource_version, cached.metadata.resource_version):
                    self._objects.pop(key, None)
                    self._deleted[key] = event.resource_version
            else:
                self._remember(key, event.object)
        self._emit(event)

    def record(self, obj: KubeObject) -> None:
        """A write's result: the cache holds it from now on (unless it already holds something newer)."""
        if not self._in_scope(obj):
            return
        with self._lock:
            self._remember(self._key(obj), obj)

    def forget(self, obj: KubeObject) -> None:
        """An object this process deleted for good."""
        with self._lock:
            key = self._key(obj)
            self._objects.pop(key, None)
            self._deleted[key] = obj.metadata.resource_version

    def _remember(self, key: CacheKey, obj: KubeObject) -> None:
        cached = self._objects.get(key)
        if cached is not None and not _newer_or_same(
            obj.metadata.resource_version, cached.metadata.resource_version
        ):
            return
        if (
            cached is None
            and key in self._deleted
            and not _newer_or_same(obj.metadata.resource_version, self._deleted[key])
        ):
            return  # an event older than the deletion this cache already saw
        self._deleted.pop(key, None)
        self._objects[key] = obj

    def _emit(self, event: WatchEvent[KubeObject]) -> None:
        for handler in self._handlers:
            try:
                handler(event)
            except Exception:
                _log.exception("event handler raised", kind=self.kind.KIND, event=event.type)

    # -- reading ------------------------------------------------------------------------------------
    def _key(self, obj: KubeObject) -> CacheKey:
        return (namespace_of(self.kind, obj.metadata.namespace), obj.metadata.name)

    def _version(self, obj: KubeObject, fallback: str) -> str:
        return obj.metadata.resource_version or fallback

    def _in_scope(self, obj: KubeObject) -> bool:
        if self.namespace is not None and (obj.metadata.namespace or "default") != self.namespace:
            return False
        return self._selector.matches(obj.metadata.labels)

    def get(self, name: str, namespace: str | None = None) -> KubeObject:
        with self._lock:
            obj = self._objects.get((namespace_of(self.kind, namespace), name))
        if obj is None:
            raise NotFound.missing(ObjectRef.of(self.kind.KIND, name, namespace_of(self.kind, namespace)))
        return obj.model_copy(deep=True)

    def peek(self, name: str, namespace: str | None = None) -> KubeObject:
        """The cached object itself, not a copy: for readers that never change it (NotFound if absent)."""
        with self._lock:
            obj = self._objects.get((namespace_of(self.kind, namespace), name))
        if obj is None:
            raise NotFound.missing(ObjectRef.of(self.kind.KIND, name, namespace_of(self.kind, namespace)))
        return obj

    def list(self, namespace: str | None = None, label_selector: str | None = None) -> list[KubeObject]:
        selector = LabelSelector.parse(label_selector)
        with self._lock:
            objects = sorted(self._objects.items())
        return [
            obj.model_copy(deep=True)
            for (ns, _), obj in objects
            if (namespace is None or not self.kind.NAMESPACED or ns == namespace)
            and selector.matches(obj.metadata.labels)
        ]

    @property
    def resource_version(self) -> str:
        return self._resource_version or "0"

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)


class CachedStore:
    """The store as reconciles see it: reads of informed kinds from the informers' caches."""

    def __init__(self, store: ObjectStore, informers: Iterable[Informer]) -> None:
        self.store = store
        self.informers = {(i.kind.API_VERSION, i.kind.KIND): i for i in informers}

    def informer_for(self, kind: type[KubeObject]) -> Informer | None:
        return self.informers.get((kind.API_VERSION, kind.KIND))

    def has_synced(self) -> bool:
        return all(informer.has_synced() for informer in self.informers.values())

    @property
    def uid(self) -> str:
        return self.store.uid

    def get(self, kind: type[T], name: str, namespace: str | None = None) -> T:
        informer = self.informer_for(kind)
        if informer is None:
            return self.store.get(kind, name, namespace)
        return cast(T, informer.get(name, namespace))

    def list(
        self,
        kind: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList[T]:
        informer = self.informer_for(kind)
        if informer is None or field_selector:
            return self.store.list(kind, namespace, label_selector, field_selector)
        items = cast(list[T], informer.list(namespace, label_selector))
        return ObjectList(items, informer.resource_version)

    def _record(self, obj: T) -> T:
        informer = self.informer_for(type(obj))
        if informer is None:
            return obj
        if obj.being_deleted and not obj.metadata.finalizers:
            # The write took the last finalizer off an object marked for deletion: the store deleted it.
            # Recording it could bring it back for good when the watch's DELETED event came first.
            informer.forget(obj)
        else:
            informer.record(obj)
        return obj

    def create(self, obj: T) -> T:
        return self._record(self.store.create(obj))

    def update(self, obj: T) -> T:
        try:
            return self._record(self.store.update(obj))
        except Conflict:
            self._refresh(obj)
            raise

    def update_status(self, obj: T) -> T:
        try:
            return self._record(self.store.update_status(obj))
        except Conflict:
            self._refresh(obj)
            raise

    def _refresh(self, obj: KubeObject) -> None:
        """After a conflict the cache is behind the store: read the object there, so that the writer's
        retry (``retry_on_conflict`` reads again) starts from the current version, not the stale one."""
        informer = self.informer_for(type(obj))
        if informer is None:
            return
        try:
            informer.record(self.store.get(type(obj), obj.metadata.name, obj.metadata.namespace))
        except StoreError:
            return  # gone or unreachable: the watch will say so

    def delete(
        self,
        kind: type[T],
        name: str,
        namespace: str | None = None,
        propagation: Propagation = "Background",
        resource_version: str | None = None,
    ) -> T | None:
        last = self.store.delete(kind, name, namespace, propagation, resource_version)
        informer = self.informer_for(kind)
        if informer is not None and last is not None:
            if last.metadata.finalizers:
                informer.record(last)  # only marked for deletion: it stays until its finalizers go
            else:
                informer.forget(last)
        return last

    def watch(
        self,
        kind: type[T],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent[T]]:
        return self.store.watch(kind, namespace, resource_version, label_selector, timeout, stop)

    def close(self) -> None:
        """The cache does not own the store: whoever opened it closes it."""


def informers_for(
    store: ObjectStore,
    kinds: Sequence[type[KubeObject]],
    namespace: str | None = None,
    label_selector: str | None = None,
    unfiltered: Sequence[type[KubeObject]] = (),
) -> list[Informer]:
    """One informer per kind, scoped to ``namespace`` and, except for the ``unfiltered`` kinds, to
    ``label_selector``."""
    plain = {(k.API_VERSION, k.KIND) for k in unfiltered}
    return [
        Informer(
            store,
            kind,
            namespace,
            None if (kind.API_VERSION, kind.KIND) in plain else label_selector,
        )
        for kind in kinds
    ]


def api_reader(store: ObjectStore) -> ObjectStore:
    """What ``store`` holds now, not what its informers have seen so far: the reader for decisions a
    lagging cache would get wrong (which free Hardware to claim), as controller-runtime's API reader."""
    return store.store if isinstance(store, CachedStore) else store
