"""``apiextensions.k8s.io/v1`` CustomResourceDefinition, kept as a stored object.

The embedded store serves every kind capa-py knows whether or not its CRD is stored; CRDs are kept so that
``kubectl apply -f <(capa manifests crds)`` works against ``capa serve`` as against a real cluster, and so
that controllers can read the labels other providers put on them (Cluster API core marks its Cluster CRD
with ``cluster.x-k8s.io/provider: cluster-api``). Versions, schemas and conversion are stored as given (with
the API server's defaults for ``singular``, ``listKind`` and the conversion strategy); ``capa serve`` serves
the kinds of the other CRDs it stores (:mod:`capa_py.apiserver.crd_kinds`).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from pydantic import Field, field_validator

from capa_py.api.meta import FieldIssue, KubeModel, KubeObject


class CustomResourceDefinitionNames(KubeModel):
    plural: str = ""
    singular: str | None = None
    kind: str = ""
    list_kind: str | None = None
    short_names: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)


class CustomResourceDefinitionSpec(KubeModel):
    group: str = ""
    names: CustomResourceDefinitionNames = Field(default_factory=CustomResourceDefinitionNames)
    scope: str = "Namespaced"
    versions: list[dict[str, Any]] = Field(default_factory=list)
    conversion: dict[str, Any] | None = None
    preserve_unknown_fields: bool | None = None


class CustomResourceDefinitionStatus(KubeModel):
    conditions: list[dict[str, Any]] = Field(default_factory=list)
    accepted_names: dict[str, Any] | None = None
    stored_versions: list[str] = Field(default_factory=list)

    @field_validator("conditions", "stored_versions", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        """The API server answers a CRD's create with ``"conditions": null`` (none yet)."""
        return [] if value is None else value


class CustomResourceDefinition(KubeObject):
    """A ``CustomResourceDefinition``; its name must be ``<plural>.<group>``, as the API server requires."""

    API_VERSION: ClassVar[str] = "apiextensions.k8s.io/v1"
    KIND: ClassVar[str] = "CustomResourceDefinition"
    PLURAL: ClassVar[str] = "customresourcedefinitions"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("crd", "crds")
    NAMESPACED: ClassVar[bool] = False

    spec: CustomResourceDefinitionSpec = Field(default_factory=CustomResourceDefinitionSpec)
    status: CustomResourceDefinitionStatus = Field(default_factory=CustomResourceDefinitionStatus)

    def model_post_init(self, context: Any, /) -> None:
        """The API server's defaults: ``singular`` the lowercased kind, ``listKind`` the kind + ``List``,
        the conversion strategy ``None``."""
        super().model_post_init(context)
        names = self.spec.names
        if names.kind:
            names.singular = names.singular or names.kind.lower()
            names.list_kind = names.list_kind or f"{names.kind}List"
        if self.spec.conversion is None and self.spec.versions:
            self.spec.conversion = {"strategy": "None"}

    def to_dict(self) -> dict[str, Any]:
        """Versions (schemas, ``subresources: {status: {}}``) and conversion are served as written: an
        empty map there means something, so it is not dropped as other empty fields are."""
        doc = super().to_dict()
        raw = self.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
        for name in ("versions", "conversion"):
            if raw.get(name):
                doc.setdefault("spec", {})[name] = copy.deepcopy(raw[name])
        return doc

    def semantic_issues(self) -> list[FieldIssue]:
        issues = super().semantic_issues()
        spec = self.spec
        if not spec.group:
            issues.append(FieldIssue(path="spec.group", message="Required value"))
        if not spec.names.plural:
            issues.append(FieldIssue(path="spec.names.plural", message="Required value"))
        if not spec.names.kind:
            issues.append(FieldIssue(path="spec.names.kind", message="Required value"))
        if spec.scope not in ("Namespaced", "Cluster"):
            issues.append(
                FieldIssue(path="spec.scope", message=f"must be Namespaced or Cluster, not {spec.scope!r}")
            )
        if spec.group and spec.names.plural and self.metadata.name != f"{spec.names.plural}.{spec.group}":
            issues.append(
                FieldIssue(
                    path="metadata.name",
                    message=f'must be spec.names.plural+"."+spec.group ({spec.names.plural}.{spec.group})',
                )
            )
        if not spec.versions:
            issues.append(
                FieldIssue(path="spec.versions", message="must have exactly one version marked as storage")
            )
        else:
            storage = [v for v in spec.versions if v.get("storage")]
            if len(storage) != 1:
                issues.append(
                    FieldIssue(
                        path="spec.versions", message="must have exactly one version marked as storage"
                    )
                )
        return issues
