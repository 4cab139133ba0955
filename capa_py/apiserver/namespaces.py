"""The Namespaces the API server makes for itself: ``default``, ``kube-node-lease``, ``kube-public`` and
``kube-system``, Active, each labelled ``kubernetes.io/metadata.name`` and carrying the ``kubernetes``
finalizer, as on a real cluster. ``capa serve`` creates the missing ones when it starts serving a store, so a
client that waits for ``default`` (kopf does) finds it. Several processes may serve one store: whichever
creates a Namespace first wins and the others leave it as it is.
"""

from __future__ import annotations

from capa_py.api.core import Namespace
from capa_py.logging import get_logger
from capa_py.store.errors import AlreadyExists
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore

SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
NAME_LABEL = "kubernetes.io/metadata.name"

_log = get_logger("apiserver.namespaces")


def system_namespace(name: str) -> Namespace:
    return Namespace.model_validate(
        {
            "metadata": {"name": name, "labels": {NAME_LABEL: name}},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
    )


def ensure_system_namespaces(store: ObjectStore) -> list[str]:
    """Create the system Namespaces the store lacks; the names created (none when all exist)."""
    created: list[str] = []
    for name in SYSTEM_NAMESPACES:
        if get_or_none(store, Namespace, name, None) is not None:
            continue
        wanted = system_namespace(name)
        try:
            store.create(wanted)  # Active and labelled, as every new Namespace is
        except AlreadyExists:
            continue  # another process serving the same store got there first
        created.append(name)
    if created:
        _log.info("system namespaces created", namespaces=created)
    return created
