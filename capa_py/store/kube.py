"""The object store over a Kubernetes API server (a management cluster, or ``capa serve``).

:class:`KubeStore` implements :class:`~capa_py.store.protocol.ObjectStore` with the official ``kubernetes``
client: ``CustomObjectsApi`` for custom kinds (their ``/status`` subresource for ``update_status``),
``CoreV1Api`` for Secret, Namespace, ConfigMap and Event, ``CoordinationV1Api`` for Lease and
``ApiextensionsV1Api`` for CustomResourceDefinition. Responses are read as the server's JSON (never through
the client's typed models, which drop fields they do not know) and validated into the registry's models.

Its semantics are the SQLite store's, including where a real API server differs by default:

* an update without ``resourceVersion`` is unconditional (custom resources refuse that on PUT, so the store
  reads the current version and retries on a race);
* field selectors work on any field, on ``metadata.controller`` and on ``metadata.ownerReferences.uid``
  (the server filters by labels and by the fields it knows: ``metadata.name``, ``metadata.namespace`` and
  an Event's ``involvedObject`` fields; the store by every field);
* every API error is mapped once, in :func:`store_error`, onto :mod:`capa_py.store.errors`.

How one kind is reached, what an API failure means and how the client is made live in
:mod:`capa_py.store.kube_endpoint`; watches in :mod:`capa_py.store.kube_watch`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import cache, partial
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.logging import get_logger
from capa_py.manifests.schema import prune, structural_schema
from capa_py.store.admission import check_registered, validated_document
from capa_py.store.errors import Conflict, Invalid, ObjectRef, StoreError
from capa_py.store.kube_endpoint import (
    CONNECTION_POOL_SIZE,
    REQUEST_TIMEOUT,
    Endpoint,
    client_from_environment,
    client_from_kubeconfig,
    store_error,
)
from capa_py.store.protocol import ObjectList, Propagation, T, WatchEvent
from capa_py.store.selectors import FieldSelector, LabelSelector

__all__ = [
    "CONNECTION_POOL_SIZE",
    "IN_CLUSTER_TOKEN",
    "LIST_PAGE",
    "REQUEST_TIMEOUT",
    "UPDATE_ATTEMPTS",
    "Endpoint",
    "KubeStore",
    "server_field_selector",
    "store_error",
]

UPDATE_ATTEMPTS = 10
LIST_PAGE = 500
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

_log = get_logger("store.kube")


@cache
def _schema_properties(kind: type[KubeObject]) -> dict[str, Any]:
    """The top-level fields of ``kind``'s CRD schema (``spec``, ``status``, ...)."""
    properties: dict[str, Any] = structural_schema(kind).get("properties", {})
    return properties


# managedFields are the server's business: objects read from it do not carry them back.
_META_FIELDS = {field.alias or name for name, field in ObjectMeta.model_fields.items()} - {"managedFields"}

# The field selectors a Kubernetes API server answers itself: name and namespace for every kind, and for
# Events the fields ``kubectl describe`` selects by. A list sends those (so a list by name moves one object,
# not the kind) and filters by the rest, and again by all of them, here.
_SERVER_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_SERVER_EVENT_FIELDS = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "reason",
        "type",
    }
)


def server_field_selector(kind: type[KubeObject], fields: FieldSelector) -> str | None:
    """The part of ``fields`` the API server can evaluate, in its syntax, or None."""
    served = _SERVER_FIELDS | (
        _SERVER_EVENT_FIELDS if (kind.API_VERSION, kind.KIND) == ("v1", "Event") else set()
    )
    parts = [
        f"{path.lstrip('.')}{'=' if equal else '!='}{value}"
        for path, equal, value in fields.requirements
        if path.lstrip(".") in served
    ]
    return ",".join(parts) or None


def _what(kind: type[KubeObject], name: str, namespace: str | None) -> ObjectRef:
    return ObjectRef.of(kind.KIND, name, namespace)


