"""Kubernetes Events for what the controllers do: ``kubectl describe`` and ``kubectl get events`` show them.

:class:`EventRecorder` writes ``v1`` Event objects through the store protocol, so the same recorder serves
the embedded SQLite store and a real API server. It behaves as client-go's legacy recorder does where an
operator can see it:

* an event lives in the involved object's namespace (``default`` for a cluster-scoped object) and is named
  ``<object>.<hex nanoseconds>``;
* a repeat (same object, type, reason and message from this recorder) is not a new object: the one already
  written gets ``count + 1`` and a new ``lastTimestamp``; the recorder remembers the last
  :data:`CACHE_SIZE` distinct events of its process, as client-go's correlator does (a repeat after a
  restart starts a new object);
* recording never raises into a reconcile: a failed write is logged and dropped;
* messages are cut to :data:`MAX_MESSAGE` characters and anything that looks like a credential (an AWS
  access key id, ``secret=…``, ``token: …``) or an opaque blob (user data is base64) is masked first, so an
  event never carries what the logs never carry either.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from capa_py.api.core import Event, EventSource, FullObjectReference
from capa_py.api.meta import KubeObject, ObjectMeta, utcnow
from capa_py.logging import get_logger
from capa_py.store.errors import AlreadyExists, Conflict, NotFound
from capa_py.store.protocol import ObjectStore

EventType = Literal["Normal", "Warning"]
NORMAL: EventType = "Normal"
WARNING: EventType = "Warning"
DEFAULT_COMPONENT = "capa-py-controller"
CACHE_SIZE = 4096
MAX_MESSAGE = 1024
_NAME_ATTEMPTS = 5
_log = get_logger("events")

_MASKED = "***"
_ACCESS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b")
_SECRET_PAIR = re.compile(
    r"(?i)\b([\w.-]*(?:secret|password|passwd|token|credential|authorization|user_?data)[\w.-]*)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
)
_BLOB = re.compile(r"[A-Za-z0-9+/=_-]{120,}")


def scrub(message: str) -> str:
    """``message`` with credential-looking values and opaque blobs masked, at most :data:`MAX_MESSAGE`
    characters long."""
    cleaned = _ACCESS_KEY_ID.sub(_MASKED, message)
    cleaned = _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{_MASKED}", cleaned)
    cleaned = _BLOB.sub(_MASKED, cleaned)
    if len(cleaned) > MAX_MESSAGE:
        cleaned = cleaned[: MAX_MESSAGE - 3] + "..."
    return cleaned


@dataclass(frozen=True)
class _Key:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    type: str
    reason: str
    message: str


def _default_instance() -> str:
    return socket.gethostname()


class EventRecorder:
    """Records Events about objects into a store. Thread-safe; one per process (or per controller set).

    ``component`` is ``source.component`` and ``reportingComponent``; ``instance`` is ``source.host`` and
    ``reportingInstance`` (the host name by default).
    """

    def __init__(
        self,
        store: ObjectStore,
        component: str = DEFAULT_COMPONENT,
        instance: str | None = None,
        clock: Callable[[], datetime] = utcnow,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        self.store = store
        self.component = component
        self.instance = instance if instance is not None else _default_instance()
        self.clock = clock
        self.cache_size = cache_size
        self._cache: OrderedDict[_Key, str] = OrderedDict()
        self._lock = threading.Lock()

    # -- public ----------------------------------------------------------------------------------
    def normal(self, obj: KubeObject, reason: str, message: str) -> None:
        self.event(obj, NORMAL, reason, message)

    def warning(self, obj: KubeObject, reason: str, message: str) -> None:
        self.event(obj, WARNING, reason, message)

    def event(self, obj: KubeObject, event_type: EventType, reason: str, message: str) -> None:
        """Record (or count again) one event about ``obj``. Never raises."""
        try:
            self._record(obj, event_type, reason, scrub(message))
        except Exception as exc:  # an event is never worth failing a reconcile over
            _log.warning(
                "could not record an event",
                object=obj.ref(),
                reason=reason,
                event_type=event_type,
                error=type(exc).__name__,
            )

    # -- internals -------------------------------------------------------------------------------
    def _record(self, obj: KubeObject, event_type: EventType, reason: str, message: str) -> None:
        key = _Key(
            obj.api_version or obj.API_VERSION,
            obj.kind or obj.KIND,
            obj.metadata.namespace or ("" if not obj.NAMESPACED else "default"),
            obj.metadata.name,
            obj.metadata.uid or "",
            event_type,
            reason,
            message,
        )
        with self._lock:
            known = self._cache.get(key)
            if known is not None:
                self._cache.move_to_end(key)
        if known is not None and self._count_again(key, known):
            return
        name = self._create(obj, key)
        with self._lock:
            self._cache[key] = name
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _event_namespace(self, key: _Key) -> str:
        return key.namespace or "default"

    def _count_again(self, key: _Key, name: str) -> bool:
        """Bump the stored event's count; False when it is gone (expired, deleted): write a new one."""
        namespace = self._event_namespace(key)
        for _ in range(_NAME_ATTEMPTS):
            try:
                current = self.store.get(Event, name, namespace)
            except NotFound:
                return False
            current.count = (current.count or 1) + 1
            current.last_timestamp = self.clock()
            try:
                self.store.update(current)
                return True
            except NotFound:
                return False
            except Conflict:
                continue
        return True  # someone else keeps writing it: this occurrence is counted by their write

    def _create(self, obj: KubeObject, key: _Key) -> str:
        now = self.clock()
        namespace = self._event_namespace(key)
        for attempt in range(_NAME_ATTEMPTS):
            name = f"{key.name}.{time.time_ns() + attempt:x}"
            event = Event(
                metadata=ObjectMeta(name=name, namespace=namespace),
                involved_object=FullObjectReference(
                    api_version=key.api_version,
                    kind=key.kind,
                    name=key.name,
                    namespace=key.namespace or None,
                    uid=key.uid or None,
                    resource_version=obj.metadata.resource_version,
                ),
                reason=key.reason,
                message=key.message,
                type=key.type,
                source=EventSource(component=self.component, host=self.instance or None),
                first_timestamp=now,
                last_timestamp=now,
                count=1,
                reporting_component=self.component,
                reporting_instance=self.instance or None,
            )
            try:
                self.store.create(event)
                return name
            except AlreadyExists:
                continue
        raise AlreadyExists(f"no free event name for {obj.ref()} after {_NAME_ATTEMPTS} attempts")


def events_for(store: ObjectStore, obj: KubeObject) -> list[Event]:
    """The events recorded about ``obj`` (by uid when it has one), oldest first: what ``kubectl describe``
    lists."""
    namespace = obj.metadata.namespace or "default"
    selector = f"involvedObject.name={obj.metadata.name},involvedObject.kind={obj.kind or obj.KIND}"
    if obj.metadata.uid:
        selector += f",involvedObject.uid={obj.metadata.uid}"
    found = store.list(Event, namespace=namespace, field_selector=selector)
    epoch = datetime.min.replace(tzinfo=UTC)
    return sorted(found, key=lambda e: (e.first_timestamp or epoch, e.metadata.name))


__all__ = ["NORMAL", "WARNING", "EventRecorder", "EventType", "events_for", "scrub"]
