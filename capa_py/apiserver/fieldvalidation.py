"""Field validation of writes (the ``fieldValidation`` query parameter), as the API server does it.

A body may hold fields the kind does not have (unknown fields) and the same key twice in one JSON object
(duplicate fields; the last one wins). What happens to them depends on ``fieldValidation``:

- ``Strict``: the write fails naming every such field, duplicates first, then unknown fields in path order
  (``strict decoding error: duplicate field "spec.region", unknown field "spec.foo"``); a create or update is
  a 400 BadRequest (``AWSCluster in version "v1beta2" cannot be handled as a AWSCluster: ...``), a patch a
  422 Invalid on the field ``patch`` whose value is the patched object;
- ``Warn``, or no parameter at all (the API server's default): unknown fields are dropped and the write
  succeeds with one ``Warning: 299 - "unknown field \\"spec.foo\\""`` response header per field;
- ``Ignore``: unknown fields are dropped silently.

Another value is a 422 on ``CreateOptions``/``UpdateOptions``/``PatchOptions``. Unknown fields are found as
the API server prunes a custom resource: against the kind's structural schema, the one ``capa manifests
crds`` puts in its CRD (:func:`capa_py.manifests.schema.structural_schema`, derived from the models), with
``metadata`` checked against ``ObjectMeta``'s fields. A status write is judged on the whole object, as the
API server does, so a status that carries a field the kind does not have (``status.kopf``) is stored
without it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from capa_py.api.meta import KubeObject
from capa_py.apiserver.status import ApiError, Cause
from capa_py.manifests.schema import JSONSchema, join_path, prune, structural_schema

Mode = Literal["Strict", "Warn", "Ignore"]
Operation = Literal["Create", "Update", "Patch"]
MODES: tuple[str, ...] = ("", "Ignore", "Strict", "Warn")

_STRING: JSONSchema = {"type": "string"}
_FREE: JSONSchema = {"x-kubernetes-preserve-unknown-fields": True}
_STRING_MAP: JSONSchema = {"type": "object", "additionalProperties": _STRING}
_OWNER_REFERENCE: JSONSchema = {
    "type": "object",
    "properties": {
        "apiVersion": _STRING,
        "kind": _STRING,
        "name": _STRING,
        "uid": _STRING,
        "controller": {"type": "boolean"},
        "blockOwnerDeletion": {"type": "boolean"},
    },
}
_MANAGED_FIELDS_ENTRY: JSONSchema = {
    "type": "object",
    "properties": {
        "manager": _STRING,
        "operation": _STRING,
        "apiVersion": _STRING,
        "time": _STRING,
        "fieldsType": _STRING,
        "fieldsV1": _FREE,
        "subresource": _STRING,
    },
}
OBJECT_META: JSONSchema = {
    "type": "object",
    "properties": {
        "name": _STRING,
        "generateName": _STRING,
        "namespace": _STRING,
        "selfLink": _STRING,
        "uid": _STRING,
        "resourceVersion": _STRING,
        "generation": {"type": "integer"},
        "creationTimestamp": _STRING,
        "deletionTimestamp": _STRING,
        "deletionGracePeriodSeconds": {"type": "integer"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "ownerReferences": {"type": "array", "items": _OWNER_REFERENCE},
        "finalizers": {"type": "array", "items": _STRING},
        "managedFields": {"type": "array", "items": _MANAGED_FIELDS_ENTRY},
    },
}
"""``metav1.ObjectMeta``'s fields: what a client may send in ``metadata`` without it being unknown."""

SERVER_OWNED_METADATA = ("selfLink", "managedFields")
"""ObjectMeta fields capa serve does not keep: dropped without a warning (the API server sets them)."""


@cache
def schema_of(model: type[KubeObject]) -> JSONSchema:
    """The structural schema fields are checked against: the CRD's, with ObjectMeta as ``metadata``."""
    schema = structural_schema(model)
    return {**schema, "properties": {**schema.get("properties", {}), "metadata": OBJECT_META}}


class _Object(dict[str, Any]):
    """A JSON object as parsed, remembering the keys it held more than once."""

    duplicates: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    seen: set[str] = set()
    obj.duplicates = []
    for key, _ in pairs:
        if key in seen and key not in obj.duplicates:
            obj.duplicates.append(key)
        seen.add(key)
    return obj


