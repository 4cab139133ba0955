"""What ``capa apply`` and ``capa delete --wait`` reconcile: the objects they were given and their relatives.

A state file may hold many clusters; applying one cluster's manifest must not reconcile (and so describe on
AWS) every other. The in-process manager is given a scope instead: the objects of the manifests, the
objects they depend on and the objects that depend on them, following the relations the controllers act on
(:mod:`controllers.core`):

* a Cluster depends on its infrastructure (``spec.infrastructureRef``) and the infrastructure on its
  Cluster (owner reference, or the ``cluster.x-k8s.io/cluster-name`` label);
* a Machine depends on its Cluster (``spec.clusterName``), its infrastructure machine and its bootstrap
  Secret (``spec.bootstrap.dataSecretName``); the infrastructure machine depends on its Machine;
* every object depends on its owners (owner references) and on the Cluster its label names;
* a TinkerbellMachine depends on the Workflow named after it, which it creates (the Workflow, once made,
  depends on the machine that owns it);
* a MachinePool depends on its Cluster, its infrastructure pool (``spec.template.spec.infrastructureRef``)
  and its bootstrap Secret; the infrastructure pool depends on its MachinePool;
* an AWSCluster depends on the identity its ``spec.identityRef`` names, a role identity on its
  ``sourceIdentityRef`` and a static identity on its Secret (so a wait for a cluster hears the identity
  it lacks being created, or its key rotated);
* a MachineDeployment or MachineSet depends on its Cluster (``spec.clusterName``); what they create while
  the wait runs (MachineSets ``<deployment>-<suffix>``, Machines ``<set>-<suffix>``, each Machine's
  infrastructure and Workflow named after it) is not stored when the scope is computed, so the scope also
  holds every object whose name starts with the name of a MachineDeployment or MachineSet in it and a dash.

For a goal of "ready" the scope is everything that depends on a target, transitively (so a Cluster brings
its machines, a changed Secret the machines that boot from it), together with everything those depend on
(a Machine alone brings its Cluster and infrastructure, not its sibling machines). For "gone" it is the
cascade: a deleted Cluster's infrastructure, Machines and infrastructure machines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_identity import MODEL_OF_KIND, AWSClusterRoleIdentity, AWSClusterStaticIdentity
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster, Machine
from capa_py.api.machinepool import AWSMachinePool, MachinePool
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject, ObjectReference
from capa_py.api.tinkerbell import Workflow
from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine
from capa_py.manifests.rbac import NAMESPACE
from capa_py.runtime.manager import key_of
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore

RELATED_KINDS: tuple[type[KubeObject], ...] = (
    Cluster,
    MachineDeployment,
    MachineSet,
    Machine,
    MachinePool,
    AWSCluster,
    AWSMachine,
    AWSMachinePool,
    TinkerbellCluster,
    TinkerbellMachine,
    Workflow,
)
"""The kinds whose objects relate targets to each other (read once, per namespace of the targets)."""


def _ref_key(ref: ObjectReference | None, namespace: str) -> ObjectKey | None:
    if ref is None or not ref.kind or not ref.name:
        return None
    return ObjectKey(ref.kind, ref.namespace or namespace, ref.name)


def depends_on(obj: KubeObject) -> set[ObjectKey]:
    """The objects ``obj``'s reconcile reads and waits on (whether they exist or not)."""
    namespace = obj.metadata.namespace or ""
    found: set[ObjectKey | None] = {
        ObjectKey(ref.kind, namespace, ref.name) for ref in obj.metadata.owner_references
    }
    cluster = obj.metadata.labels.get(CLUSTER_NAME_LABEL)
    if cluster:
        found.add(ObjectKey(Cluster.KIND, namespace, cluster))
    if isinstance(obj, Cluster):
        found.add(_ref_key(obj.spec.infrastructure_ref, namespace))
    elif isinstance(obj, Machine):
        found.add(ObjectKey(Cluster.KIND, namespace, obj.spec.cluster_name))
        found.add(_ref_key(obj.spec.infrastructure_ref, namespace))
        if obj.spec.bootstrap.data_secret_name:
            found.add(ObjectKey("Secret", namespace, obj.spec.bootstrap.data_secret_name))
    elif isinstance(obj, MachinePool):
        found.add(ObjectKey(Cluster.KIND, namespace, obj.spec.cluster_name))
        found.add(_ref_key(obj.spec.template.spec.infrastructure_ref, namespace))
        if obj.spec.template.spec.bootstrap.data_secret_name:
            found.add(ObjectKey("Secret", namespace, obj.spec.template.spec.bootstrap.data_secret_name))
    elif isinstance(obj, TinkerbellMachine):
        found.add(ObjectKey(Workflow.KIND, namespace, obj.name))
    elif isinstance(obj, AWSCluster) and obj.spec.identity_ref is not None:
        found.add(ObjectKey(obj.spec.identity_ref.kind, "", obj.spec.identity_ref.name))
    elif isinstance(obj, AWSClusterRoleIdentity) and obj.spec.source_identity_ref is not None:
        found.add(ObjectKey(obj.spec.source_identity_ref.kind, "", obj.spec.source_identity_ref.name))
    elif isinstance(obj, AWSClusterStaticIdentity):
        # Where the controllers read it (controllers.identity.Identities' secret namespace).
        found.add(ObjectKey("Secret", NAMESPACE, obj.spec.secret_ref))
    elif isinstance(obj, MachineDeployment | MachineSet):
        found.add(ObjectKey(Cluster.KIND, namespace, obj.spec.cluster_name))
    found.discard(key_of(obj))
    return {key for key in found if key is not None}


