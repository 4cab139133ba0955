"""Helpers every controller needs around optimistic concurrency."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from capa_py.api.meta import KubeObject
from capa_py.store.errors import Conflict, NotFound
from capa_py.store.protocol import ObjectStore

T = TypeVar("T", bound=KubeObject)


def retry_on_conflict(
    store: ObjectStore,
    obj: T,
    mutate: Callable[[T], None],
    status: bool = False,
    attempts: int = 5,
) -> T:
    """Apply ``mutate`` to the object and write it, re-reading and re-applying on ``Conflict``.

    ``mutate`` must be safe to run again on a fresh copy (it describes a change, not a value).
    """
    current = obj.model_copy(deep=True)
    for attempt in range(attempts):
        mutate(current)
        try:
            return store.update_status(current) if status else store.update(current)
        except Conflict:
            if attempt == attempts - 1:
                raise
            current = store.get(type(obj), obj.metadata.name, obj.metadata.namespace)
    raise AssertionError("unreachable")


def get_or_none(store: ObjectStore, kind: type[T], name: str, namespace: str | None) -> T | None:
    """The stored object, or None when it does not exist."""
    try:
        return store.get(kind, name, namespace)
    except NotFound:
        return None
