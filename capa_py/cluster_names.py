"""One cluster per name and region in a store.

Every AWS resource of a cluster is found by the cluster's name (the ``sigs.k8s.io/cluster-api-provider-aws/
cluster/<name>`` tag, the load balancer and role names derived from it), not by its namespace. Two clusters
of one name in one region would therefore adopt each other's VPC and delete each other's resources, so
:func:`name_clashes` refuses a manifest that declares a cluster whose name and region another namespace of
the store (or of the same manifest) already uses. Cluster identity is the Cluster name: the
``cluster.x-k8s.io/cluster-name`` label of an AWSCluster, else the Cluster owning or referencing it, else its
own name; the region is the AWSCluster's ``spec.region``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from capa_py.api.aws import AWSCluster
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster
from capa_py.api.meta import KubeObject
from capa_py.store.protocol import ObjectStore


@dataclass(frozen=True)
class ClusterIdentity:
    namespace: str
    cluster: str
    region: str

    @property
    def owner(self) -> str:
        return f"{self.namespace}/{self.cluster}"


def _cluster_name(awscluster: AWSCluster, clusters: Sequence[Cluster]) -> str:
    labelled = awscluster.metadata.labels.get(CLUSTER_NAME_LABEL)
    if labelled:
        return labelled
    owner = next((r.name for r in awscluster.metadata.owner_references if r.kind == "Cluster"), None)
    if owner:
        return owner
    namespace = awscluster.metadata.namespace or "default"
    for cluster in clusters:
        ref = cluster.spec.infrastructure_ref
        if (
            (cluster.metadata.namespace or "default") == namespace
            and ref is not None
            and ref.kind == "AWSCluster"
            and ref.name == awscluster.name
        ):
            return cluster.name
    return awscluster.name


def identities(objects: Sequence[KubeObject], clusters: Sequence[Cluster]) -> list[ClusterIdentity]:
    """The identity of each AWSCluster among ``objects`` (``clusters``: the Clusters that may own them)."""
    return [
        ClusterIdentity(o.metadata.namespace or "default", _cluster_name(o, clusters), o.spec.region)
        for o in objects
        if isinstance(o, AWSCluster)
    ]


def name_clashes(store: ObjectStore, objects: Sequence[KubeObject]) -> list[str]:
    """Why ``objects`` may not be applied to ``store``: each cluster name and region they declare that
    another namespace already uses, in the store or earlier in ``objects`` (empty when none)."""
    manifest_clusters = [o for o in objects if isinstance(o, Cluster)]
    stored_clusters = list(store.list(Cluster))
    stored = identities(list(store.list(AWSCluster)), [*stored_clusters, *manifest_clusters])
    problems: list[str] = []
    seen: list[ClusterIdentity] = []
    for identity in identities(objects, [*manifest_clusters, *stored_clusters]):
        for where, others in (("in this store", stored), ("in this manifest", seen)):
            clash = next(
                (
                    o
                    for o in others
                    if (o.cluster, o.region) == (identity.cluster, identity.region)
                    and o.namespace != identity.namespace
                ),
                None,
            )
            if clash is not None:
                problems.append(
                    f"cluster {clash.owner} already uses the name {identity.cluster} in "
                    f"{identity.region or 'the default region'} {where}: cluster {identity.owner} "
                    "needs another name (a cluster's AWS resources are found by its name)"
                )
                break
        seen.append(identity)
    return problems
