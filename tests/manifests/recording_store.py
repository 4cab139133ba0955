"""A store that records which API requests its callers make, as RBAC sees them."""

from __future__ import annotations

from typing import Any

from capa_py.api.meta import KubeObject
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore


def _group(model: type[KubeObject]) -> str:
    return model.API_VERSION.rpartition("/")[0]


class RecordingStore:
    """Delegates to a real store; records ``(group, resource, verb)`` for every request made through it.

    A status write is the ``<plural>/status`` subresource; an update that changes ``metadata.finalizers``
    also needs ``<plural>/finalizers`` (the API server checks it where owner references block deletion).
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.requests: set[tuple[str, str, str]] = set()

    def _record(self, model: type[KubeObject], verb: str, subresource: str = "") -> None:
        resource = model.PLURAL + (f"/{subresource}" if subresource else "")
        self.requests.add((_group(model), resource, verb))

    @property
    def uid(self) -> str:
        return self.inner.uid

    def create(self, obj: Any) -> Any:
        self._record(type(obj), "create")
        return self.inner.create(obj)

    def get(self, kind: Any, name: str, namespace: str | None = None) -> Any:
        self._record(kind, "get")
        return self.inner.get(kind, name, namespace)

    def list(self, kind: Any, *args: Any, **kwargs: Any) -> Any:
        self._record(kind, "list")
        return self.inner.list(kind, *args, **kwargs)

    def update(self, obj: Any) -> Any:
        self._record(type(obj), "update")
        try:
            stored = self.inner.get(type(obj), obj.metadata.name, obj.metadata.namespace)
            if stored.metadata.finalizers != obj.metadata.finalizers:
                self._record(type(obj), "update", "finalizers")
        except NotFound:
            pass
        return self.inner.update(obj)

    def update_status(self, obj: Any) -> Any:
        self._record(type(obj), "update", "status")
        return self.inner.update_status(obj)

    def delete(self, kind: Any, name: str, namespace: str | None = None, **kwargs: Any) -> Any:
        self._record(kind, "delete")
        return self.inner.delete(kind, name, namespace, **kwargs)

    def watch(self, kind: Any, *args: Any, **kwargs: Any) -> Any:
        self._record(kind, "watch")
        return self.inner.watch(kind, *args, **kwargs)

    def close(self) -> None:
        self.inner.close()
