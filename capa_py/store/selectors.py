"""Label and field selectors with Kubernetes syntax and semantics.

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x, y)``, ``a notin (x)``, ``a`` (exists) and ``!a``
(does not exist), comma-separated and AND-ed. As in Kubernetes, ``a!=b`` and ``notin`` also match
objects without the label. Field selectors: ``path=value`` / ``path!=value`` over the object's JSON form;
``.metadata.controller`` is the name of the controlling owner (the index Kubernetes controllers add), and
``metadata.ownerReferences.uid=<uid>`` holds when one of the object's owner references has that uid (``!=``:
when none has).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from capa_py.store.errors import Invalid

Operator = Literal["=", "!=", "in", "notin", "exists", "!"]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "=":
            return present and value == self.values[0]
        if self.operator == "!=":
            return not present or value != self.values[0]
        if self.operator == "in":
            return present and value in self.values
        if self.operator == "notin":
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        return not present


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in (part.strip() for part in parts) if p]


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text or not text.strip():
            return cls()
        requirements: list[Requirement] = []
        for part in _split_top_level(text):
            if match := _SET_RE.match(part):
                if match.group(1):
                    raise Invalid(f"cannot negate a set requirement: {part!r}", "labelSelector")
                values = tuple(v.strip() for v in match.group(4).split(",") if v.strip())
                if not values:
                    raise Invalid(f"empty value set in {part!r}", "labelSelector")
                requirements.append(Requirement(match.group(2), match.group(3), values))  # type: ignore[arg-type]
            elif match := _EQ_RE.match(part):
                operator: Operator = "!=" if match.group(2) == "!=" else "="
                requirements.append(Requirement(match.group(1), operator, (match.group(3),)))
            elif match := _EXISTS_RE.match(part):
                requirements.append(Requirement(match.group(2), "!" if match.group(1) else "exists"))
            else:
                raise Invalid(f"cannot parse label selector requirement {part!r}", "labelSelector")
        return cls(tuple(requirements))

    @classmethod
    def from_match_labels(cls, labels: Mapping[str, str]) -> LabelSelector:
        return cls(tuple(Requirement(k, "=", (v,)) for k, v in sorted(labels.items())))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        rendered: list[str] = []
        for r in self.requirements:
            if r.operator in ("=", "!="):
                rendered.append(f"{r.key}{r.operator}{r.values[0]}")
            elif r.operator in ("in", "notin"):
                rendered.append(f"{r.key} {r.operator} ({','.join(r.values)})")
            elif r.operator == "exists":
                rendered.append(r.key)
            else:
                rendered.append(f"!{r.key}")
        return ",".join(rendered)


CONTROLLER_FIELD = "metadata.controller"
OWNER_UID_FIELD = "metadata.ownerReferences.uid"


def owner_uids(document: Mapping[str, Any]) -> set[str]:
    """The uids the object's owner references name."""
    return {str(ref.get("uid")) for ref in document.get("metadata", {}).get("ownerReferences", [])}


def field_value(document: Mapping[str, Any], path: str) -> str | None:
    """The string form of a field of an object's JSON form, or None when absent."""
    path = path.lstrip(".")
    if path == CONTROLLER_FIELD:
        for ref in document.get("metadata", {}).get("ownerReferences", []):
            if ref.get("controller"):
                return str(ref.get("name"))
        return None
    current: Any = document
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return None
        current = current[part]
    if isinstance(current, bool):
        return "true" if current else "false"
    if isinstance(current, dict | list):
        return None
    return None if current is None else str(current)


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[tuple[str, bool, str], ...] = ()  # (path, equal, value)

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        if not text or not text.strip():
            return cls()
        requirements: list[tuple[str, bool, str]] = []
        for part in _split_top_level(text):
            match = re.match(r"^\s*([.A-Za-z0-9_/-]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
            if not match:
                raise Invalid(f"cannot parse field selector requirement {part!r}", "fieldSelector")
            requirements.append((match.group(1), match.group(2) != "!=", match.group(3)))
        return cls(tuple(requirements))

    def matches(self, document: Mapping[str, Any]) -> bool:
        for path, equal, value in self.requirements:
            if path.lstrip(".") == OWNER_UID_FIELD:
                if (value in owner_uids(document)) != equal:
                    return False
                continue
            actual = field_value(document, path)
            if equal and actual != value:
                return False
            if not equal and actual == value:
                return False
        return True
