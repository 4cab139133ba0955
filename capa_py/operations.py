"""Library operations behind the CLI verbs, so the CLI stays a thin layer over calls.

``apply_objects`` has ``kubectl apply`` semantics for what capa-py manages: an object that does not exist is
created; one that exists gets the manifest's spec (and data), labels and annotations, keeping what
controllers own (status, finalizers, owner references). Callers validate every document first
(:func:`capa_py.api.load_manifests` is all-or-nothing), so a bad manifest changes nothing.

An object marked for deletion is never applied over (its finalizers are tearing down what the manifest
declares): :func:`being_deleted` finds such objects first, so the caller waits for the deletion to finish
and then creates them anew, or refuses; ``apply_objects`` raises :class:`BeingDeleted` for one it meets.

On the SQLite store ``apply_objects`` is one transaction: every object is stored, or (a failure, a full
disk, an interrupt) none is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.machine_images import image_source_issues
from capa_py.store.errors import AlreadyExists, Conflict, Invalid, NotFound
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.protocol import ObjectStore, atomic_of

ApplyOutcome = Literal["created", "configured", "unchanged"]


@dataclass(frozen=True)
class Applied:
    object: KubeObject
    outcome: ApplyOutcome


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_OWNED_ELSEWHERE = ("apiVersion", "kind", "metadata", "status")


def _manifest_doc(manifest: KubeObject) -> dict[str, Any]:
    """The fields the manifest sets, in wire form (what ``last-applied-configuration`` keeps)."""
    if isinstance(manifest, Secret):
        manifest = manifest.model_copy(deep=True)
        manifest.normalise()
    doc = manifest.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
    doc["apiVersion"], doc["kind"] = manifest.api_version, manifest.kind
    meta = doc.setdefault("metadata", {})
    for key in (
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "ownerReferences",
        "finalizers",
    ):
        meta.pop(key, None)
    meta.get("annotations", {}).pop(LAST_APPLIED, None)
    if isinstance(manifest, Secret) and manifest.data:
        doc["data"] = dict(manifest.data)
        doc.pop("stringData", None)
    return doc


def _three_way(current: Any, last: Any, wanted: Any) -> Any:
    """kubectl's client-side apply on JSON: set what the manifest sets, remove what it stopped setting,
    keep what others (controllers) set."""
    if not isinstance(wanted, dict) or not isinstance(current, dict):
        return wanted
    last = last if isinstance(last, dict) else {}
    merged = dict(current)
    for key in last:
        if key not in wanted:
            merged.pop(key, None)
    for key, value in wanted.items():
        merged[key] = _three_way(current.get(key), last.get(key), value)
    return merged


def merge_manifest(current: KubeObject, manifest: KubeObject) -> KubeObject:
    """The stored object with the manifest applied over it (status, finalizers, owners kept)."""
    wanted = _manifest_doc(manifest)
    current_doc = current.to_dict()
    last_text = current.metadata.annotations.get(LAST_APPLIED)
    last: dict[str, Any] = json.loads(last_text) if last_text else {}
    merged: dict[str, Any] = dict(current_doc)
    for key in set(current_doc) | set(wanted) | set(last):
        if key in _OWNED_ELSEWHERE:
            continue
        if key in wanted:
            merged[key] = _three_way(current_doc.get(key), last.get(key), wanted[key])
        elif key in last:
            merged.pop(key, None)
    meta = merged["metadata"]
    for field in ("labels", "annotations"):
        meta[field] = _three_way(
            current_doc["metadata"].get(field, {}),
            last.get("metadata", {}).get(field, {}),
            wanted.get("metadata", {}).get(field, {}),
        )
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(
        wanted, sort_keys=True, separators=(",", ":")
    )
    return type(current).model_validate(merged)


class BeingDeleted(Conflict):
    """The object is marked for deletion: wait for it to go, then create it again."""

    def __init__(self, obj: KubeObject) -> None:
        self.object = obj
        super().__init__(f"{obj.KIND.lower()}/{obj.name} is being deleted")


def _stored(store: ObjectStore, objects: Sequence[KubeObject]) -> Iterator[tuple[KubeObject, KubeObject]]:
    """(manifest, stored object) for each manifest whose object exists in the store."""
    for manifest in objects:
        try:
            yield manifest, store.get(type(manifest), manifest.metadata.name, manifest.metadata.namespace)
        except NotFound:
            continue


def being_deleted(store: ObjectStore, objects: Sequence[KubeObject]) -> list[KubeObject]:
    """The stored objects, among those named by ``objects``, that are marked for deletion."""
    return [current for _, current in _stored(store, objects) if current.being_deleted]


def refuse_immutable_changes(store: ObjectStore, objects: Sequence[KubeObject]) -> None:
    """Raise :class:`Invalid` naming every immutable field the manifests would change on a stored object,
    before anything is written (an object being deleted is not updated but made anew: nothing to check)."""
    problems: list[str] = []
    for manifest, current in _stored(store, objects):
        if current.being_deleted:
            continue
        merged = merge_manifest(current, manifest)
        problems += [f"{current.ref()}: {i.path}: {i.message}" for i in merged.immutable_issues(current)]
    if problems:
        raise Invalid("; ".join(problems))


def all_or_nothing(store: ObjectStore) -> AbstractContextManager[None]:
    """A block whose writes are one transaction where the store has them (SQLite), else a plain block."""
    atomic = atomic_of(store)
    return atomic() if atomic is not None else nullcontext()


def apply_objects(store: ObjectStore, objects: Sequence[KubeObject]) -> list[Applied]:
    """Create or update each object, in order (:class:`BeingDeleted` for one marked for deletion).
    Changes to immutable fields are refused first, for every object, so a refused apply writes nothing;
    on SQLite the objects are stored in one transaction, all or none."""
    with all_or_nothing(store):
        return _apply_each(store, objects)


def _apply_each(store: ObjectStore, objects: Sequence[KubeObject]) -> list[Applied]:
    refuse_immutable_changes(store, objects)
    missing_images = image_source_issues(store, objects)
    if missing_images:
        raise Invalid("; ".join(missing_images))
    results: list[Applied] = []
    for manifest in objects:
        kind = type(manifest)
        try:
            current = store.get(kind, manifest.metadata.name, manifest.metadata.namespace)
        except NotFound:
            first = manifest.model_copy(deep=True)
            first.metadata.annotations[LAST_APPLIED] = json.dumps(
                _manifest_doc(manifest), sort_keys=True, separators=(",", ":")
            )
            try:
                results.append(Applied(store.create(first), "created"))
                continue
            except AlreadyExists:
                # A concurrent apply created it since our read: apply over it like any existing object.
                current = store.get(kind, manifest.metadata.name, manifest.metadata.namespace)
        if current.being_deleted:
            raise BeingDeleted(current)
        merged = merge_manifest(current, manifest)
        if merged.to_dict() == current.to_dict():
            results.append(Applied(current, "unchanged"))
            continue

        def overlay(obj: KubeObject, manifest: KubeObject = manifest) -> None:
            fresh = merge_manifest(obj, manifest)
            for field in type(obj).model_fields:
                if field not in ("metadata", "status"):
                    setattr(obj, field, getattr(fresh, field))
            obj.metadata.labels = fresh.metadata.labels
            obj.metadata.annotations = fresh.metadata.annotations

        updated = retry_on_conflict(store, current, overlay)
        results.append(Applied(updated, "configured"))
    return results


def delete_objects(
    store: ObjectStore,
    objects: Sequence[KubeObject],
    ignore_not_found: bool = False,
    partial_ok: bool = False,
) -> list[tuple[KubeObject, KubeObject | None]]:
    """Delete each object (reverse manifest order, dependents before what they depend on).

    A missing object is :class:`NotFound` (kubectl's behaviour) unless ``ignore_not_found``, or unless
    ``partial_ok`` and some of ``objects`` are still stored: that is a re-run after a delete that did not
    finish (interrupted, or without waiting), and what is gone is already deleted. Missing objects come
    back as ``(object, None)``.
    """
    if partial_ok and not ignore_not_found:
        ignore_not_found = any(True for _ in _stored(store, objects))
    results: list[tuple[KubeObject, KubeObject | None]] = []
    for obj in reversed(objects):
        try:
            results.append((obj, store.delete(type(obj), obj.metadata.name, obj.metadata.namespace)))
        except NotFound:
            if not ignore_not_found:
                raise
            results.append((obj, None))
    return results
