"""``metadata.managedFields`` and server-side apply (``PATCH`` with ``application/apply-patch+yaml``).

Every write through ``capa serve`` records who set which fields, as the Kubernetes API server does:

* an apply (``fieldManager`` required, ``force=true`` to take fields from others) is an ``Apply`` entry
  owning exactly the fields of its configuration; it creates the object when there is none (201);
* a create, update or non-apply patch is an ``Update`` entry of the request's ``fieldManager`` (else the
  User-Agent up to its first ``/``: ``kubectl``, ``OpenAPI-Generator`` for the Python client) owning what it
  changed, per API version; writes to the status subresource are entries of their own
  (``subresource: status``); at most :data:`MAX_UPDATE_MANAGERS` update entries are kept, the oldest
  merged into ``ancient-changes``;
* a write may set ``managedFields`` itself: a non-empty valid list replaces them, an empty one (``[]`` or
  ``[{}]``) clears them, and an object without any is not tracked again until an apply (which first gives
  every existing field to ``before-first-apply``);
* ``kubectl apply --server-side`` (manager ``kubectl``) on an object last applied client-side may change the
  fields whose live value is still the one in the ``kubectl.kubernetes.io/last-applied-configuration``
  annotation without conflict, and keeps that annotation up to date.

The entries themselves are :mod:`~capa_py.apiserver.managed_fields`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from capa_py.api.meta import KubeObject
from capa_py.apiserver import apply as merging
from capa_py.apiserver import fieldsets
from capa_py.apiserver.apply import Conflicts, Ignored, ManagerKey
from capa_py.apiserver.fieldsets import EMPTY, FieldSet
from capa_py.apiserver.managed_fields import (
    ABSENT,
    ANCIENT,
    APPLY,
    BEFORE_FIRST_APPLY,
    KUBECTL,
    LAST_APPLIED,
    MAX_MANAGER_LENGTH,
    MAX_UPDATE_MANAGERS,
    UPDATE,
    Managed,
    ignored_fields,
    live_managed,
    manager_key,
    manager_name,
    set_managed,
    take_managed_fields,
    unchanged,
    without_managed,
)
from capa_py.apiserver.status import ApiError, Cause

__all__ = [
    "ABSENT",
    "ANCIENT",
    "APPLY",
    "BEFORE_FIRST_APPLY",
    "KUBECTL",
    "LAST_APPLIED",
    "MAX_MANAGER_LENGTH",
    "MAX_UPDATE_MANAGERS",
    "UPDATE",
    "Managed",
    "apply_config",
    "check_force",
    "conflict_error",
    "manager_key",
    "manager_name",
    "parse_config",
    "patch_options_invalid",
    "record_update",
    "set_managed",
    "strip_reset",
    "take_managed_fields",
    "unchanged",
]


def record_update(
    model: type[KubeObject],
    subresource: str | None,
    obj: KubeObject,
    given: Any,
    manager: str,
    old: KubeObject | None = None,
    sent: Any = None,
) -> None:
    """Set ``obj``'s managedFields for a create (``old`` None; the fields are those ``sent``) or an update
    of ``old`` by ``manager``; ``given`` is what the request said of managedFields."""
    if given is ABSENT or subresource is not None:
        # A subresource's writes never set managedFields.
        managed = live_managed(old)
    else:
        try:
            managed = Managed.decode(given)
        except ValueError:
            managed = live_managed(old)
        else:
            if not managed.fields and old is not None:
                set_managed(obj, None)  # cleared: not tracked again until an apply
                return
    if old is not None and not managed.fields:
        set_managed(obj, None)
        return
    before = without_managed(old.to_dict()) if old is not None else {}
    after = without_managed(obj.to_dict() if old is not None or not isinstance(sent, dict) else sent)
    version = model.API_VERSION
    me = manager_key(manager, UPDATE, version, subresource or "")
    structure = merging.structure_of(model)
    ignored = ignored_fields(model, subresource, before, after)
    fields, changed = merging.update(before, after, managed.fields, me, structure, ignored)
    managed.replace(fields, me, version, changed)
    managed.cap()
    set_managed(obj, managed)


# -- apply ----------------------------------------------------------------------------------------------


def patch_options_invalid(field: str, message: str, reason: str) -> ApiError:
    return ApiError(
        422,
        f'PatchOptions.meta.k8s.io "" is invalid: {field}: {message}',
        kind="PatchOptions",
        group="meta.k8s.io",
        causes=[Cause(field, message, reason)],
    )


def check_force(query: Mapping[str, str], content_type: str) -> None:
    """``force`` is for applies only (a 422 on any other patch, as the API server answers)."""
    if "force" in query and content_type != "application/apply-patch+yaml":
        raise patch_options_invalid(
            "force", "Forbidden: may not be specified for non-apply patch", "FieldValueForbidden"
        )


class _Loader(yaml.SafeLoader):
    """YAML as the API server reads it: a date or a time stays a string."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_config(raw: bytes) -> dict[str, Any]:
    """An apply body: JSON or YAML, one object."""
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        try:
            doc = yaml.load(raw.decode(), Loader=_Loader)  # a SafeLoader
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"error decoding YAML: {exc}") from exc
    if not isinstance(doc, dict):
        shown = "array" if isinstance(doc, list) else type(doc).__name__
        raise ApiError(
            400, f"error decoding YAML: cannot unmarshal {shown} into an object: an apply sends one object"
        )
    return doc


def _manager_text(key: ManagerKey, version: str) -> str:
    manager, operation, _, subresource = key
    text = json.dumps(manager)
    if subresource:
        text += f" with subresource {json.dumps(subresource)}"
    if operation == UPDATE:
        text += f" using {version}"
    return text


