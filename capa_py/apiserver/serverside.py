"""The apply endpoint: ``PATCH`` with ``Content-Type: application/apply-patch+yaml``.

The body is the applier's configuration (YAML or JSON); ``fieldManager`` is required, ``force=true`` takes
conflicting fields, ``dryRun=All`` writes nothing. The object is created when it does not exist (201);
ownership and conflicts are :mod:`capa_py.apiserver.fieldmanager`'s. The result is admitted as any write
is (the model's validation, semantic and immutable-field checks) and, when it changes nothing, not written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capa_py.apiserver import fieldmanager, resources
from capa_py.apiserver.status import ApiError
from capa_py.store.errors import StoreError
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore


def _check_config(target: resources.Target, config: dict[str, Any]) -> dict[str, Any]:
    api_version, kind = str(config.get("apiVersion") or ""), str(config.get("kind") or "")
    if (api_version, kind) != (target.model.API_VERSION, target.model.KIND):
        group, _, version = api_version.rpartition("/")
        raise ApiError(400, f"invalid object type: {group}/{version}, Kind={kind}")
    meta = config.get("metadata")
    meta = dict(meta) if isinstance(meta, dict) else {}
    if meta.get("managedFields") is not None:
        raise ApiError(400, "metadata.managedFields must be nil")
    name = meta.get("name")
    if name and name != target.name:
        raise ApiError(
            400, f"the name of the object ({name}) does not match the name on the URL ({target.name})"
        )
    return {**config, "metadata": meta}


def _not_found(target: resources.Target) -> ApiError:
    resource = f"{target.resource}.{target.group}" if target.group else target.resource
    return ApiError(
        404,
        f'{resource} "{target.name}" not found',
        name=target.name or "",
        kind=target.resource,
        group=target.group,
    )


def _modified(target: resources.Target) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {target.resource} "{target.name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        name=target.name or "",
        kind=target.resource,
        group=target.group,
    )


def apply_request(
    store: ObjectStore, target: resources.Target, raw: bytes, query: Mapping[str, str], dry_run: bool
) -> tuple[dict[str, Any], int]:
    """A server-side apply: the object and the status code (201 when it was created)."""
    manager = query.get("fieldManager") or ""
    if not manager:
        raise fieldmanager.patch_options_invalid(
            "fieldManager", "Required value: is required for apply patch", "FieldValueRequired"
        )
    force = query.get("force", "").lower() in ("1", "true")
    config = _check_config(target, fieldmanager.parse_config(raw))
    config = fieldmanager.strip_reset(target.model, target.subresource, config)
    pinned = config["metadata"].get("resourceVersion")
    for attempt in range(resources.PATCH_RETRIES):
        try:
            return _apply_once(store, target, config, manager, force, dry_run)
        except ApiError as exc:
            # A write that lost a race with another is tried again on the new object.
            lost_race = exc.reason in ("Conflict", "AlreadyExists") and not exc.causes and not pinned
            if not lost_race or attempt == resources.PATCH_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _apply_once(
    store: ObjectStore,
    target: resources.Target,
    config: dict[str, Any],
    manager: str,
    force: bool,
    dry_run: bool,
) -> tuple[dict[str, Any], int]:
    assert target.name is not None
    try:
        current = get_or_none(store, target.model, target.name, target.namespace)
    except StoreError as exc:
        raise target.api_error(exc) from exc
    if current is None and target.subresource is not None:
        raise _not_found(target)
    pinned = config["metadata"].get("resourceVersion")
    if current is not None and pinned and pinned != current.metadata.resource_version:
        raise _modified(target)
    merged, managed = fieldmanager.apply_config(
        target.model, target.subresource, current, config, manager, force
    )
    merged.setdefault("metadata", {})["name"] = target.name
    if current is None:
        obj = resources.admit(target, merged)
        resources._check_namespace(target, obj)
        fieldmanager.set_managed(obj, managed)
        try:
            if dry_run:
                if get_or_none(store, target.model, target.name, target.namespace) is not None:
                    raise ApiError(409, f'{target.resource} "{target.name}" already exists', "AlreadyExists")
                return resources._dry(target, obj), 201
            return target.render(store.create(obj)), 201
        except StoreError as exc:
            raise target.api_error(exc, target.name) from exc
    old = None if target.subresource == "status" else current
    obj = resources.admit(target, merged, old, current=current, dry_run=dry_run)
    resources._check_namespace(target, obj)
    fieldmanager.set_managed(obj, managed)
    obj.metadata.resource_version = current.metadata.resource_version
    if fieldmanager.unchanged(resources._dry(target, obj), target.render(current)):
        return target.render(current), 200
    return resources._write(store, target, obj, dry_run), 200
