"""Strategic merge patch for Kubernetes' own kinds, as ``kubectl apply`` sends it for a Deployment or Service.

A JSON merge patch replaces lists whole; kubectl's strategic patches send only the list items that changed
(one container, keyed by its name) plus directives, so a merge patch would drop every container field the
patch leaves out. This module applies the parts kubectl uses:

* lists of objects merged by their merge key (``containers`` by ``name``, container ``ports`` by
  ``containerPort``, a Service's ``ports`` by ``port``, ``volumeMounts`` by ``mountPath``…; see
  :data:`MERGE_KEYS`), other lists replaced;
* ``metadata.finalizers`` merged as a set (its patch strategy is ``merge``);
* the directives ``$patch: replace|delete|merge`` (in an object or a list item), ``$setElementOrder/<list>``,
  ``$deleteFromPrimitiveList/<list>`` and ``$retainKeys``; no directive is ever stored.

Custom kinds keep merge-patch semantics (the API server does the same: it has no schema for them).
"""

from __future__ import annotations

import copy
from typing import Any

from capa_py.apiserver.status import ApiError

MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "conditions": "type",
    "ownerReferences": "uid",
    "secrets": "name",
    "webhooks": "name",
}
"""The merge key of each list field of the built-in kinds capa serve stores that is merged, by field name."""

PRIMITIVE_MERGED = frozenset({"finalizers"})
_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"


def merge_key(field: str, items: list[Any]) -> str | None:
    """The merge key of the list ``field`` holding ``items``; None for a list replaced whole."""
    if field == "ports":
        # A container's ports are keyed by containerPort, a Service's by port.
        return "containerPort" if any(isinstance(i, dict) and "containerPort" in i for i in items) else "port"
    return MERGE_KEYS.get(field)


PATCH_DIRECTIVES = ("replace", "merge", "delete")


def check_directives(patch: Any) -> None:
    """400 BadRequest for a directive of the wrong shape anywhere in the patch: a ``$patch`` that is not
    ``replace``, ``merge`` or ``delete``, a ``$retainKeys`` or ``$setElementOrder/<list>`` that is not a
    list (kube-apiserver answers the first two 500, the third 400; capa serve applied each as if absent)."""
    if isinstance(patch, list):
        for item in patch:
            check_directives(item)
        return
    if not isinstance(patch, dict):
        return
    directive = patch.get("$patch")
    if directive is not None and directive not in PATCH_DIRECTIVES:
        raise ApiError(400, f"unknown patch type: {directive} in a strategic merge patch")
    if "$retainKeys" in patch and not isinstance(patch["$retainKeys"], list):
        raise ApiError(400, "invalid patch format of retainKeys")
    for key, value in patch.items():
        if key.startswith(_ORDER) and not isinstance(value, list):
            raise ApiError(400, f"invalid patch format of {key}: a list is expected")
        check_directives(value)


def _strip(value: Any) -> Any:
    """A patch value with every directive removed (what is stored when nothing is there to merge with)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")]
    return copy.deepcopy(value)


def strategic_merge(target: Any, patch: Any) -> Any:
    """``target`` with the strategic merge ``patch`` applied."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip(patch)
    result: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = strategic_merge(result.get(key), value)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    for key, value in patch.items():
        if key.startswith(_DELETE_FROM) and isinstance(value, list):
            field = key[len(_DELETE_FROM) :]
            result[field] = [item for item in result.get(field, []) if item not in value]
        elif key.startswith(_ORDER) and isinstance(value, list):
            field = key[len(_ORDER) :]
            if isinstance(result.get(field), list):
                result[field] = _ordered(field, result[field], value)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(field: str, target: Any, patch: list[Any]) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if field in PRIMITIVE_MERGED:
        return current + [item for item in patch if item not in current]
    key = merge_key(field, [*current, *patch])
    if key is None or not all(isinstance(item, dict) for item in patch):
        return [_strip(item) for item in patch]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip(item) for item in patch if item.get("$patch") != "replace"]
    merged = copy.deepcopy(current)
    for item in patch:
        position = next(
            (
                i
                for i, existing in enumerate(merged)
                if isinstance(existing, dict) and existing.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                merged.pop(position)
        elif position is None:
            merged.append(_strip(item))
        else:
            merged[position] = strategic_merge(merged[position], item)
    return merged


def _ordered(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    """``items`` in the order the patch lists (by merge key, or by value for primitives); items the order
    does not name keep their place after those it does."""
    key = merge_key(field, items)

    def identity(item: Any) -> Any:
        return item.get(key) if key is not None and isinstance(item, dict) else item

    wanted = [identity(entry) for entry in order]
    named = sorted((i for i in items if identity(i) in wanted), key=lambda i: wanted.index(identity(i)))
    return named + [i for i in items if identity(i) not in wanted]