def conflict_error(conflicts: Conflicts, managed: Managed) -> ApiError:
    """The 409 of an apply that would change others' fields: one cause per field."""

    def identity(key: ManagerKey) -> str:
        manager, operation, version, subresource = key
        entry = {"manager": manager, "operation": operation}
        if operation == UPDATE:
            entry["apiVersion"] = managed.versions.get(key, version)
        if subresource:
            entry["subresource"] = subresource
        return json.dumps(entry, separators=(",", ":"))

    listed: list[tuple[str, str]] = []
    groups: list[tuple[str, list[str]]] = []
    for key in sorted(conflicts.by_manager, key=identity):
        who = _manager_text(key, managed.versions.get(key, key[2]))
        paths = [fieldsets.path_string(p) for p in fieldsets.iterate(conflicts.by_manager[key])]
        groups.append((who, paths))
        listed += [(who, p) for p in paths]
    if len(listed) == 1:
        message = f"Apply failed with 1 conflict: conflict with {listed[0][0]}: {listed[0][1]}"
    else:
        lines = []
        for who, paths in groups:
            lines.append(f"conflicts with {who}:")
            lines += [f"- {p}" for p in paths]
        message = f"Apply failed with {len(listed)} conflicts: " + "\n".join(lines)
    causes = [Cause(path, f"conflict with {who}", "FieldManagerConflict") for who, path in listed]
    return ApiError(409, message, causes=causes)


def _allowed_by_last_applied(live: dict[str, Any], structure: merging.Structure) -> FieldSet:
    """Fields whose live value is still the one kubectl last applied client-side."""
    text = (live.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    if not text:
        return EMPTY
    try:
        last_applied = json.loads(text)
    except json.JSONDecodeError:
        return EMPTY
    if not isinstance(last_applied, dict):
        return EMPTY
    comparison = merging.compare(last_applied, live, structure)
    differing = comparison.added | comparison.removed | comparison.modified
    return frozenset(merging.field_set(last_applied, structure)) - differing


def _last_applied_text(config: dict[str, Any]) -> str:
    """The annotation's value as the API server writes it: the applied object without the annotation, as
    JSON with sorted keys, ending in a newline."""
    doc = json.loads(json.dumps(config))
    annotations = doc.get("metadata", {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
        if not annotations:
            doc["metadata"].pop("annotations")
    return fieldsets.canonical_json(doc) + "\n"


def strip_reset(model: type[KubeObject], subresource: str | None, config: dict[str, Any]) -> dict[str, Any]:
    """The configuration without what the endpoint does not write (``status`` on the main resource of a
    kind with a status subresource; everything but ``status`` and the object's identity on that
    subresource)."""
    if subresource == "status":
        meta = {k: v for k, v in config["metadata"].items() if k in ("name", "namespace", "resourceVersion")}
        kept = {k: v for k, v in config.items() if k in ("apiVersion", "kind", "status")}
        return {**kept, "metadata": meta}
    if model.HAS_STATUS:
        return {k: v for k, v in config.items() if k != "status"}
    return config


def apply_config(
    model: type[KubeObject],
    subresource: str | None,
    current: KubeObject | None,
    config: dict[str, Any],
    manager: str,
    force: bool,
) -> tuple[dict[str, Any], Managed]:
    """The object after ``manager`` applies ``config`` to ``current`` (None: it does not exist yet) and
    its managers; the 409 :class:`ApiError` listing the conflicts unless ``force``."""
    structure = merging.structure_of(model)
    live = without_managed(current.to_dict()) if current is not None else {}
    managed = live_managed(current)
    ignored = ignored_fields(model, subresource, live, config)
    version = model.API_VERSION
    if current is not None and not managed.fields:
        # An object no manager tracks yet: its fields so far belong to before-first-apply.
        first = manager_key(BEFORE_FIRST_APPLY, UPDATE, version, "")
        fields, _ = merging.update({}, live, {}, first, structure, ignored_fields(model, None))
        managed.replace(fields, first, version, changed=False)
    me = manager_key(manager, APPLY, "", subresource or "")
    merged, fields = _merge(live, config, managed, me, structure, ignored, force, manager)
    changed = merging.compare(live, merged, structure).without(ignored)
    object_changed = current is None or bool(changed.added or changed.removed or changed.modified)
    managed.replace(fields, me, version, object_changed)
    managed.cap()
    if manager == KUBECTL and LAST_APPLIED in (merged.get("metadata", {}).get("annotations") or {}):
        merged["metadata"]["annotations"][LAST_APPLIED] = _last_applied_text(config)
    return merged, managed


def _merge(
    live: dict[str, Any],
    config: dict[str, Any],
    managed: Managed,
    me: ManagerKey,
    structure: merging.Structure,
    ignored: Ignored,
    force: bool,
    manager: str,
) -> tuple[dict[str, Any], dict[ManagerKey, FieldSet]]:
    try:
        return merging.apply(live, config, managed.fields, me, structure, ignored, force)
    except Conflicts as conflicts:
        if manager != KUBECTL:
            raise conflict_error(conflicts, managed) from None
        # kubectl moving from client-side apply: fields still as last applied may change.
        allowed = _allowed_by_last_applied(live, structure)
        remaining = {k: v - allowed for k, v in conflicts.by_manager.items() if v - allowed}
        if remaining:
            raise conflict_error(Conflicts(remaining), managed) from None
        return merging.apply(live, config, managed.fields, me, structure, ignored, True)
