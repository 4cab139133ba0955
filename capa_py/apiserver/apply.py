"""Server-side apply's structured merge: field sets of objects, their comparison, merge and pruning.

What a list is decides how it merges and how its items are named in a field set:

* an *atomic* list (the default) is one value: replaced whole, owned whole (``f:subnets: {}``);
* a *set* of scalars merges by value and each item is owned alone (``v:"a/b"``);
* an *associative* list (a map) merges by its keys and each item is owned alone (``k:{"name":"x"}``), and
  so is each field inside an item.

Maps and structs merge field by field unless atomic. A custom kind says this in its CRD schema
(``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys``, ``x-kubernetes-map-type``, from
:mod:`capa_py.manifests.schema`); Kubernetes' own kinds by the strategic merge keys of
:mod:`capa_py.apiserver.strategic` (a list with a merge key is associative, ``metadata.finalizers`` a set)
and the label selectors, which are atomic. ``metadata`` is the same for every kind. How each node merges
(:class:`Structure`, :func:`structure_of`) is :mod:`~capa_py.apiserver.apply_structure`.

On top of these, :func:`apply` and :func:`update` move ownership between managers the way the Kubernetes
API server does (its structured-merge-diff algorithm): an apply owns exactly the fields of its
configuration, may not change a field another manager owns unless forced, and removes the fields it
stops applying that nobody else owns; an update owns the fields it changed and takes them from others.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from capa_py.apiserver import fieldsets
from capa_py.apiserver.apply_structure import (
    ATOMIC,
    ATOMIC_BUILT_IN_FIELDS,
    ATOMIC_BUILT_IN_ITEMS,
    FREE,
    KEY_DEFAULTS,
    BuiltIn,
    CustomRoot,
    ListKind,
    ListType,
    Schema,
    Structure,
    structure_of,
)
from capa_py.apiserver.fieldsets import EMPTY, Element, FieldSet, Path

__all__ = [
    "ATOMIC",
    "ATOMIC_BUILT_IN_FIELDS",
    "ATOMIC_BUILT_IN_ITEMS",
    "FREE",
    "KEY_DEFAULTS",
    "BuiltIn",
    "Comparison",
    "Conflicts",
    "CustomRoot",
    "Ignored",
    "ListKind",
    "ListType",
    "ManagerKey",
    "Schema",
    "Structure",
    "apply",
    "compare",
    "field_set",
    "item_element",
    "merge",
    "node_at",
    "remove",
    "structure_of",
    "update",
]


# -- naming list items ----------------------------------------------------------------------------------


def item_element(item: Any, list_type: ListType, position: int) -> Element:
    if list_type.kind == "set":
        return fieldsets.value(item)
    defaults = dict(list_type.defaults)
    present = {k: item.get(k, defaults.get(k)) for k in list_type.keys if k in item or k in defaults}
    return fieldsets.key(present) if present else fieldsets.index(position)


def _elements(items: list[Any], list_type: ListType) -> list[Element]:
    return [item_element(item, list_type, i) for i, item in enumerate(items)]


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (``1`` is not ``true`` here)."""
    return fieldsets.canonical_json(a) == fieldsets.canonical_json(b)


# -- field sets -----------------------------------------------------------------------------------------


def field_set(value: Any, structure: Structure, path: Path = ()) -> set[Path]:
    """The fields a value sets: its scalars, atomic values, empty maps and every item of a set or an
    associative list (an apply's configuration owns exactly these)."""
    if isinstance(value, dict):
        if path and (structure.atomic_map or not value):
            return {path}
        out: set[Path] = set()
        for name, child in value.items():
            child_path = (*path, fieldsets.field(name))
            if child is None or child == {}:
                out.add(child_path)
            else:
                out |= field_set(child, structure.child(name), child_path)
        return out
    if isinstance(value, list):
        list_type = structure.list_type(value)
        if list_type.kind == "atomic":
            return {path}
        out = set()
        for element, item in zip(_elements(value, list_type), value, strict=True):
            item_path = (*path, element)
            out.add(item_path)
            if list_type.kind == "map":
                out |= field_set(item, structure.item(), item_path)
        return out
    return {path} if path else set()


def _subtree(value: Any, structure: Structure, path: Path) -> set[Path]:
    """Every node of a value, itself included: what appears or disappears with it."""
    out = {path} if path else set()
    if isinstance(value, dict) and not (path and structure.atomic_map):
        for name, child in value.items():
            out |= _subtree(child, structure.child(name), (*path, fieldsets.field(name)))
    elif isinstance(value, list):
        list_type = structure.list_type(value)
        if list_type.kind != "atomic":
            for element, item in zip(_elements(value, list_type), value, strict=True):
                out |= _subtree(item, structure.item(), (*path, element))
    return out


