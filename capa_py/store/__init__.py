"""The object store: one protocol with Kubernetes semantics, and its implementations.

Controllers only see :class:`ObjectStore`; :func:`open_store` opens the SQLite file at a location, and
:class:`capa_py.store.kube.KubeStore` (imported from its module, as it loads the ``kubernetes`` client) is the
same protocol over a Kubernetes API server.
"""

from pathlib import Path

from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.defaults import DEFAULT_STATE
from capa_py.store.errors import (
    AlreadyExists,
    Conflict,
    Expired,
    Invalid,
    Missing,
    NotFound,
    StoreError,
    Unavailable,
)
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.protocol import ObjectList, ObjectStore, WatchEvent
from capa_py.store.selectors import FieldSelector, LabelSelector
from capa_py.store.sqlite import SQLiteStore


def open_store(
    location: str | Path = DEFAULT_STATE, registry: KindRegistry = REGISTRY, create: bool = True
) -> SQLiteStore:
    """Open the store at ``location`` (a SQLite file path, created on first use unless ``create=False``,
    which raises :class:`Missing` instead)."""
    text = str(location)
    if text.startswith("sqlite://"):
        text = text.removeprefix("sqlite://")
    return SQLiteStore(text, registry=registry, create=create)


__all__ = [
    "DEFAULT_STATE",
    "AlreadyExists",
    "Conflict",
    "Expired",
    "FieldSelector",
    "Invalid",
    "LabelSelector",
    "Missing",
    "NotFound",
    "ObjectList",
    "ObjectStore",
    "SQLiteStore",
    "StoreError",
    "Unavailable",
    "WatchEvent",
    "open_store",
    "retry_on_conflict",
]
