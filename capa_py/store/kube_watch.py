"""Watches over the Kubernetes API that never go blind.

A watch is a chain of HTTP watch connections. Each one asks for bookmarks and ends by the server's
``timeoutSeconds`` at the latest; the watch remembers the resourceVersion of the last event or BOOKMARK it
read, and when a connection ends — by the server's timeout or because it was dropped — it opens the next
one from there, so no event is lost and none is delivered twice. Bookmarks are consumed (never yielded):
they move the remembered version along while the kind is quiet, so an idle watch is not expired by the
server's compaction. A ``410`` (as an HTTP status or an ERROR event) raises
:class:`~capa_py.store.errors.Expired`, as the SQLite store's watch does: the caller lists again.

Each connection is read by a daemon thread that puts lines on a queue; the generator reads the queue, so it
honours ``stop`` and its timeout while the connection is idle, and ending the generator shuts the socket,
which ends the thread.
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import socket
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.exceptions import ApiException

from capa_py.logging import get_logger
from capa_py.store.errors import Expired, StoreError, Unavailable
from capa_py.store.protocol import T, WatchEvent
from capa_py.store.selectors import LabelSelector

if TYPE_CHECKING:
    from capa_py.store.kube import KubeStore

DRAIN_CONNECTION_SECONDS = 1
"""A ``timeout=0`` watch's connections: it stops once it has read up to the server's current version."""
READ_GRACE = 30.0
"""How much longer than its ``timeoutSeconds`` a connection may stay silent before it counts as dropped."""
POLL = 0.05

_log = get_logger("store.kube.watch")
_Item = tuple[str, Any]


class Stream:
    """One watch connection: a daemon thread splits the response into lines and queues them, then
    ``("end", error or None)``."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.items: queue.Queue[_Item] = queue.Queue()
        self._aborted = threading.Event()
        self._thread = threading.Thread(target=self._read, name="capa-kube-watch", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        error: BaseException | None = None
        buffer = b""
        try:
            for chunk in self.response.stream(amt=None, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        self.items.put(("line", line))
            if buffer.strip():
                self.items.put(("line", buffer))
        except Exception as exc:  # a dropped connection, reported to the watch, which reconnects
            error = exc
        finally:
            self.items.put(("end", None if self._aborted.is_set() else error))
            with contextlib.suppress(Exception):
                self.response.release_conn()

    def abort(self) -> None:
        """End the connection now (from any thread): the reader wakes up and finishes."""
        self._aborted.set()
        connection = getattr(self.response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            self.response.close()


def _newer(candidate: str, than: str) -> bool:
    """Whether ``candidate`` comes after ``than`` (resourceVersions of one server are increasing integers
    in etcd and in the SQLite store; anything else is taken as newer)."""
    try:
        return int(candidate) > int(than)
    except ValueError:
        return candidate != than


def _wait(stop: threading.Event | None, seconds: float) -> bool:
    """Sleep, waking early when ``stop`` is set; whether it was."""
    if stop is not None:
        return stop.wait(seconds)
    time.sleep(seconds)
    return False


def follow(
    store: KubeStore,
    kind: type[T],
    namespace: str | None,
    resource_version: str | None,
    label_selector: str | None,
    timeout: float | None,
    stop: threading.Event | None,
) -> Iterator[WatchEvent[T]]:
    """The watch generator behind :meth:`KubeStore.watch` (same arguments and semantics as the SQLite
    store's: ``timeout=0`` returns once what is already there was read, ``None`` runs until ``stop``)."""
    endpoint = store.endpoint(kind)
    selector = LabelSelector.parse(label_selector)
    ns = (namespace or None) if kind.NAMESPACED else None
    deadline = None if timeout is None else time.monotonic() + timeout
    draining = timeout is not None and timeout <= 0
    if not resource_version or resource_version == "0":
        current = store.list(kind, ns, label_selector)
        for obj in current:
            yield WatchEvent("ADDED", obj, obj.metadata.resource_version or current.resource_version)
        since = current.resource_version
        if draining:
            return
    else:
        since = resource_version
    target = store.current_resource_version(kind) if draining else None
    failures = 0
    while True:
        if (stop is not None and stop.is_set()) or store.closed:
            return
        if target is not None and not _newer(target, since):
            return
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0 and not draining:
            return
        longest = store.watch_connection_seconds
        seconds = longest if remaining is None else max(1, math.ceil(min(remaining, longest)))
        if draining:
            seconds = DRAIN_CONNECTION_SECONDS
        query: dict[str, Any] = {
            "resource_version": since,
            "allow_watch_bookmarks": True,
            "timeout_seconds": seconds,
        }
        if selector.requirements:
            query["label_selector"] = str(selector)
        try:
            response = endpoint.watch(ns, seconds + READ_GRACE, **query)
        except ApiException as exc:
            mapped = store.store_error_of(exc, f"{kind.KIND} watch")
            if isinstance(mapped, Unavailable) and failures < store.watch_reconnect_attempts:
                failures += 1
                if _wait(stop, 0.1 * 2 ** (failures - 1)):
                    return
                continue
            raise mapped from exc
        except urllib3.exceptions.HTTPError as exc:
            failures += 1
            if failures > store.watch_reconnect_attempts:
                raise store.store_error_of(exc, f"{kind.KIND} watch") from exc
            _log.info("watch cannot reconnect yet; trying again", kind=kind.KIND, error=str(exc))
            if _wait(stop, 0.1 * 2 ** (failures - 1)):
                return
            continue
        stream = Stream(response)
        if not store.track(stream):
            stream.abort()
            return
        ended_cleanly = dropped = False
        try:
            while True:
                if stop is not None and stop.is_set():
                    return
                wait = POLL
                if deadline is not None and not draining:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    wait = min(wait, left)
                try:
                    item_type, payload = stream.items.get(timeout=wait)
                except queue.Empty:
                    continue
                if item_type == "end":
                    ended_cleanly, dropped = payload is None, payload is not None
                    break
                try:
                    event = json.loads(payload)
                except ValueError:  # a line cut short by a dropped connection: resume as after one
                    dropped = True
                    break
                failures = 0  # the server answers: a drop after this is a new problem
                event_type = event.get("type")
                doc: dict[str, Any] = event.get("object") or {}
                if event_type == "ERROR":
                    raise _error_event(store, kind.KIND, doc)
                rv = str((doc.get("metadata") or {}).get("resourceVersion") or "")
                if not rv or not _newer(rv, since):
                    continue  # already delivered (or nothing to resume from): never twice
                since = rv
                if event_type in ("ADDED", "MODIFIED", "DELETED"):
                    yield WatchEvent(event_type, store.to_model(kind, doc), rv)
                if target is not None and not _newer(target, since):
                    return
        finally:
            store.untrack(stream)
            stream.abort()
        if draining and ended_cleanly:
            return  # the server had its second to send what was there
        if dropped:
            # A server that keeps dropping connections before sending anything is not answering.
            failures += 1
            if failures > store.watch_reconnect_attempts:
                raise Unavailable(store.server, f"{kind.KIND} watch: the connection keeps dropping")
            _log.info("watch connection dropped; resuming", kind=kind.KIND, since=since)
            if _wait(stop, 0.1 * 2 ** (failures - 1)):
                return


def _error_event(store: KubeStore, kind: str, status: dict[str, Any]) -> StoreError:
    code = int(status.get("code") or 0)
    message = str(status.get("message") or "")
    if code == 410:
        return Expired(f"{kind} watch: {message or 'the resourceVersion is too old'}; list again")
    exc = ApiException(status=code, reason=str(status.get("reason") or ""))
    exc.body = json.dumps(status)
    return store.store_error_of(exc, f"{kind} watch")
