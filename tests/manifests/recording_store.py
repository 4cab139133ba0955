"""A store that records which API requests its callers make, as RBAC sees them."""

from __future__ import annotations

import contextlib
from typing import Any

from capa_py.api.meta import KubeObject
from capa_py.api.registry import REGISTRY
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore


def _group(model: type[KubeObject]) -> str:
    return model.API_VERSION.rpartition("/")[0]


class RecordingStore:
    """Delegates to a real store; records ``(group, resource, verb)`` for every request made through it.

    A status write is the ``<plural>/status`` subresource. A create or update that sets an owner reference
    blocking its owner's deletion also needs ``update`` on the owner's ``<plural>/finalizers``, and an update
    changing an object's owner references needs ``delete`` on it: the OwnerReferencesPermissionEnforcement
    admission plugin checks both within the write (``tests/realkube`` shows it on a real API server).
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

    def _owner_checks(self, obj: Any, before: Any) -> None:
        """What the owner-references admission plugin asks of a write turning ``before`` into ``obj``."""
        old = {} if before is None else {r.uid: r for r in before.metadata.owner_references}
        for ref in obj.metadata.owner_references:
            if ref.block_owner_deletion and not (ref.uid in old and old[ref.uid].block_owner_deletion):
                self._record(REGISTRY.for_gvk(ref.api_version, ref.kind), "update", "finalizers")
        if before is not None and old != {r.uid: r for r in obj.metadata.owner_references}:
            self._record(type(obj), "delete")

    def create(self, obj: Any) -> Any:
        self._record(type(obj), "create")
        self._owner_checks(obj, None)
        return self.inner.create(obj)

    def get(self, kind: Any, name: str, namespace: str | None = None) -> Any:
        self._record(kind, "get")
        return self.inner.get(kind, name, namespace)

    def list(self, kind: Any, *args: Any, **kwargs: Any) -> Any:
        self._record(kind, "list")
        return self.inner.list(kind, *args, **kwargs)

    def update(self, obj: Any) -> Any:
        self._record(type(obj), "update")
        with contextlib.suppress(NotFound):
            self._owner_checks(obj, self.inner.get(type(obj), obj.metadata.name, obj.metadata.namespace))
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
