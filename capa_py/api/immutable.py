"""Immutable spec fields: naming each field an update would change, by its wire (JSON) path.

Cluster API Provider AWS refuses, in its validating webhooks, updates that change fields it cannot carry
out on live resources (an AWSMachine's instance type, an AWSCluster's region). The kinds list their own
rules (``immutable_issues``); this module compares two values of a model and words each difference the
same way: ``spec.instanceType: immutable (was t3.medium, now t3.large)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from capa_py.api.meta import FieldIssue


def _wire(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return value


def describe(value: Any) -> str:
    """A value as an error message shows it: ``unset``, a bare string, or compact JSON."""
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value or '""'
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def changes(path: str, old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    """Every leaf that differs between two values, as (JSON path, old, new); maps are walked key by key,
    lists compared whole."""
    old, new = _wire(old), _wire(new)
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[tuple[str, Any, Any]] = []
        for key in sorted(set(old) | set(new)):
            found += changes(f"{path}.{key}", old.get(key), new.get(key))
        return found
    return [] if old == new else [(path, old, new)]


def immutable(path: str, old: Any, new: Any, why: str = "immutable") -> list[FieldIssue]:
    """One issue per changed leaf under ``path``."""
    return [
        FieldIssue(path=where, message=f"{why} (was {describe(was)}, now {describe(now)})")
        for where, was, now in changes(path, old, new)
    ]


def without(model: BaseModel, fields: Iterable[str]) -> dict[str, Any]:
    """A model in wire form without some of its (wire-named) fields: what is left is compared."""
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True)
    for name in fields:
        data.pop(name, None)
    return data
