"""State getters: read the objects an action needs, declared with the CtrlKit selectors.

Selectors (one per line in the DSL, or :class:`Selector` values in code):

``name=VALUE``
    get the object by name in the target's namespace (a list state lists with a name field selector);
``labels/KEY=VALUE``
    list with a label selector in the target's namespace;
``fields/PATH=VALUE``
    list with a field selector (``.metadata.controller`` is the controlling owner's name);
``owned``
    keep only objects with an owner reference to the target: a list state leaves the others out, a
    single-object state raises :class:`NotOwned`.

Values may reference the target: ``${target.Name}``, ``${target.metadata.labels.app}``. A reference is
resolved on the object first and then on its metadata (``Name`` is ``metadata.name`` as Go's embedded
ObjectMeta makes it); capitalised Go-style names match their camelCase or snake_case fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from capa_py.api.meta import KubeObject
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore

SelectorKind = Literal["name", "labels", "fields", "owned"]
_REFERENCE = re.compile(r"\$\{([^}]*)\}")


class StateError(Exception):
    """A state could not be read as declared."""


class NotOwned(StateError):
    """A single-object state with ``owned`` found an object the target does not own."""


@dataclass(frozen=True)
class Selector:
    kind: SelectorKind
    key: str = ""
    value: str = ""

    @classmethod
    def parse(cls, text: str) -> Selector:
        text = text.strip()
        if text == "owned":
            return cls("owned")
        head, eq, value = text.partition("=")
        if not eq:
            raise ValueError(f"selector {text!r} needs '=VALUE' (or is 'owned')")
        if head == "name":
            return cls("name", "", value)
        prefix, slash, key = head.partition("/")
        if slash and prefix in ("labels", "fields") and key:
            return cls(prefix, key, value)  # type: ignore[arg-type]
        raise ValueError(f"unknown selector {head!r}: expected name, labels/KEY, fields/PATH or owned")

    def __str__(self) -> str:
        if self.kind == "owned":
            return "owned"
        if self.kind == "name":
            return f"name={self.value}"
        return f"{self.kind}/{self.key}={self.value}"


@dataclass(frozen=True)
class StateSpec:
    """A declared state: its name, the kind it reads, whether it is a list, and its selectors."""

    name: str
    kind: type[KubeObject]
    is_list: bool
    selectors: tuple[Selector, ...] = field(default_factory=tuple)


def _lookup(value: Any, part: str) -> Any:
    # Go initialisms stay one word: ``UID`` is ``uid`` and ``APIVersion`` is ``api_version``.
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", part).lower()
    candidates = [part, part[:1].lower() + part[1:], snake]
    for candidate in candidates:
        if isinstance(value, dict) and candidate in value:
            return value[candidate]
        if isinstance(value, BaseModel) and hasattr(value, candidate):
            return getattr(value, candidate)
    raise KeyError(part)


def _has(value: Any, part: str) -> bool:
    try:
        _lookup(value, part)
    except KeyError:
        return False
    return True


def resolve_reference(target: KubeObject, expression: str) -> str:
    """The string value of ``target.X.Y`` on the target object."""
    parts = expression.strip().split(".")
    if not parts or parts[0] != "target":
        raise StateError(f"reference ${{{expression}}} must start with 'target.'")
    value: Any = target
    for index, part in enumerate(parts[1:]):
        try:
            value = _lookup(value, part)
        except KeyError:
            if index == 0 and _has(target.metadata, part):
                value = _lookup(target.metadata, part)
                continue
            raise StateError(
                f"reference ${{{expression}}}: {type(target).__name__} has no {part!r}"
            ) from None
    if value is None:
        raise StateError(f"reference ${{{expression}}} is not set on {target.ref()}")
    return str(value)


def interpolate(target: KubeObject, text: str) -> str:
    return _REFERENCE.sub(lambda m: resolve_reference(target, m.group(1)), text)


_SELECTOR_SYNTAX = re.compile(r"[,=!()\s]")


def _selector_value(target: KubeObject, selector: Selector) -> str:
    """The selector's value with references resolved; a resolved value may not carry selector syntax
    (a label value like ``a,b!=c`` would otherwise change what the selector matches)."""
    value = interpolate(target, selector.value)
    if value != selector.value and selector.kind != "name" and _SELECTOR_SYNTAX.search(value):
        raise StateError(
            f"selector {selector}: the value {value!r} from {target.ref()} contains selector syntax"
        )
    return value


def _owned_by(obj: KubeObject, target: KubeObject) -> bool:
    return any(ref.uid == target.metadata.uid for ref in obj.metadata.owner_references)


def fetch_state(store: ObjectStore, target: KubeObject, spec: StateSpec) -> Any:
    """Read one declared state for ``target``: a list, or a single object (None when absent)."""
    namespace = target.metadata.namespace
    name: str | None = None
    labels: list[str] = []
    fields: list[str] = []
    owned = False
    for selector in spec.selectors:
        value = _selector_value(target, selector) if selector.value else ""
        if selector.kind == "name":
            name = value
        elif selector.kind == "labels":
            labels.append(f"{selector.key}={value}")
        elif selector.kind == "fields":
            fields.append(f"{selector.key}={value}")
        else:
            owned = True
    if not spec.is_list and name is not None and not labels and not fields:
        try:
            obj: KubeObject | None = store.get(spec.kind, name, namespace)
        except NotFound:
            obj = None
        candidates = [] if obj is None else [obj]
    else:
        if name is not None:
            fields.append(f"metadata.name={name}")
        candidates = list(
            store.list(
                spec.kind,
                namespace=namespace,
                label_selector=",".join(labels) or None,
                field_selector=",".join(fields) or None,
            )
        )
    if spec.is_list:
        return [obj for obj in candidates if not owned or _owned_by(obj, target)]
    if len(candidates) > 1:
        raise StateError(f"state {spec.name!r} selects {len(candidates)} {spec.kind.KIND} objects, not one")
    if not candidates:
        return None
    found = candidates[0]
    if owned and not _owned_by(found, target):
        raise NotOwned(f"state {spec.name!r}: {found.ref()} is not owned by {target.ref()}")
    return found
