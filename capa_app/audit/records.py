"""The store's side of the audit: what AWSCluster/AWSMachine/AWSMachinePool statuses record, the intents
they wait on, and which clusters still have objects.

A resource's cluster is the name in its owned tag; an object's cluster is its
``cluster.x-k8s.io/cluster-name`` label, else its owning Cluster, else its own name — the rule
``capa resources`` uses (:mod:`capa_py.inventory`), so both commands name clusters alike. An AWSMachine
is in its AWSCluster's region; one whose AWSCluster is gone is taken to be in the default region.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from capa_py.api.aws import AWSCluster, AWSMachine, IntentRecord
from capa_py.api.cluster import Cluster
from capa_py.api.machinepool import AWSMachinePool
from capa_py.engine.tags import STORE_UID_ANNOTATION
from capa_py.inventory import cluster_of
from capa_py.store.protocol import ObjectStore


@dataclass(frozen=True)
class Record:
    cluster: str
    owner: str
    namespace: str
    region: str
    role: str
    kind: str
    id: str
    created_at: datetime | None = None


@dataclass(frozen=True)
class Intent:
    cluster: str
    owner: str
    namespace: str
    region: str
    role: str
    record: IntentRecord


@dataclass
class StoreView:
    records: list[Record] = field(default_factory=list)
    intents: list[Intent] = field(default_factory=list)
    clusters: frozenset[str] = frozenset()
    """Names of clusters that have a Cluster or an AWSCluster object."""
    regions: frozenset[str] = frozenset()
    """Regions the AWSClusters name."""
    store_uid: str = ""
    """This store's uid: resources carrying another one (or none) in ``capa-py.io/store`` are foreign."""
    moved_from: dict[str, str] = field(default_factory=dict)
    """Cluster name → the uid of the store a move brought the cluster from (its AWSCluster's
    ``capa-py.io/store-uid``): that cluster's resources carry that uid and are this store's."""

    def store_uid_of(self, cluster: str | None) -> str:
        """The store uid the resources of ``cluster`` carry when they are this store's."""
        return self.moved_from.get(cluster, self.store_uid) if cluster else self.store_uid

    def __post_init__(self) -> None:
        self._by_id = {(r.kind, r.id): r for r in self.records}
        self._by_role: dict[tuple[str, str], list[Record]] = {}
        for record in self.records:
            self._by_role.setdefault((record.cluster, record.role), []).append(record)

    def recorded(self, kind: str, resource_id: str) -> Record | None:
        return self._by_id.get((kind, resource_id))

    def records_of_role(self, cluster: str, role: str) -> list[Record]:
        return self._by_role.get((cluster, role), [])

    def cluster_exists(self, cluster: str) -> bool:
        return cluster in self.clusters


EVERY_IDENTITY = "*"
"""For :func:`read_store`: the records of every cluster, whatever account holds them."""


def identity_of(awscluster: AWSCluster) -> str | None:
    """``Kind/name`` of the identity whose account holds the cluster's resources (None: the controller's
    own credentials)."""
    ref = awscluster.spec.identity_ref
    return f"{ref.kind}/{ref.name}" if ref is not None else None


def read_store(store: ObjectStore, default_region: str, identity: str | None = None) -> StoreView:
    """Everything the classification needs from the store, read once: the records of the clusters whose
    resources live in the account audited (those of ``identity``, ``Kind/name``; None: the clusters
    without one)."""
    every = list(store.list(AWSCluster))
    awsclusters = [c for c in every if identity == EVERY_IDENTITY or identity_of(c) == identity]
    elsewhere = {(c.metadata.namespace or "", cluster_of(c)) for c in every if c not in awsclusters}
    region_of = {(c.metadata.namespace or "", cluster_of(c)): c.spec.region for c in awsclusters}
    candidates: list[AWSCluster | AWSMachine | AWSMachinePool] = [
        *awsclusters,
        *store.list(AWSMachine),
        *store.list(AWSMachinePool),
    ]
    owners: Iterable[AWSCluster | AWSMachine | AWSMachinePool] = [
        o for o in candidates if (o.metadata.namespace or "", cluster_of(o)) not in elsewhere
    ]
    records: list[Record] = []
    intents: list[Intent] = []
    for obj in owners:
        cluster = cluster_of(obj)
        namespace = obj.metadata.namespace or ""
        region = region_of.get((namespace, cluster), default_region)
        owner = f"{obj.KIND.lower()}/{obj.name}"
        for role, resource in sorted(obj.status.resources.items()):
            kind, created_at = resource.kind, resource.created_at
            records.append(Record(cluster, owner, namespace, region, role, kind, resource.id, created_at))
        for role, intent in sorted(obj.status.intents.items()):
            intents.append(Intent(cluster, owner, namespace, region, role, intent))
    clusters = {c.name for c in store.list(Cluster)} | {cluster_of(c) for c in every}
    return StoreView(
        records=records,
        intents=intents,
        clusters=frozenset(clusters),
        regions=frozenset(c.spec.region for c in awsclusters),
        store_uid=store.uid,
        moved_from={
            cluster_of(c): c.metadata.annotations[STORE_UID_ANNOTATION]
            for c in awsclusters
            if c.metadata.annotations.get(STORE_UID_ANNOTATION)
        },
    )
