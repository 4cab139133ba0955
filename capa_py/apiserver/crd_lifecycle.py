"""What the API server's CRD controllers do to a CRD: establish it (``status.acceptedNames``,
``storedVersions``, the conditions ``NamesAccepted`` and ``Established``), and, once ``DELETE`` has added the
``customresourcecleanup.apiextensions.k8s.io`` finalizer, mark it ``Terminating``, delete its objects and
let it go when none is left.
"""

from __future__ import annotations

import contextlib
from typing import Any

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.custom_resource import CustomResource
from capa_py.api.meta import utcnow
from capa_py.apiserver.crd_versions import Names
from capa_py.logging import get_logger
from capa_py.store.errors import NotFound
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.protocol import ObjectStore

CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"

_log = get_logger("apiserver.crds")


def _condition(kind: str, reason: str, message: str, previous: list[dict[str, Any]]) -> dict[str, Any]:
    old = next((c for c in previous if c.get("type") == kind), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == "True" else None
    return {
        "type": kind,
        "status": "True",
        "lastTransitionTime": since or utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reason": reason,
        "message": message,
    }


def establish(store: ObjectStore, crd: CustomResourceDefinition) -> None:
    """Bring a CRD's accepted names, stored versions and conditions up to date (written only if changed)."""
    status = crd.status
    names = Names.of(crd.spec.names.model_dump(by_alias=True, exclude_none=True))
    conditions = [c for c in status.conditions if c.get("type") not in ("NamesAccepted", "Established")]
    wanted = [
        _condition("NamesAccepted", "NoConflicts", "no conflicts found", status.conditions),
        _condition(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
            status.conditions,
        ),
        *conditions,
    ]
    stored = list(status.stored_versions)
    storage = next((str(v.get("name")) for v in crd.spec.versions if v.get("storage")), None)
    if storage and storage not in stored:
        stored.append(storage)
    if (wanted, names.accepted(), stored) == (
        status.conditions,
        status.accepted_names,
        status.stored_versions,
    ):
        return
    updated = crd.model_copy(deep=True)
    updated.status.conditions = wanted
    updated.status.accepted_names = names.accepted()
    updated.status.stored_versions = stored
    store.update_status(updated)
    _log.info("custom resource definition established", name=crd.metadata.name)


def terminating_condition(old: dict[str, Any] | None, reason: str, message: str) -> dict[str, Any]:
    """The ``Terminating`` condition with ``reason``, keeping ``old``'s transition time."""
    return {
        "type": "Terminating",
        "status": "True",
        "lastTransitionTime": (old or {}).get("lastTransitionTime")
        or utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reason": reason,
        "message": message,
    }


def set_terminating(crd: CustomResourceDefinition, condition: dict[str, Any]) -> None:
    """Put ``condition`` in place of the CRD's ``Terminating`` condition (in memory)."""
    others = [c for c in crd.status.conditions if c.get("type") != condition["type"]]
    crd.status.conditions = [*others, condition]


def mark_terminating(
    store: ObjectStore, crd: CustomResourceDefinition, reason: str, message: str
) -> CustomResourceDefinition:
    """The CRD with its ``Terminating`` condition for ``reason`` (written when the reason changes)."""
    old = next((c for c in crd.status.conditions if c.get("type") == "Terminating"), None)
    if old is not None and old.get("reason") == reason:
        return crd
    condition = terminating_condition(old, reason, message)
    return retry_on_conflict(store, crd, lambda current: set_terminating(current, condition), status=True)


def clean_up(store: ObjectStore, crd: CustomResourceDefinition, model: type[CustomResource] | None) -> None:
    """Delete the objects (of ``model``) of a CRD being deleted; once none is left, let the CRD go."""
    crd = mark_terminating(store, crd, "InstanceDeletionInProgress", "CustomResource deletion is in progress")
    left = 0
    if model is not None:
        for obj in store.list(model):
            left += 1
            if not obj.being_deleted:
                with contextlib.suppress(NotFound):
                    if store.delete(model, obj.metadata.name, obj.metadata.namespace) is None:
                        left -= 1
    if left:
        return
    done = crd.model_copy(deep=True)
    done.metadata.finalizers = [f for f in done.metadata.finalizers if f != CLEANUP_FINALIZER]
    store.update(done)
    _log.info("custom resource definition deleted with its objects", name=crd.metadata.name)


def with_cleanup_finalizer(crd: CustomResourceDefinition) -> None:
    if CLEANUP_FINALIZER not in crd.metadata.finalizers:
        crd.metadata.finalizers.append(CLEANUP_FINALIZER)
