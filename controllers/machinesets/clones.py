"""Cloning an infrastructure template for a Machine, as Cluster API core does.

The clone is an object of the templated kind, named after the Machine, whose spec is the template's
``spec.template.spec``, with the template's ``spec.template.metadata`` labels and annotations and
``cluster.x-k8s.io/cloned-from-name``/``cloned-from-groupkind``.
"""

from __future__ import annotations

from capa_py.api.cluster import CLUSTER_NAME_LABEL
from capa_py.api.machinesets import CLONED_FROM_GROUPKIND_ANNOTATION, CLONED_FROM_NAME_ANNOTATION
from capa_py.api.meta import KubeObject, ObjectReference, OwnerReference
from capa_py.api.registry import REGISTRY, KindRegistry, UnknownKind
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore


class TemplateError(Exception):
    """The infrastructure template cannot be cloned (unknown kind, not found)."""


def templated_kind(template_kind: type[KubeObject]) -> str:
    """The kind a template kind stamps out: its ``TEMPLATED_KIND``, else its name without ``Template``."""
    named = getattr(template_kind, "TEMPLATED_KIND", None)
    return str(named) if named else template_kind.KIND.removesuffix("Template")


def cloned_kinds(
    ref: ObjectReference, registry: KindRegistry = REGISTRY
) -> tuple[type[KubeObject], type[KubeObject]]:
    """The template kind ``ref`` names and the kind it stamps out; raises TemplateError."""
    if not ref.api_version or not ref.kind or not ref.name:
        raise TemplateError("spec.template.spec.infrastructureRef needs apiVersion, kind and name")
    try:
        template_kind = registry.for_gvk(ref.api_version, ref.kind)
    except UnknownKind:
        raise TemplateError(f"unknown infrastructure template kind {ref.api_version}/{ref.kind}") from None
    kind_name = templated_kind(template_kind)
    try:
        return template_kind, registry.for_gvk(ref.api_version, kind_name)
    except UnknownKind:
        raise TemplateError(f"{ref.kind} stamps out {kind_name}, which is not a known kind") from None


def clone_from_template(
    store: ObjectStore,
    ref: ObjectReference,
    name: str,
    namespace: str,
    cluster_name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    owner: OwnerReference,
    registry: KindRegistry = REGISTRY,
) -> KubeObject:
    """Create the object ``ref``'s template stamps out, named ``name``; raises TemplateError (and
    AlreadyExists when an object of that kind and name exists)."""
    template_kind, target = cloned_kinds(ref, registry)
    template = get_or_none(store, template_kind, ref.name or "", ref.namespace or namespace)
    if template is None:
        raise TemplateError(f"{ref.kind} {ref.namespace or namespace}/{ref.name} not found")
    resource = template.to_dict().get("spec", {}).get("template", {})
    meta = resource.get("metadata", {})
    group = (ref.api_version or "").rpartition("/")[0]
    document = {
        "apiVersion": ref.api_version,
        "kind": target.KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**meta.get("labels", {}), **labels, CLUSTER_NAME_LABEL: cluster_name},
            "annotations": {
                **meta.get("annotations", {}),
                **annotations,
                CLONED_FROM_NAME_ANNOTATION: template.name,
                CLONED_FROM_GROUPKIND_ANNOTATION: f"{ref.kind}.{group}" if group else ref.kind,
            },
            "ownerReferences": [owner.model_dump(mode="json", by_alias=True, exclude_none=True)],
        },
        "spec": resource.get("spec", {}),
    }
    return store.create(target.from_dict(document))
