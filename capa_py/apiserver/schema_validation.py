"""Custom resources against their CRD's structural schema: pruning, defaulting and validation.

What the API server does with an object of a CRD's kind, in its order:

* :meth:`StructuralSchema.prune` drops every field the schema does not name (except under
  ``x-kubernetes-preserve-unknown-fields``; ``apiVersion``, ``kind`` and ``metadata`` at the root and in an
  ``x-kubernetes-embedded-resource`` are always known, ``metadata`` keeps ObjectMeta's fields only) and every
  ``null`` of a field that is not ``nullable``. It returns the paths it dropped (``spec.unknown``), so that a
  caller can warn about them or refuse them instead (``fieldValidation``).
* :meth:`StructuralSchema.default` sets each missing field that has a ``default`` (inside objects that are
  there), on writes and on reads.
* :meth:`StructuralSchema.validate` checks types (``x-kubernetes-int-or-string``, ``nullable``), ``required``,
  ``enum``, bounds, lengths, ``pattern``, item and property counts with the ``jsonschema`` package, plus
  what JSON Schema cannot say (an embedded resource's ``apiVersion`` and ``kind``, duplicates in an
  ``x-kubernetes-list-type: set``), and words every failure as the API server does: one
  :class:`SchemaIssue` per field, e.g. ``spec.size: Invalid value: 11: spec.size in body should be less than
  or equal to 10``. ``format`` is not checked.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft4Validator, ValidationError, validators

from capa_py.api.meta import ObjectMeta

PRESERVE = "x-kubernetes-preserve-unknown-fields"
EMBEDDED = "x-kubernetes-embedded-resource"
INT_OR_STRING = "x-kubernetes-int-or-string"

OBJECT_META_FIELDS = frozenset(
    str(field.alias or name) for name, field in ObjectMeta.model_fields.items()
) | {"managedFields", "selfLink"}
"""The fields ``metadata`` keeps; anything else in it is pruned."""


@dataclass(frozen=True)
class SchemaIssue:
    """One field that fails, as a ``details.causes`` entry names it."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _go(value: Any) -> str:
    """A value as the API server's messages print it (strings quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# -- jsonschema with the OpenAPI extensions a structural schema uses -------------------------------------
def _type(validator: Any, types: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if instance is None and schema.get("nullable"):
        return
    wanted = [types] if isinstance(types, str) else list(types)
    if not any(validator.is_type(instance, t) for t in wanted):
        yield ValidationError(",".join(wanted))


def _int_or_string(
    validator: Any, enabled: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not enabled or (instance is None and schema.get("nullable")):
        return
    if not (isinstance(instance, str) or (isinstance(instance, int) and not isinstance(instance, bool))):
        yield ValidationError("integer,string")


def _required(
    validator: Any, required: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for name in required:
        if name not in instance:
            yield ValidationError(str(name))


_Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft4Validator, {"type": _type, "required": _required, INT_OR_STRING: _int_or_string}
)


def _issue(error: ValidationError) -> SchemaIssue:
    path = ""
    for key in error.absolute_path:
        path = _join(path, key)
    kind = error.validator
    limit: Any = error.validator_value
    value: Any = error.instance
    schema = error.schema if isinstance(error.schema, dict) else {}
    invalid = f"Invalid value: {_go(value)}: {path} in body"
    if kind in ("type", INT_OR_STRING):
        actual = _type_name(value)
        return SchemaIssue(
            path,
            f'Invalid value: "{actual}": {path} in body must be of type {error.message}: "{actual}"',
            "FieldValueTypeInvalid",
        )
    if kind == "required":
        return SchemaIssue(_join(path, error.message), "Required value", "FieldValueRequired")
    if kind == "enum":
        supported = ", ".join(_go(v) for v in limit)
        return SchemaIssue(
            path, f"Unsupported value: {_go(value)}: supported values: {supported}", "FieldValueNotSupported"
        )
    if kind == "maximum":
        relation = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
        return SchemaIssue(path, f"{invalid} should be {relation} {_go(limit)}")
    if kind == "minimum":
        relation = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
        return SchemaIssue(path, f"{invalid} should be {relation} {_go(limit)}")
    if kind == "maxLength":
        return SchemaIssue(path, f"Too long: may not be more than {limit} bytes", "FieldValueTooLong")
    if kind == "minLength":
        return SchemaIssue(path, f"{invalid} should be at least {limit} chars long")
    if kind == "pattern":
        return SchemaIssue(path, f"{invalid} should match '{limit}'")
    if kind in ("maxItems", "maxProperties"):
        return SchemaIssue(
            path, f"Too many: {len(value)}: must have at most {limit} items", "FieldValueTooMany"
        )
    if kind == "minItems":
        return SchemaIssue(
            path, f"Invalid value: {len(value)}: {path} in body should have at least {limit} items"
        )
    if kind == "minProperties":
        return SchemaIssue(
            path, f"Invalid value: {len(value)}: {path} in body should have at least {limit} properties"
        )
    if kind == "multipleOf":
        return SchemaIssue(path, f"{invalid} should be a multiple of {_go(limit)}")
    if kind == "uniqueItems":
        return SchemaIssue(path, f"{invalid} shouldn't contain duplicates", "FieldValueDuplicate")
    return SchemaIssue(path, f"{invalid} {error.message}")


class StructuralSchema:
    """One version's ``openAPIV3Schema`` (``None``: no schema, every field kept and nothing checked)."""

    def __init__(self, schema: dict[str, Any] | None) -> None:
        self.schema = schema
        self._validator = _Validator(schema) if schema else None

    # -- pruning ----------------------------------------------------------------------------------
    def prune(self, doc: dict[str, Any]) -> list[str]:
        """Drop the unknown fields of ``doc`` (in place); the paths dropped."""
        pruned: list[str] = []
        if self.schema is not None:
            _prune_object(doc, self.schema, "", pruned, resource=True)
        return pruned

    # -- defaulting -------------------------------------------------------------------------------
    def default(self, doc: dict[str, Any]) -> None:
        """Set the schema's defaults where ``doc`` lacks the field (in place)."""
        if self.schema is not None:
            _default(doc, self.schema, root=True)

    # -- validation -------------------------------------------------------------------------------
    def validate(self, doc: dict[str, Any]) -> list[SchemaIssue]:
        if self._validator is None or self.schema is None:
            return []
        body = {k: v for k, v in doc.items() if k != "metadata"}
        # One failure per field, the first the API server's validator reports (a string too long is not
        # also said not to match its pattern).
        first: dict[str, tuple[int, SchemaIssue]] = {}
        for error in self._validator.iter_errors(body):
            issue, rank = _issue(error), _RANK.get(str(error.validator), len(_RANK))
            key = issue.field if issue.reason != "FieldValueRequired" else "\0" + issue.field
            if key not in first or rank < first[key][0]:
                first[key] = (rank, issue)
        issues = sorted((issue for _, issue in first.values()), key=_order)
        _structural_checks(doc, self.schema, "", issues)
        return issues


