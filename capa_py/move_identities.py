"""The global objects a move of clusters carries: the AWS identities its AWSClusters use.

Cluster API Provider AWS's identity kinds (AWSClusterControllerIdentity, AWSClusterStaticIdentity,
AWSClusterRoleIdentity) are cluster-scoped, and CAPA labels their CRDs
``clusterctl.cluster.x-k8s.io/move-hierarchy``, so ``clusterctl move`` takes them, with what they own (the
static identity's Secret, which CAPA's controller makes the identity own), as *global* objects: created on
the target when absent there, left as they are when present, never deleted from the source.

capa-py's move does the same for the identities a moved cluster uses, found by following references rather
than by taking every identity of the source: each moved AWSCluster's (and AWSClusterTemplate's)
``spec.identityRef``, each role identity's ``spec.sourceIdentityRef`` in turn, and each static identity's
``spec.secretRef`` (a Secret in the controller's namespace). The list is ordered sources first, each static
identity followed by its Secret, so owner references are remapped when the Secret is copied.

On the target a global object is:

* created (annotated with the source uid, as every moved object) when absent;
* left as it is when a move put it there from this source (an identity edited on the target since is not
  overwritten), or when it is already the same (same spec; for a Secret, the same type and values);
* otherwise a conflict: the move refuses to start (:func:`conflicts`), since the moved cluster would act
  with other credentials than on the source.

A referenced identity or Secret the source lacks is reported (:func:`find_identities`'s ``missing``) and not
invented: the cluster was already unable to reach AWS on the source.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from capa_py.api.aws import AWSCluster
from capa_py.api.aws_identity import (
    MODEL_OF_KIND,
    AWSClusterRoleIdentity,
    AWSClusterStaticIdentity,
    AWSIdentityReference,
)
from capa_py.api.aws_templates import AWSClusterTemplate
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.manifests.crds import MOVE_HIERARCHY_LABEL
from capa_py.manifests.rbac import NAMESPACE
from capa_py.store.errors import NotFound, StoreError
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore

IDENTITY_SECRET_NAMESPACE = NAMESPACE
"""Where a static identity's Secret lives: the controller's namespace, where the controller reads it."""


@dataclass
class Identities:
    """The global objects a graph uses, found on the source."""

    objects: list[KubeObject] = field(default_factory=list)
    """Identities (sources first), each static identity followed by its Secret."""
    missing: list[str] = field(default_factory=list)
    """What a moved object references and the source lacks (``Kind name``, ``Secret namespace/name``)."""


def _identity_refs(graph: Iterable[KubeObject]) -> list[AWSIdentityReference]:
    refs: list[AWSIdentityReference] = []
    for obj in graph:
        if isinstance(obj, AWSCluster) and obj.spec.identity_ref is not None:
            refs.append(obj.spec.identity_ref)
        elif isinstance(obj, AWSClusterTemplate) and obj.spec.template.spec.identity_ref is not None:
            refs.append(obj.spec.template.spec.identity_ref)
    return refs


def find_identities(
    source: ObjectStore, graph: Iterable[KubeObject], secret_namespace: str = IDENTITY_SECRET_NAMESPACE
) -> Identities:
    """The identities (and static identities' Secrets) the objects of ``graph`` use, sources first."""
    found = Identities()
    seen: set[tuple[str, str]] = set()

    def visit(ref: AWSIdentityReference, chain: tuple[tuple[str, str], ...]) -> None:
        key = (ref.kind, ref.name)
        if key in seen or key in chain:
            return  # already taken, or a cycle (the controller refuses it; the move copies each once)
        identity = get_or_none(source, MODEL_OF_KIND[ref.kind], ref.name, None)
        if identity is None:
            seen.add(key)
            found.missing.append(f"{ref.kind} {ref.name}")
            return
        if isinstance(identity, AWSClusterRoleIdentity) and identity.spec.source_identity_ref is not None:
            visit(identity.spec.source_identity_ref, (*chain, key))
        seen.add(key)
        found.objects.append(identity)
        if isinstance(identity, AWSClusterStaticIdentity):
            secret = get_or_none(source, Secret, identity.spec.secret_ref, secret_namespace)
            if secret is None:
                found.missing.append(f"Secret {secret_namespace}/{identity.spec.secret_ref}")
            else:
                found.objects.append(secret)

    for ref in _identity_refs(graph):
        visit(ref, ())
    return found


def same_content(a: KubeObject, b: KubeObject) -> bool:
    """Whether two global objects say the same: an identity's spec; a Secret's type and values."""
    if isinstance(a, Secret) and isinstance(b, Secret):
        keys = {*a.data, *a.string_data}
        if keys != {*b.data, *b.string_data} or a.type != b.type:
            return False
        return all(a.value(k) == b.value(k) for k in keys)
    return a.to_dict().get("spec") == b.to_dict().get("spec")


def on_target(target: ObjectStore, obj: KubeObject) -> KubeObject | None:
    """The object of ``obj``'s kind and name on the target, if any."""
    try:
        return target.get(type(obj), obj.name, obj.namespace)
    except NotFound:
        return None


def conflicts(target: ObjectStore, objects: Iterable[KubeObject], moved_from: str) -> list[str]:
    """Why global objects cannot be carried: one of the same name on the target that no move from this
    source put there and that says something else. ``moved_from`` is the annotation naming a copy's
    source uid. Secret values are compared, never shown."""
    found: list[str] = []
    for obj in objects:
        try:
            existing = on_target(target, obj)
        except StoreError as exc:
            found.append(f"cannot read {obj.ref()} on the target: {exc}")
            continue
        if existing is None or existing.metadata.annotations.get(moved_from) == obj.uid:
            continue
        if not same_content(existing, obj):
            what = "other values" if isinstance(obj, Secret) else "another spec"
            found.append(f"{existing.ref()} exists on the target with {what}")
    return found


__all__ = [
    "IDENTITY_SECRET_NAMESPACE",
    "MOVE_HIERARCHY_LABEL",
    "Identities",
    "conflicts",
    "find_identities",
    "on_target",
    "same_content",
]