@dataclass
class Comparison:
    added: set[Path] = field(default_factory=set)
    removed: set[Path] = field(default_factory=set)
    modified: set[Path] = field(default_factory=set)

    def changed(self) -> set[Path]:
        return self.added | self.modified

    def without(self, ignored: Ignored) -> Comparison:
        return Comparison(
            {p for p in self.added if not ignored.covers(p)},
            {p for p in self.removed if not ignored.covers(p)},
            {p for p in self.modified if not ignored.covers(p)},
        )


_MISSING: Any = object()


def compare(old: Any, new: Any, structure: Structure) -> Comparison:
    """What changed from ``old`` to ``new``: nodes added, removed (each with everything below it) and
    values modified (scalars and atomic values; a map or a list item is only ever added or removed)."""
    out = Comparison()
    _compare(old, new, structure, (), out)
    return out


def _compare(old: Any, new: Any, structure: Structure, path: Path, out: Comparison) -> None:
    if old is _MISSING:
        out.added |= _subtree(new, structure, path)
        return
    if new is _MISSING:
        out.removed |= _subtree(old, structure, path)
        return
    if isinstance(old, dict) and isinstance(new, dict) and not (path and structure.atomic_map):
        for name in [*old, *(k for k in new if k not in old)]:
            child_path = (*path, fieldsets.field(name))
            _compare(old.get(name, _MISSING), new.get(name, _MISSING), structure.child(name), child_path, out)
        return
    if isinstance(old, list) and isinstance(new, list):
        list_type = structure.list_type([*old, *new])
        if list_type.kind != "atomic":
            old_items = dict(zip(reversed(_elements(old, list_type)), reversed(old), strict=True))
            new_items = dict(zip(reversed(_elements(new, list_type)), reversed(new), strict=True))
            for element, item in old_items.items():
                _compare(item, new_items.get(element, _MISSING), structure.item(), (*path, element), out)
            for element, item in new_items.items():
                if element not in old_items:
                    out.added |= _subtree(item, structure.item(), (*path, element))
            return
    if not _same(old, new):
        out.modified.add(path)


# -- merging and removing -------------------------------------------------------------------------------


def merge(live: Any, config: Any, structure: Structure) -> Any:
    """``live`` with ``config`` applied: maps merge by field, sets and associative lists by item (items
    only in ``live`` keep their place, shared items follow ``config``'s order), anything else is replaced.
    A ``null`` in ``config`` removes the field."""
    if isinstance(live, dict) and isinstance(config, dict) and not structure.atomic_map:
        out = dict(live)
        for name, value in config.items():
            if value is None:
                out.pop(name, None)
            else:
                out[name] = merge(live.get(name), value, structure.child(name))
        return out
    if isinstance(live, list) and isinstance(config, list):
        list_type = structure.list_type([*live, *config])
        if list_type.kind != "atomic":
            return _merge_items(live, config, list_type, structure.item())
    return copy.deepcopy(config)


def _merge_items(live: list[Any], config: list[Any], list_type: ListType, item: Structure) -> list[Any]:
    live_keys, config_keys = _elements(live, list_type), _elements(config, list_type)
    live_by_key = dict(zip(reversed(live_keys), reversed(live), strict=True))
    config_set = set(config_keys)
    out: list[Any] = []
    emitted: set[Element] = set()

    def take(element: Element, value: Any) -> None:
        merged = merge(live_by_key[element], value, item) if element in live_by_key else copy.deepcopy(value)
        out.append(merged)
        emitted.add(element)

    i = j = 0
    while i < len(live) or j < len(config):
        if i < len(live):
            element = live_keys[i]
            if element in emitted:
                i += 1
                continue
            if element not in config_set:
                out.append(copy.deepcopy(live[i]))
                emitted.add(element)
                i += 1
                continue
            if j < len(config) and config_keys[j] == element:
                take(element, config[j])
                i += 1
                j += 1
                continue
        if j < len(config):
            if config_keys[j] not in emitted:
                take(config_keys[j], config[j])
            j += 1
        else:
            i += 1
    return out