_RANK = {
    name: rank
    for rank, name in enumerate(
        (
            "type",
            INT_OR_STRING,
            "maxLength",
            "minLength",
            "pattern",
            "maximum",
            "minimum",
            "multipleOf",
            "maxItems",
            "minItems",
            "uniqueItems",
            "maxProperties",
            "minProperties",
            "enum",
        )
    )
}


def _order(issue: SchemaIssue) -> str:
    """Sorted by field; within an object, its properties' failures before its missing required fields."""
    if issue.reason == "FieldValueRequired":
        return issue.field.rpartition(".")[0] + "\x7f" + issue.field
    return issue.field


def _prune_meta(meta: Any, path: str, pruned: list[str]) -> Any:
    if not isinstance(meta, dict):
        return meta
    for key in list(meta):
        if key not in OBJECT_META_FIELDS:
            del meta[key]
            pruned.append(_join(path, key))
    return meta


def _prune_object(
    value: dict[str, Any], schema: dict[str, Any], path: str, pruned: list[str], resource: bool = False
) -> None:
    properties = schema.get("properties")
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get(PRESERVE)) or additional is True
    for key in list(value):
        child_path = _join(path, key)
        if resource and key in ("apiVersion", "kind"):
            continue
        if resource and key == "metadata":
            value[key] = _prune_meta(value[key], child_path, pruned)
            continue
        if isinstance(properties, dict) and key in properties:
            sub = properties[key]
        elif isinstance(additional, dict):
            sub = additional
        elif preserve:
            continue
        else:
            del value[key]
            pruned.append(child_path)
            continue
        if value[key] is None and not sub.get("nullable"):
            del value[key]
            continue
        _prune_value(value[key], sub, child_path, pruned)


def _prune_value(value: Any, schema: dict[str, Any], path: str, pruned: list[str]) -> None:
    if isinstance(value, dict):
        _prune_object(value, schema, path, pruned, resource=bool(schema.get(EMBEDDED)))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _prune_value(item, schema["items"], _join(path, index), pruned)


def _default(value: Any, schema: dict[str, Any], root: bool = False) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if not isinstance(sub, dict) or "default" not in sub or (root and key == "metadata"):
                continue
            if key not in value or (value[key] is None and not sub.get("nullable")):
                value[key] = copy.deepcopy(sub["default"])
        additional = schema.get("additionalProperties")
        for key, child in value.items():
            if root and key == "metadata":
                continue
            sub = properties.get(key, additional)
            if isinstance(sub, dict):
                _default(child, sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])


def _structural_checks(value: Any, schema: dict[str, Any], path: str, issues: list[SchemaIssue]) -> None:
    """The checks JSON Schema has no keyword for: embedded resources and ``list-type: set``."""
    if isinstance(value, dict):
        if schema.get(EMBEDDED):
            for key in ("apiVersion", "kind"):
                if not value.get(key):
                    issues.append(SchemaIssue(_join(path, key), "Required value", "FieldValueRequired"))
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, child in value.items():
            if not path and key == "metadata":
                continue
            sub = properties.get(key, additional)
            if isinstance(sub, dict):
                _structural_checks(child, sub, _join(path, key), issues)
    elif isinstance(value, list):
        items = schema.get("items")
        if schema.get("x-kubernetes-list-type") == "set":
            seen: list[Any] = []
            for index, item in enumerate(value):
                if item in seen:
                    issues.append(
                        SchemaIssue(
                            _join(path, index), f"Duplicate value: {_go(item)}", "FieldValueDuplicate"
                        )
                    )
                seen.append(item)
        if isinstance(items, dict):
            for index, item in enumerate(value):
                _structural_checks(item, items, _join(path, index), issues)
