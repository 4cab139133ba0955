"""The store's identity as an object: the ConfigMap ``capa-py-system/capa-py-store`` (``data.uid``).

Every AWS resource capa-py creates is tagged with the identity of the store its objects live in. A SQLite
file keeps its identity in its own table; a store reached over the Kubernetes API keeps it in this
ConfigMap, so every client of one API server shares it. ``capa serve`` publishes the SQLite file's identity
there at startup, so the file and its served form are one store with one identity.
"""

from __future__ import annotations

import contextlib
import uuid

from capa_py.api.core import ConfigMap, Namespace
from capa_py.logging import get_logger
from capa_py.store.errors import AlreadyExists, NotFound
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore

IDENTITY_NAMESPACE = "capa-py-system"
LEGACY_IDENTITY_NAMESPACE = "capa-system"
"""Where releases before capa-py took its own namespace kept the ConfigMap (Cluster API Provider AWS's
namespace): an identity found there is carried over, so the store keeps the identity its AWS resources are
tagged with."""
IDENTITY_NAME = "capa-py-store"
IDENTITY_KEY = "uid"

_log = get_logger("store.identity")


def identity_config_map(uid: str) -> ConfigMap:
    return ConfigMap.model_validate(
        {
            "metadata": {
                "name": IDENTITY_NAME,
                "namespace": IDENTITY_NAMESPACE,
                "labels": {"app.kubernetes.io/managed-by": "capa-py"},
            },
            "data": {IDENTITY_KEY: uid},
        }
    )


def _stored_uid(store: ObjectStore) -> str | None:
    found = get_or_none(store, ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE)
    return None if found is None else found.data.get(IDENTITY_KEY) or None


def _create_in_namespace(store: ObjectStore, config_map: ConfigMap) -> None:
    """Create the ConfigMap, creating its namespace first when the API server says it is missing."""
    try:
        store.create(config_map)
        return
    except NotFound:
        pass  # a real API server refuses objects in a namespace that does not exist
    with contextlib.suppress(AlreadyExists):
        store.create(Namespace.model_validate({"metadata": {"name": IDENTITY_NAMESPACE}}))
    store.create(config_map)


def shared_identity(store: ObjectStore) -> str:
    """The identity recorded in the store, recorded now (a new one) if there is none. Of several clients
    recording at once, one wins the create and every other reads the winner's."""
    found = _stored_uid(store)
    if found is not None:
        return found
    legacy = get_or_none(store, ConfigMap, IDENTITY_NAME, LEGACY_IDENTITY_NAMESPACE)
    carried = None if legacy is None else legacy.data.get(IDENTITY_KEY) or None
    proposed = carried or str(uuid.uuid4())
    try:
        _create_in_namespace(store, identity_config_map(proposed))
    except AlreadyExists:
        winner = _stored_uid(store)
        if winner is None:
            raise
        return winner
    if carried:
        _log.info("store identity carried over", store_uid=proposed, namespace=LEGACY_IDENTITY_NAMESPACE)
    else:
        _log.info("store identity created", store_uid=proposed)
    return proposed


def publish_identity(store: ObjectStore, uid: str) -> None:
    """Make the identity ConfigMap say ``uid`` (the identity of the store being served)."""
    current = get_or_none(store, ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE)
    if current is None:
        try:
            _create_in_namespace(store, identity_config_map(uid))
            return
        except AlreadyExists:
            current = store.get(ConfigMap, IDENTITY_NAME, IDENTITY_NAMESPACE)
    if current.data.get(IDENTITY_KEY) != uid:
        _log.warning(
            "identity ConfigMap disagreed with the store; rewritten",
            recorded=current.data.get(IDENTITY_KEY),
            store_uid=uid,
        )
        current.data[IDENTITY_KEY] = uid
        store.update(current)
