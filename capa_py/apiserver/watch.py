"""Watches over HTTP: newline-delimited JSON events, bookmarks, timeouts and ``410 Gone``.

A worker thread follows the store's watch in segments of one bookmark interval. When a segment ends by its
timeout, every event of the kind up to the store's head (read before the segment started) has been seen, so
the watch may move its resourceVersion there: that is the resourceVersion a BOOKMARK carries, and the one the
next segment continues from, so no event is lost or sent twice between segments. A watch that asks for
bookmarks gets its first one as soon as it has caught up with the store.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from capa_py.api.meta import KubeObject
from capa_py.logging import get_logger
from capa_py.store.errors import Expired, StoreError
from capa_py.store.protocol import ObjectStore
from capa_py.store.selectors import FieldSelector

_log = get_logger("apiserver.watch")


@dataclass(frozen=True)
class WatchRequest:
    model: type[KubeObject]
    namespace: str | None
    resource_version: str | None
    label_selector: str | None
    field_selector: FieldSelector
    bookmarks: bool
    timeout: float | None
    render: Callable[[KubeObject], dict[str, Any]] = KubeObject.to_dict
    """The object as the watched path serves it (a CRD-defined kind: in the path's version)."""
    initial_events: bool | None = None
    """``sendInitialEvents``: the current objects first (as ADDED events), then the changes; None leaves it
    to the resourceVersion (none or ``0``: initial events, else only the changes after it)."""


INITIAL_EVENTS_END = "k8s.io/initial-events-end"
Item = tuple[str, Any, str]
"""``(type, document, resourceVersion)``: ADDED/MODIFIED/DELETED with the object's document, BOOKMARK with
the bookmark's extra metadata (its annotations),
ERROR with a store error, END when the watch is over."""


class FieldView:
    """What a watch with a field selector reports: an object that starts matching arrives as ADDED, one
    that stops matching as DELETED, as the API server's watch cache reports them. The watch remembers
    whether each object it has seen matched; one it has not seen yet (a watch from a resourceVersion)
    passes with the store's event type when it matches."""

    def __init__(self, selector: FieldSelector) -> None:
        self.selector = selector
        self.matched: dict[tuple[str, str], bool] = {}

    def event(self, event_type: str, doc: dict[str, Any]) -> str | None:
        if not self.selector.requirements:
            return event_type
        meta = doc.get("metadata", {})
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        now = self.selector.matches(doc)
        before = False if event_type == "ADDED" else self.matched.get(key)
        if event_type == "DELETED":
            self.matched.pop(key, None)
            return "DELETED" if before or (before is None and now) else None
        self.matched[key] = now
        if now:
            return event_type if before is None else ("MODIFIED" if before else "ADDED")
        return "DELETED" if before else None


def pump(
    store: ObjectStore,
    request: WatchRequest,
    emit: Callable[[Item], None],
    stop: threading.Event,
    bookmark_interval: float,
) -> None:
    """Follow the store and ``emit`` every item; runs in a worker thread until ``stop`` or the timeout."""
    deadline = None if request.timeout is None else time.monotonic() + request.timeout
    view = FieldView(request.field_selector)
    try:
        since = request.resource_version
        initial = request.initial_events
        if initial is None:
            initial = not since or since == "0"
        if initial or not since or since == "0":
            current = store.list(request.model, request.namespace, request.label_selector)
            for obj in current if initial else ():
                doc = request.render(obj)
                if view.event("ADDED", doc):
                    emit(("ADDED", doc, obj.metadata.resource_version or current.resource_version))
            if not since or since == "0" or int(current.resource_version) > int(since):
                since = current.resource_version
        # A bookmark after the initial events of a watch that asked for them says where they end.
        end_mark: dict[str, Any] = (
            {"annotations": {INITIAL_EVENTS_END: "true"}} if request.initial_events else {}
        )

        def follow(segment: float, since: str) -> str:
            """Emit the events of one segment, then a bookmark; the resourceVersion reached."""
            nonlocal end_mark
            head = _head(store)
            for event in store.watch(
                request.model, request.namespace, since, request.label_selector, timeout=segment, stop=stop
            ):
                since = event.resource_version
                doc = request.render(event.object)
                emitted = view.event(event.type, doc)
                if emitted is not None:
                    emit((emitted, doc, event.resource_version))
            if stop.is_set():
                return since
            if head is not None and int(head) > int(since):
                since = head
            # A watch from a resourceVersion the store has not reached yet sends nothing (no bookmark
            # either) until the store gets there, as the API server's watch does.
            if request.bookmarks and (head is None or int(head) >= int(since)):
                emit(("BOOKMARK", end_mark, since))
                end_mark = {}
            return since

        if request.bookmarks:
            # The first bookmark comes as soon as the watch has caught up with the store, so a client
            # that reads up to the current version and stops does not wait a whole interval.
            since = follow(0, since)
        while not stop.is_set():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            since = follow(
                bookmark_interval if remaining is None else min(bookmark_interval, remaining), since
            )
    except Expired as exc:
        emit(("ERROR", exc, ""))
    except StoreError as exc:
        _log.warning("watch failed", kind=request.model.KIND, error=str(exc))
        emit(("ERROR", exc, ""))
    finally:
        emit(("END", None, ""))


def _head(store: ObjectStore) -> str | None:
    current = getattr(store, "current_resource_version", None)
    return str(current()) if callable(current) else None


class Watches:
    """The worker threads of open watches, stopped together when the server shuts down."""

    def __init__(self, max_watches: int = 64) -> None:
        self.max_watches = max_watches
        self._executor = ThreadPoolExecutor(max_workers=max_watches, thread_name_prefix="capa-watch")
        self._stops: set[threading.Event] = set()
        self._lock = threading.Lock()

    def start(
        self,
        store: ObjectStore,
        request: WatchRequest,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[Item],
        bookmark_interval: float,
    ) -> threading.Event | None:
        """The new watch's stop event, or ``None`` when every worker is busy (the caller answers 429)."""
        stop = threading.Event()
        with self._lock:
            if len(self._stops) >= self.max_watches:
                return None
            self._stops.add(stop)

        def emit(item: Item) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:
                stop.set()  # the loop is closed: the server is gone

        def run() -> None:
            try:
                pump(store, request, emit, stop, bookmark_interval)
            finally:
                with self._lock:
                    self._stops.discard(stop)

        self._executor.submit(run)
        return stop

    def close(self) -> None:
        with self._lock:
            for stop in self._stops:
                stop.set()
        self._executor.shutdown(wait=True, cancel_futures=True)