def _matches(item: Any, element: Element, position: int) -> bool:
    prefix, _, rest = element.partition(":")
    if prefix == "v":
        return fieldsets.canonical_json(item) == rest
    if prefix == "i":
        return position == int(rest)
    if not isinstance(item, dict):
        return False
    named = fieldsets.decode_key(element)
    present = {k: item.get(k, KEY_DEFAULTS.get(k)) for k in named if k in item or k in KEY_DEFAULTS}
    return bool(present) and fieldsets.key(present) == element


def remove(document: dict[str, Any], path: Path) -> None:
    """Remove the node at ``path`` (and everything below it) from ``document``, in place."""
    node: Any = document
    for element in path[:-1]:
        node = node_at(node, element)
        if node is None:
            return
    last = path[-1]
    if last.startswith("f:"):
        if isinstance(node, dict):
            node.pop(last[2:], None)
    elif isinstance(node, list):
        node[:] = [item for i, item in enumerate(node) if not _matches(item, last, i)]
        if not node and len(path) > 1:
            # A list left empty is left out, as the API server writes an empty list.
            remove(document, path[:-1])


def node_at(node: Any, element: Element) -> Any:
    """The child of ``node`` that ``element`` names (None when there is none)."""
    if element.startswith("f:"):
        return node.get(element[2:]) if isinstance(node, dict) else None
    if isinstance(node, list):
        return next((item for i, item in enumerate(node) if _matches(item, element, i)), None)
    return None


# -- ownership ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ignored:
    """Fields no manager owns: some exactly (``metadata.name``, ``apiVersion``…), some with everything
    below them (``status`` on the main resource of a kind with a status subresource)."""

    exact: FieldSet = EMPTY
    below: FieldSet = EMPTY

    def covers(self, path: Path) -> bool:
        return path in self.exact or fieldsets.under(path, self.below)

    def strip(self, paths: Iterable[Path]) -> FieldSet:
        return frozenset(p for p in paths if not self.covers(p))


ManagerKey = tuple[str, str, str, str]
"""(manager, operation, apiVersion (of an update; empty for an apply), subresource)."""


@dataclass
class Conflicts(Exception):
    """An apply would change fields other managers own: per manager, the fields."""

    by_manager: dict[ManagerKey, FieldSet]


def update(
    live: Any,
    new: Any,
    managers: dict[ManagerKey, FieldSet],
    me: ManagerKey,
    structure: Structure,
    ignored: Ignored,
) -> tuple[dict[ManagerKey, FieldSet], bool]:
    """Ownership after an update from ``live`` to ``new`` by ``me``: it owns what it changed (and what it
    owned before that is still there), and takes what it changed from everyone else. Also whether it
    changed anything."""
    comparison = compare(live, new, structure).without(ignored)
    changed = frozenset(comparison.changed())
    removed = frozenset(comparison.removed)
    out: dict[ManagerKey, FieldSet] = {}
    for key, owned in managers.items():
        out[key] = owned - changed - removed
    if changed:
        out[me] = out.get(me, EMPTY) | changed
    return {k: v for k, v in out.items() if v}, bool(changed)


def apply(
    live: Any,
    config: dict[str, Any],
    managers: dict[ManagerKey, FieldSet],
    me: ManagerKey,
    structure: Structure,
    ignored: Ignored,
    force: bool,
) -> tuple[Any, dict[ManagerKey, FieldSet]]:
    """The object after ``me`` applies ``config`` to ``live`` and the managers' fields after it.

    ``me`` comes to own exactly the fields of ``config``. Fields it applied last time, applies no more
    and nobody else owns are removed. Changing a field another manager owns is a :class:`Conflicts`
    unless ``force`` (which takes the field from it); setting it to the value it has shares it."""
    applied = ignored.strip(field_set(config, structure))
    last = managers.get(me, EMPTY)
    merged = merge(live, config, structure)
    others = [owned for key, owned in managers.items() if key != me]
    if last:
        still_owned = applied.union(*others)
        for path in fieldsets.iterate(last & field_set(merged, structure)):
            if path not in still_owned:
                remove(merged, path)
    comparison = compare(live, merged, structure).without(ignored)
    changed = frozenset(comparison.changed())
    removed = frozenset(comparison.removed)
    conflicts = {key: owned & changed for key, owned in managers.items() if key != me and owned & changed}
    if conflicts and not force:
        raise Conflicts(conflicts)
    out: dict[ManagerKey, FieldSet] = {}
    for key, owned in managers.items():
        out[key] = applied if key == me else owned - changed - removed
    out[me] = applied
    return merged, {k: v for k, v in out.items() if v}
