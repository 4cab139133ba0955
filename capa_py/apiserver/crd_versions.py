"""One served version of a CRD-defined kind (:class:`ServedVersion`): its names, its discovery entries, and
how a request's object is pruned, defaulted and validated against the version's schema; and Kubernetes'
order of versions (:func:`version_priority`).

Objects of every version are stored as one kind, under the version the CRD first stored, and served in any
served version by changing ``apiVersion`` only (the conversion strategy ``None``); reads get the storage
version's defaults.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from capa_py.api.custom_resource import CustomResource
from capa_py.api.meta import KubeObject
from capa_py.apiserver.discovery import STATUS_VERBS, VERBS
from capa_py.apiserver.schema_validation import SchemaIssue, StructuralSchema

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes' version order, highest first when sorted in reverse: v2 > v1 > v1beta2 > v1beta1 >
    v1alpha1 > anything else (alphabetically)."""
    match = _VERSION.match(version)
    if match is None:
        return (0, 0, 0, "".join(chr(0x10FFFF - ord(c)) for c in version))
    major, stage, minor = match.groups()
    rank = {"alpha": 1, "beta": 2, None: 3}[stage]
    return (rank, int(major), int(minor or 0), "")


@dataclass(frozen=True)
class Names:
    plural: str
    singular: str
    kind: str
    list_kind: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @classmethod
    def of(cls, spec_names: dict[str, Any]) -> Names:
        kind = str(spec_names.get("kind", ""))
        return cls(
            plural=str(spec_names.get("plural", "")),
            singular=str(spec_names.get("singular") or kind.lower()),
            kind=kind,
            list_kind=str(spec_names.get("listKind") or f"{kind}List"),
            short_names=tuple(spec_names.get("shortNames") or ()),
            categories=tuple(spec_names.get("categories") or ()),
        )

    def accepted(self) -> dict[str, Any]:
        names: dict[str, Any] = {
            "plural": self.plural,
            "singular": self.singular,
            "kind": self.kind,
            "listKind": self.list_kind,
        }
        if self.short_names:
            names["shortNames"] = list(self.short_names)
        if self.categories:
            names["categories"] = list(self.categories)
        return names


@dataclass(frozen=True)
class ServedVersion:
    """One served version of a CRD-defined kind: what a request on its path is checked against."""

    crd: str
    group: str
    version: str
    names: Names
    namespaced: bool
    has_status: bool
    schema: StructuralSchema
    storage_schema: StructuralSchema
    columns: list[dict[str, Any]]
    model: type[CustomResource]
    terminating: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def render(self, obj: KubeObject) -> dict[str, Any]:
        """A stored object as this version serves it: the storage version's defaults, this apiVersion."""
        doc = obj.to_dict()
        self.storage_schema.default(doc)
        doc["apiVersion"] = self.api_version
        return doc

    def admit(
        self, body: dict[str, Any], current: KubeObject | None, status_write: bool
    ) -> tuple[dict[str, Any], list[str], list[SchemaIssue]]:
        """The document to store (apiVersion the storage one), the unknown field paths pruned from it, and
        the fields that fail the schema. With a status subresource the main resource keeps the current
        status (a create none) and a status write keeps everything but status."""
        doc = copy.deepcopy(body)
        if self.has_status:
            if status_write and current is not None:
                written = doc
                doc = self.render(current)
                doc.pop("status", None)
                if "status" in written:
                    doc["status"] = written["status"]
                meta = written.get("metadata") if isinstance(written.get("metadata"), dict) else {}
                if meta and meta.get("resourceVersion"):
                    doc["metadata"]["resourceVersion"] = meta["resourceVersion"]
            else:
                doc.pop("status", None)
                previous = self.render(current) if current is not None else {}
                if "status" in previous:
                    doc["status"] = previous["status"]
        pruned = self.schema.prune(doc)
        self.schema.default(doc)
        issues = self.schema.validate(doc)
        doc["apiVersion"] = self.model.API_VERSION
        return doc, pruned, issues

    def discovery(self) -> list[dict[str, Any]]:
        entry: dict[str, Any] = {
            "name": self.names.plural,
            "singularName": self.names.singular,
            "namespaced": self.namespaced,
            "kind": self.names.kind,
            "verbs": VERBS,
        }
        if self.names.short_names:
            entry["shortNames"] = list(self.names.short_names)
        if self.names.categories:
            entry["categories"] = list(self.names.categories)
        entries = [entry]
        if self.has_status:
            entries.append(
                {
                    "name": f"{self.names.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.names.kind,
                    "verbs": STATUS_VERBS,
                }
            )
        return entries