class KubeStore:
    """An :class:`~capa_py.store.protocol.ObjectStore` on a Kubernetes API server."""

    def __init__(
        self,
        api_client: client.ApiClient,
        registry: KindRegistry = REGISTRY,
        watch_connection_seconds: int = 300,
        watch_reconnect_attempts: int = 8,
    ) -> None:
        """``watch_connection_seconds``: the longest one watch connection lasts (the server ends it and the
        watch opens the next from where it was); ``watch_reconnect_attempts``: how many times in a row a
        watch tries to reconnect (backing off from 0.1 s, doubling: 8 attempts span about 25 s) before it
        raises Unavailable."""
        self.api = api_client
        self.watch_connection_seconds = watch_connection_seconds
        self.watch_reconnect_attempts = watch_reconnect_attempts
        self.registry = registry
        self.server = str(api_client.configuration.host)
        self._endpoints: dict[type[KubeObject], Endpoint] = {}
        self._uid: str | None = None
        self._lock = threading.Lock()
        self._watches: set[Any] = set()
        self._closed = False

    # -- construction -----------------------------------------------------------------------------------
    @classmethod
    def from_kubeconfig(
        cls, path: str | Path, context: str | None = None, registry: KindRegistry = REGISTRY
    ) -> KubeStore:
        """The store of the cluster a kubeconfig file names (its current context, or ``context``)."""
        return cls(client_from_kubeconfig(path, context), registry)

    @classmethod
    def from_environment(cls, registry: KindRegistry = REGISTRY) -> KubeStore:
        """The default chain: ``KUBECONFIG`` (the first file it lists), ``~/.kube/config``, then the
        in-cluster service account."""
        return cls(client_from_environment(), registry)

    def check(self) -> None:
        """Ask the server for its version (allowed to everyone): Unavailable when it does not answer."""
        try:
            client.VersionApi(self.api).get_code(_request_timeout=10.0)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise store_error(exc, "version", self.server) from exc

    @property
    def uid(self) -> str:
        """The identity every client of this API server shares (the ``capa-py-system/capa-py-store``
        ConfigMap, recorded on first use)."""
        if self._uid is None:
            from capa_py.store.identity import shared_identity

            self._uid = shared_identity(self)
        return self._uid

    def close(self) -> None:
        """Close open watches and the client's connections; closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            streams = list(self._watches)
        for stream in streams:
            stream.abort()
        self.api.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> KubeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ------------------------------------------------------------------------------------------
    def endpoint(self, kind: type[KubeObject]) -> Endpoint:
        check_registered(self.registry, kind)
        found = self._endpoints.get(kind)
        if found is None:
            found = self._endpoints[kind] = Endpoint(self.api, kind)
        return found

    @staticmethod
    def _namespace(kind: type[KubeObject], namespace: str | None) -> str | None:
        if not kind.NAMESPACED:
            return None
        return namespace or "default"

    def store_error_of(self, exc: Exception, what: str | ObjectRef) -> StoreError:
        return store_error(exc, what, self.server)

    def _request(self, what: str | ObjectRef, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return call()
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            raise store_error(exc, what, self.server) from exc

    def to_model(self, kind: type[T], doc: dict[str, Any]) -> T:
        """An object as the server sent it, as the registry's model (fields the models do not keep, such
        as ``managedFields``, dropped)."""
        doc = {**doc, "apiVersion": doc.get("apiVersion") or kind.API_VERSION}
        doc["kind"] = doc.get("kind") or kind.KIND
        meta = doc.get("metadata") or {}
        doc["metadata"] = {k: v for k, v in meta.items() if k in _META_FIELDS}
        unknown: list[str] = []
        properties = _schema_properties(kind)
        for key in set(doc) & set(properties) - {"metadata"}:
            doc[key] = prune(doc[key], properties[key], key, unknown)
        if unknown:
            # Another writer's fields (Cluster API core writes Cluster and Machine with fields this version's
            # models do not have): read past them as a Go client does; capa-py never writes those kinds back
            # when Cluster API core owns them.
            _log.debug("unknown fields ignored", kind=kind.KIND, fields=unknown[:20])
        return kind.model_validate(doc)

    @property
    def closed(self) -> bool:
        return self._closed

    def track(self, stream: Any) -> bool:
        """Register an open watch stream so that :meth:`close` ends it; False once closed."""
        with self._lock:
            if self._closed:
                return False
            self._watches.add(stream)
            return True

    def untrack(self, stream: Any) -> None:
        with self._lock:
            self._watches.discard(stream)

    # -- the protocol -------------------------------------------------------------------------------------
    def create(self, obj: T) -> T:
        kind = type(obj)
        endpoint = self.endpoint(kind)
        if kind.HAS_STATUS and "status" in kind.model_fields:
            # The status subresource: a create never sets status (the server drops it; so does this check).
            obj = obj.model_copy(deep=True)
            obj.__dict__["status"] = kind.model_fields["status"].get_default(call_default_factory=True)
        body = validated_document(self.registry, obj)
        meta = body["metadata"]
        for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp"):
            meta.pop(key, None)
        meta.pop("deletionGracePeriodSeconds", None)
        meta.pop("managedFields", None)  # the server records its own (an object moved here may carry some)
        namespace = self._namespace(kind, obj.metadata.namespace)
        if namespace is not None:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and not meta.get("generateName"):
            raise Invalid("required", "metadata.name")
        # A create's 404 is about something else missing (its namespace), not the object: a plain name.
        what = str(_what(kind, meta.get("name") or f"{meta.get('generateName')}*", namespace))
        return self.to_model(kind, self._request(what, lambda: endpoint.create(namespace, body)))

    def get(self, kind: type[T], name: str, namespace: str | None = None) -> T:
        endpoint = self.endpoint(kind)
        ns = self._namespace(kind, namespace)
        doc = self._request(_what(kind, name, ns), lambda: endpoint.read(ns, name))
        return self.to_model(kind, doc)

    def list(
        self,
        kind: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList[T]:
        endpoint = self.endpoint(kind)
        labels = LabelSelector.parse(label_selector)
        fields = FieldSelector.parse(field_selector)
        ns = namespace if kind.NAMESPACED else None
        query: dict[str, Any] = {"limit": LIST_PAGE}
        if labels.requirements:
            query["label_selector"] = str(labels)
        if server_fields := server_field_selector(kind, fields):
            query["field_selector"] = server_fields
        docs: list[dict[str, Any]] = []
        resource_version = ""
        while True:
            page = self._request(f"{kind.KIND} list", partial(endpoint.list, ns, **query))
            docs.extend(page.get("items") or [])
            page_meta = page.get("metadata") or {}
            resource_version = resource_version or str(page_meta.get("resourceVersion") or "")
            token = page_meta.get("continue")
            if not token:
                break
            query["_continue"] = token
        items = [self.to_model(kind, doc) for doc in docs]
        items = [o for o in items if fields.matches(o.to_dict())]
        items.sort(key=lambda o: (o.metadata.namespace or "", o.metadata.name))
        return ObjectList(items, resource_version)

    def current_resource_version(self, kind: type[KubeObject] | None = None) -> str:
        """The server's current resourceVersion: what a list (of ``kind``, Namespaces by default) reads at."""
        from capa_py.api.core import Namespace

        endpoint = self.endpoint(kind or Namespace)
        page = self._request("list", lambda: endpoint.list(None, limit=1))
        return str((page.get("metadata") or {}).get("resourceVersion") or "")

    def _replace(self, obj: T, status: bool) -> T:
        kind = type(obj)
        endpoint = self.endpoint(kind)
        body = validated_document(self.registry, obj)
        body["metadata"].pop("managedFields", None)  # sent, they would replace the server's own
        ns = self._namespace(kind, obj.metadata.namespace)
        name = obj.metadata.name
        what = _what(kind, name, ns)
        if ns is not None:
            body["metadata"]["namespace"] = ns
        if obj.metadata.resource_version:
            return self.to_model(kind, self._request(what, lambda: endpoint.replace(ns, name, body, status)))
        # Unconditional: write over whatever version is current, again if another writer got in between.
        for attempt in range(UPDATE_ATTEMPTS):
            current = self._request(what, lambda: endpoint.read(ns, name))
            current_meta = current.get("metadata") or {}
            if obj.metadata.uid and obj.metadata.uid != current_meta.get("uid"):
                raise Conflict(f"{what}: uid precondition failed (the object was re-created)")
            body["metadata"]["resourceVersion"] = current_meta.get("resourceVersion")
            try:
                return self.to_model(
                    kind, self._request(what, lambda: endpoint.replace(ns, name, body, status))
                )
            except Conflict:
                if attempt == UPDATE_ATTEMPTS - 1:
                    raise
                _log.debug("unconditional update raced another writer; again", object=str(what))
        raise AssertionError("unreachable")

    def update(self, obj: T) -> T:
        return self._replace(obj, status=False)

    def update_status(self, obj: T) -> T:
        kind = type(obj)
        if not kind.HAS_STATUS:
            raise Invalid(f"{kind.KIND} has no status subresource", "status")
        return self._replace(obj, status=True)

    def delete(
        self,
        kind: type[T],
        name: str,
        namespace: str | None = None,
        propagation: Propagation = "Background",
        resource_version: str | None = None,
    ) -> T | None:
        """Delete (or mark for deletion) an object; returns its last state. The API server answers a delete
        that removes the object at once with a Status, not the object (for custom resources too): the
        object as read just before stands in for it (with the resourceVersion it had then)."""
        endpoint = self.endpoint(kind)
        ns = self._namespace(kind, namespace)
        what = _what(kind, name, ns)
        before = self._request(what, lambda: endpoint.read(ns, name))
        answer = self._request(what, lambda: endpoint.delete(ns, name, propagation, resource_version))
        if answer.get("kind") == "Status":
            return None if before is None else self.to_model(kind, before)
        return self.to_model(kind, answer)

    def watch(
        self,
        kind: type[T],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent[T]]:
        """Events for one kind after ``resource_version`` (or the current objects as ADDED, then events);
        see :mod:`capa_py.store.kube_watch` for how it survives timeouts and dropped connections."""
        from capa_py.store.kube_watch import follow

        return follow(self, kind, namespace, resource_version, label_selector, timeout, stop)