def _infrastructure_links(objects: Iterable[KubeObject]) -> Iterable[tuple[ObjectKey, ObjectKey]]:
    """(infrastructure object, the Cluster or Machine naming it): the infrastructure's own dependency,
    before it carries an owner reference or label that would say so."""
    for obj in objects:
        if isinstance(obj, Cluster | Machine):
            ref = _ref_key(obj.spec.infrastructure_ref, obj.metadata.namespace or "")
            if ref is not None:
                yield ref, key_of(obj)
        elif isinstance(obj, MachinePool):
            ref = _ref_key(obj.spec.template.spec.infrastructure_ref, obj.metadata.namespace or "")
            if ref is not None:
                yield ref, key_of(obj)


def _add_identities(store: ObjectStore, objects: dict[ObjectKey, KubeObject]) -> None:
    """The identities the AWSClusters among ``objects`` name, with their sources (read by name: only the
    chains in use)."""
    pending = [
        ObjectKey(o.spec.identity_ref.kind, "", o.spec.identity_ref.name)
        for o in objects.values()
        if isinstance(o, AWSCluster) and o.spec.identity_ref is not None
    ]
    while pending:
        key = pending.pop()
        model = MODEL_OF_KIND.get(key.kind)
        if key in objects or model is None:
            continue
        identity = get_or_none(store, model, key.name, None)
        if identity is None:
            continue
        objects[key] = identity
        if isinstance(identity, AWSClusterRoleIdentity) and identity.spec.source_identity_ref is not None:
            source = identity.spec.source_identity_ref
            pending.append(ObjectKey(source.kind, "", source.name))


def _closure(start: Iterable[ObjectKey], edges: dict[ObjectKey, set[ObjectKey]]) -> set[ObjectKey]:
    reached = set(start)
    frontier = list(reached)
    while frontier:
        for nxt in edges.get(frontier.pop(), ()):
            if nxt not in reached:
                reached.add(nxt)
                frontier.append(nxt)
    return reached


_GENERATORS = frozenset({MachineDeployment.KIND, MachineSet.KIND})


class Scope(frozenset[ObjectKey]):
    """The keys in scope, and every key named after a MachineDeployment or MachineSet among them (what they
    create later: ``<name>-...`` in the same namespace)."""

    prefixes: frozenset[tuple[str, str]]

    def __new__(cls, keys: Iterable[ObjectKey]) -> Scope:
        scope = super().__new__(cls, keys)
        scope.prefixes = frozenset(
            (key.namespace, key.name + "-") for key in scope if key.kind in _GENERATORS
        )
        return scope

    def __contains__(self, key: object) -> bool:
        if super().__contains__(key):
            return True
        if not isinstance(key, ObjectKey) or not self.prefixes:
            return False
        return any(key.namespace == ns and key.name.startswith(prefix) for ns, prefix in self.prefixes)


def reconcile_scope(
    store: ObjectStore, targets: Sequence[KubeObject], goal: Literal["ready", "gone"] = "ready"
) -> frozenset[ObjectKey]:
    """The keys a manager working towards ``goal`` for ``targets`` reconciles (see the module doc)."""
    namespaces = {t.metadata.namespace for t in targets if t.metadata.namespace}
    objects: dict[ObjectKey, KubeObject] = {}
    for namespace in sorted(namespaces):
        for kind in RELATED_KINDS:
            for obj in store.list(kind, namespace=namespace):
                objects[key_of(obj)] = obj
    for target in targets:
        objects.setdefault(key_of(target), target)
    _add_identities(store, objects)
    dependencies: dict[ObjectKey, set[ObjectKey]] = {key: depends_on(obj) for key, obj in objects.items()}
    for infrastructure, referrer in _infrastructure_links(objects.values()):
        dependencies.setdefault(infrastructure, set()).add(referrer)
    dependents: dict[ObjectKey, set[ObjectKey]] = defaultdict(set)
    for key, needs in dependencies.items():
        for need in needs:
            dependents[need].add(key)
    scope = _closure((key_of(t) for t in targets), dependents)
    if goal == "ready":
        scope = _closure(scope, dependencies)
    return Scope(scope)