def _duplicate_paths(node: Any, path: str = "") -> list[str]:
    found: list[str] = []
    if isinstance(node, _Object):
        found += [join_path(path, key) for key in node.duplicates]
        for key, value in node.items():
            found += _duplicate_paths(value, join_path(path, key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += _duplicate_paths(item, f"{path}[{i}]")
    return found


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def decode_json(raw: bytes, object_pairs_hook: Any = None) -> Any:
    """A request's JSON body; 400 BadRequest when it is not JSON or nests too deeply to decode (before, a
    deep body was answered 500 RecursionError)."""
    try:
        return json.loads(raw or b"null", object_pairs_hook=object_pairs_hook)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "the request body is not JSON: it exceeds the maximum nesting depth") from exc


@dataclass
class FieldValidation:
    """One write's field validation: its mode, the duplicate fields its body held, and the warnings the
    response carries once :meth:`check` has run."""

    mode: Mode = "Warn"
    operation: Operation = "Create"
    duplicates: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, value: str | None, operation: Operation) -> FieldValidation:
        """The mode the ``fieldValidation`` parameter names (Warn when absent or empty), or the 422 the
        API server answers another value with."""
        if value is None or value == "":
            return cls("Warn", operation)
        if value not in MODES:
            supported = ", ".join(_quoted(m) for m in MODES)
            message = f'Unsupported value: "{value}": supported values: {supported}'
            raise ApiError(
                422,
                f'{operation}Options.meta.k8s.io "" is invalid: fieldValidation: {message}',
                kind=f"{operation}Options",
                group="meta.k8s.io",
                causes=[Cause("fieldValidation", message, "FieldValueNotSupported")],
            )
        mode: Mode = "Strict" if value == "Strict" else "Ignore" if value == "Ignore" else "Warn"
        return cls(mode, operation)

    def parse(self, raw: bytes) -> Any:
        """The JSON body, its duplicate fields recorded (the last value of each is kept)."""
        parsed = decode_json(raw, object_pairs_hook=_pairs)
        self.duplicates = _duplicate_paths(parsed)
        return _plain(parsed)

    def check(self, model: type[KubeObject], doc: dict[str, Any]) -> dict[str, Any]:
        """``doc`` without its unknown fields; a Strict write with unknown or duplicate fields fails, a
        Warn one gets a warning for each."""
        unknown: list[str] = []
        pruned = prune(doc, schema_of(model), "", unknown)
        self.report(model, doc, unknown)
        meta = pruned.get("metadata")
        if isinstance(meta, dict):
            pruned["metadata"] = {k: v for k, v in meta.items() if k not in SERVER_OWNED_METADATA}
        return dict(pruned)

    def report(self, model: type[KubeObject], doc: dict[str, Any], unknown: list[str]) -> None:
        """Judge the duplicate fields and the ``unknown`` ones (already pruned from ``doc``, by
        :meth:`check` or by a CRD-defined kind's schema) as the mode says: Strict fails, Warn warns."""
        problems = [f'duplicate field "{p}"' for p in self.duplicates]
        problems += [f'unknown field "{p}"' for p in sorted(unknown)]
        if problems and self.mode == "Strict":
            raise self._strict_error(model, doc, ", ".join(problems))
        self.warnings = problems if self.mode == "Warn" else []

    def _strict_error(self, model: type[KubeObject], doc: dict[str, Any], listed: str) -> ApiError:
        decoding = f"strict decoding error: {listed}"
        if self.operation == "Patch":
            value = json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
            invalid = f"Invalid value: {_quoted(value)}: {decoding}"
            return ApiError(422, f' "" is invalid: patch: {invalid}', causes=[Cause("patch", invalid)])
        version = model.API_VERSION.rpartition("/")[2]
        kind = model.KIND
        return ApiError(400, f'{kind} in version "{version}" cannot be handled as a {kind}: {decoding}')

    def headers(self) -> list[tuple[str, str]]:
        """The ``Warning`` response headers, one per warning; a control character (a field name may hold
        one) is escaped, since a header cannot carry it (the response was never sent: the connection
        was dropped)."""
        return [("Warning", f"299 - {_CONTROL.sub(_escaped, _quoted(text))}") for text in self.warnings]


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"
