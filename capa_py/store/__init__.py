"""The object store: one protocol with Kubernetes semantics, and its implementations.

Controllers only see :class:`ObjectStore`; :func:`open_store` picks the implementation from a location
(a SQLite file path today; the Kubernetes API implementation plugs in behind the same protocol).
"""

from pathlib import Path

from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.store.errors import AlreadyExists, Conflict, Expired, Invalid, NotFound, StoreError
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.protocol import ObjectList, ObjectStore, WatchEvent
from capa_py.store.selectors import FieldSelector, LabelSelector
from capa_py.store.sqlite import SQLiteStore

DEFAULT_STATE = Path(".capa") / "state.db"


def open_store(location: str | Path = DEFAULT_STATE, registry: KindRegistry = REGISTRY) -> SQLiteStore:
    """Open the store at ``location`` (a SQLite file path, created on first use)."""
    text = str(location)
    if text.startswith("sqlite://"):
        text = text.removeprefix("sqlite://")
    return SQLiteStore(text, registry=registry)


__all__ = [
    "DEFAULT_STATE",
    "AlreadyExists",
    "Conflict",
    "Expired",
    "FieldSelector",
    "Invalid",
    "LabelSelector",
    "NotFound",
    "ObjectList",
    "ObjectStore",
    "SQLiteStore",
    "StoreError",
    "WatchEvent",
    "open_store",
    "retry_on_conflict",
]
