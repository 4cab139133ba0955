"""The graph a move of clusters moves, found on the source (the rules are described in :mod:`capa_py.move`):
the Cluster, the objects its specs reference (machines', machine deployments' and machine pools'
infrastructure and bootstrap data), the objects labelled with its name, its kubeconfig Secret, the Hardware
its TinkerbellMachines claim and, transitively, every object an object of the graph owns; ordered owners
first. The global objects the graph uses (identities) are found by :mod:`capa_py.move_identities`."""

from __future__ import annotations

import graphlib

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_templates import AWSClusterTemplate, AWSMachineTemplate
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.core import Secret
from capa_py.api.machinepool import AWSMachinePool, MachinePool
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject, ObjectReference
from capa_py.api.tinkerbell import Hardware, Template, Workflow
from capa_py.api.tinkerbell_capi import (
    HARDWARE_OWNER_NAME_LABEL,
    HARDWARE_OWNER_NAMESPACE_LABEL,
    TinkerbellCluster,
    TinkerbellMachine,
    TinkerbellMachineTemplate,
)
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"

MOVABLE_KINDS: tuple[type[KubeObject], ...] = (
    Cluster,
    AWSCluster,
    TinkerbellCluster,
    MachineDeployment,
    MachineSet,
    MachinePool,
    Machine,
    AWSMachine,
    AWSMachinePool,
    TinkerbellMachine,
    AWSClusterTemplate,
    AWSMachineTemplate,
    TinkerbellMachineTemplate,
    Hardware,
    Template,
    Workflow,
    Secret,
)
"""Every kind a move considers, in the order used between objects no owner reference orders."""

Key = tuple[str, str | None, str]
"""(kind, namespace, name)"""


def _key(obj: KubeObject) -> Key:
    return (obj.kind, obj.namespace, obj.name)


def _ref_key(ref: ObjectReference | None, namespace: str | None) -> Key | None:
    if ref is None or not ref.kind or not ref.name:
        return None
    return (ref.kind, ref.namespace or namespace, ref.name)


def _referenced(obj: KubeObject) -> list[Key]:
    """The objects ``obj``'s spec names."""
    ns = obj.namespace
    found: list[Key | None] = []
    if isinstance(obj, Cluster):
        found += [_ref_key(obj.spec.infrastructure_ref, ns), _ref_key(obj.spec.control_plane_ref, ns)]
        found.append(("Secret", ns, f"{obj.name}-kubeconfig"))
    elif isinstance(obj, MachineDeployment | MachineSet | MachinePool):
        found.append(_ref_key(obj.spec.template.spec.infrastructure_ref, ns))
        if obj.spec.template.spec.bootstrap.data_secret_name:
            found.append(("Secret", ns, obj.spec.template.spec.bootstrap.data_secret_name))
    elif isinstance(obj, Machine):
        found.append(_ref_key(obj.spec.infrastructure_ref, ns))
        found.append(_ref_key(obj.spec.bootstrap.config_ref, ns))
        if obj.spec.bootstrap.data_secret_name:
            found.append(("Secret", ns, obj.spec.bootstrap.data_secret_name))
    return [k for k in found if k is not None]


class Graph:
    """Discovery of the clusters' graph on the source (see the module docstring)."""

    def __init__(self, source: ObjectStore, moved_uids: set[str]) -> None:
        self.source = source
        self.moved_uids = moved_uids
        self.members: dict[str, KubeObject] = {}

    def discover(self, clusters: list[Cluster]) -> list[KubeObject]:
        for namespace in sorted({c.namespace or "" for c in clusters}):
            self._discover_namespace(namespace, [c for c in clusters if (c.namespace or "") == namespace])
        return self._ordered()

    def _candidates(self, namespace: str) -> list[KubeObject]:
        found: list[KubeObject] = []
        for kind in MOVABLE_KINDS[1:]:
            found.extend(self.source.list(kind, namespace=namespace))
        return found

    def _discover_namespace(self, namespace: str, clusters: list[Cluster]) -> None:
        names = {c.name for c in clusters}
        for c in clusters:
            self.members[c.uid] = c
        candidates = self._candidates(namespace)
        changed = True
        while changed:
            changed = False
            referenced = {k for o in self.members.values() for k in _referenced(o)}
            claimed = {
                o.spec.hardware_name
                for o in self.members.values()
                if isinstance(o, TinkerbellMachine) and o.spec.hardware_name
            }
            machines = {o.name for o in self.members.values() if isinstance(o, TinkerbellMachine)}
            for obj in candidates:
                if obj.uid in self.members:
                    continue
                labels = obj.metadata.labels
                belongs = (
                    labels.get(CLUSTER_NAME_LABEL) in names
                    or (isinstance(obj, Machine | MachinePool) and obj.spec.cluster_name in names)
                    or obj.uid in self.moved_uids
                    or _key(obj) in referenced
                    or any(r.uid in self.members for r in obj.metadata.owner_references)
                    or (
                        isinstance(obj, Hardware)
                        and (
                            obj.name in claimed
                            or (
                                labels.get(HARDWARE_OWNER_NAME_LABEL) in machines
                                and labels.get(HARDWARE_OWNER_NAMESPACE_LABEL, "") == namespace
                            )
                        )
                    )
                )
                if belongs:
                    self.members[obj.uid] = obj
                    changed = True

    def _ordered(self) -> list[KubeObject]:
        """Owners before their dependents; otherwise by :data:`MOVABLE_KINDS` order, then name."""
        rank = {k.KIND: i for i, k in enumerate(MOVABLE_KINDS)}
        sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
        for uid, obj in self.members.items():
            sorter.add(uid, *(r.uid for r in obj.metadata.owner_references if r.uid in self.members))
        sorter.prepare()
        ordered: list[KubeObject] = []
        while sorter.is_active():
            ready = sorted(
                sorter.get_ready(), key=lambda u: (rank[self.members[u].kind], _key(self.members[u]))
            )
            for uid in ready:
                ordered.append(self.members[uid])
                sorter.done(uid)
        return ordered


def select_clusters(store: ObjectStore, namespace: str | None, cluster: str | None) -> list[Cluster]:
    if cluster is not None:
        found = get_or_none(store, Cluster, cluster, namespace or "default")
        return [] if found is None else [found]
    return list(store.list(Cluster, namespace=namespace))


def discover(
    source: ObjectStore, namespace: str | None = None, cluster: str | None = None
) -> list[KubeObject]:
    """The graph a move of these clusters would move, owners first."""
    clusters = select_clusters(source, namespace, cluster)
    return Graph(source, set()).discover(clusters)
