"""How each node of an object merges under server-side apply: its :class:`Structure`.

A custom kind's structure is its CRD schema (``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys``,
``x-kubernetes-map-type``, from :mod:`capa_py.manifests.schema`); Kubernetes' own kinds' are the strategic
merge keys of :mod:`capa_py.apiserver.strategic` (a list with a merge key is associative,
``metadata.finalizers`` a set) and the label selectors, node selectors and object references, which are
atomic. ``metadata`` is the same for every kind. A list whose items cannot be named as its type says is
atomic.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Literal

from capa_py.api.meta import KubeObject
from capa_py.apiserver.strategic import PRIMITIVE_MERGED, merge_key
from capa_py.manifests.crds import is_builtin_group
from capa_py.manifests.schema import NotStructural, structural_schema

ListKind = Literal["atomic", "set", "map"]

ATOMIC_BUILT_IN_FIELDS = frozenset(
    {
        "selector",
        "nodeSelector",
        "labelSelector",
        "namespaceSelector",
        "podSelector",
        "involvedObject",
        "related",
        "regarding",
    }
)
"""Fields of Kubernetes' own kinds that are atomic: label selectors (a Deployment's or DaemonSet's
``spec.selector`` is a ``LabelSelector``, a Service's an atomic map), node selectors and object references
(an Event's)."""

ATOMIC_BUILT_IN_ITEMS = frozenset({"ownerReferences", "secrets", "imagePullSecrets"})
"""Associative lists of Kubernetes' own kinds whose items are atomic (owner and object references)."""

KEY_DEFAULTS: dict[str, Any] = {"protocol": "TCP"}
"""Key fields an item may leave out, named by their default (a port's protocol)."""


@dataclass(frozen=True)
class ListType:
    kind: ListKind
    keys: tuple[str, ...] = ()
    defaults: tuple[tuple[str, Any], ...] = ()


ATOMIC = ListType("atomic")


def _scalar(item: Any) -> bool:
    return not isinstance(item, dict | list)


class Structure:
    """How one node of an object merges. The base is free form: maps merge by field, lists are atomic."""

    atomic_map = False

    def child(self, name: str) -> Structure:
        return FREE

    def item(self) -> Structure:
        return FREE

    def declared(self) -> ListType:
        return ATOMIC

    def list_type(self, items: list[Any]) -> ListType:
        """The list's type, given its items: a set or map whose items cannot be named is atomic."""
        declared = self.declared()
        if declared.kind == "set" and not all(_scalar(i) for i in items):
            return ATOMIC
        if declared.kind == "map" and not all(isinstance(i, dict) for i in items):
            return ATOMIC
        return declared


FREE = Structure()


class Schema(Structure):
    """A node of a CRD's structural schema."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.atomic_map = schema.get("x-kubernetes-map-type") == "atomic"

    def child(self, name: str) -> Structure:
        properties = self.schema.get("properties") or {}
        if name in properties:
            return Schema(properties[name])
        additional = self.schema.get("additionalProperties")
        return Schema(additional) if isinstance(additional, dict) else FREE

    def item(self) -> Structure:
        items = self.schema.get("items")
        return Schema(items) if isinstance(items, dict) else FREE

    def declared(self) -> ListType:
        kind = self.schema.get("x-kubernetes-list-type")
        if kind == "set":
            return ListType("set")
        if kind == "map":
            return ListType("map", tuple(self.schema.get("x-kubernetes-list-map-keys") or ()))
        return ATOMIC


class CustomRoot(Schema):
    """A custom kind's object: its CRD schema, with ``metadata`` as every kind has it."""

    def child(self, name: str) -> Structure:
        return BuiltIn("metadata") if name == "metadata" else super().child(name)


class BuiltIn(Structure):
    """A node of one of Kubernetes' own kinds, reached through the field ``name``."""

    def __init__(self, name: str = "", atomic: bool = False) -> None:
        self.name = name
        self.atomic_map = atomic or name in ATOMIC_BUILT_IN_FIELDS

    def child(self, name: str) -> Structure:
        return BuiltIn(name)

    def item(self) -> Structure:
        return BuiltIn(atomic=self.name in ATOMIC_BUILT_IN_ITEMS)

    def list_type(self, items: list[Any]) -> ListType:
        if self.name in PRIMITIVE_MERGED:
            return ListType("set") if all(_scalar(i) for i in items) else ATOMIC
        merge_by = merge_key(self.name, items)
        if merge_by is None or not all(isinstance(i, dict) for i in items):
            return ATOMIC
        if self.name == "ports":
            # Ports are keyed by their number and protocol, which defaults to TCP.
            return ListType("map", (merge_by, "protocol"), (("protocol", "TCP"),))
        return ListType("map", (merge_by,))


@functools.cache
def structure_of(model: type[KubeObject]) -> Structure:
    """The root structure of a kind's objects."""
    group = model.API_VERSION.rpartition("/")[0]
    if is_builtin_group(group):
        return BuiltIn()
    try:
        return CustomRoot(structural_schema(model))
    except NotStructural:
        return CustomRoot({})
