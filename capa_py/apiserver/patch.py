"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and, for Kubernetes' own kinds only,
strategic merge patch (:mod:`capa_py.apiserver.strategic`).

As the API server does, a custom resource refuses a strategic merge patch with 415 UnsupportedMediaType
(strategic merge needs patch metadata a CRD does not have): kubectl sends custom kinds a merge patch itself
(``apply``, ``edit``, ``label``), and ``kubectl patch`` without ``--type merge`` fails there as it fails on a
real cluster.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from capa_py.apiserver.status import ApiError
from capa_py.apiserver.strategic import check_directives, strategic_merge
from capa_py.manifests.crds import is_builtin_group

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
SUPPORTED = (MERGE, JSON_PATCH, STRATEGIC)
CUSTOM_LISTED = (JSON_PATCH, MERGE, APPLY)
"""The media types the API server names when it refuses a patch of a custom resource, in its order."""

_JSON_TYPES: dict[type, str] = {int: "number", float: "number", bool: "bool", str: "string", list: "array"}


def check_media_type(content_type: str, group: str) -> None:
    """A 415 for a patch ``content_type`` the kinds of ``group`` do not take, worded as the API server
    words it: for a built-in kind its router's generic message, for a custom kind the media types it takes
    (those of :data:`CUSTOM_LISTED` that capa serve applies)."""
    if is_builtin_group(group):
        if content_type not in SUPPORTED:
            raise ApiError(415, "415: Unsupported Media Type")
        return
    if content_type not in SUPPORTED or content_type == STRATEGIC:
        accepted = list(CUSTOM_LISTED)  # server-side apply is handled before this check
        raise ApiError(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(accepted),
        )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def apply_patch(content_type: str, document: dict[str, Any], patch: Any) -> dict[str, Any]:
    """The document with the patch applied; a patch that cannot apply is a 422 (json patch test
    failures, missing paths) or a 400 (a body of the wrong shape), as the API server answers."""
    if content_type in (MERGE, STRATEGIC):
        if not isinstance(patch, dict):
            raise ApiError(400, "a merge patch must be a JSON object")
        # check_media_type lets a strategic merge patch through only for Kubernetes' own kinds.
        if content_type == STRATEGIC:
            check_directives(patch)
            patched = strategic_merge(document, patch)
        else:
            patched = merge_patch(document, patch)
        assert isinstance(patched, dict)
        return patched
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise ApiError(400, "a JSON patch must be a JSON array of operations")
        for operation in patch:
            if not isinstance(operation, dict):
                # As the API server decodes the body: each operation must be an object (400, not 422).
                given = _JSON_TYPES.get(type(operation), "value")
                raise ApiError(400, f"error decoding patch: json: cannot unmarshal {given} into an operation")
        try:
            result = jsonpatch.JsonPatch(patch).apply(document)
        except jsonpatch.JsonPatchTestFailed as exc:
            raise ApiError(422, f"the test operation failed: {exc}") from exc
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ApiError(422, f"the JSON patch cannot be applied: {exc}") from exc
        if not isinstance(result, dict):
            raise ApiError(422, "the JSON patch must leave an object")
        return result
    raise ApiError(
        415,
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(SUPPORTED),
    )
