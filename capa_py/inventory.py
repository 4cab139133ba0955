"""What the objects record: every AWS resource in AWSCluster/AWSMachine statuses.

Used by ``capa resources`` and by the orphan audit (the "managed" side of its comparison). Checking the rows
live against AWS goes through the resource classes: ``capa_app.inventory.verify_tags``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import CLUSTER_NAME_LABEL
from capa_py.api.machinepool import AWSMachinePool
from capa_py.store.protocol import ObjectStore


@dataclass
class RecordedRow:
    cluster: str
    owner: str
    namespace: str
    region: str
    role: str
    kind: str
    id: str
    strategy: str
    tags_complete: bool | None
    state: str = "recorded"
    additional_tags: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "owner": self.owner,
            "namespace": self.namespace,
            "region": self.region,
            "role": self.role,
            "kind": self.kind,
            "id": self.id,
            "strategy": self.strategy,
            "tagsComplete": self.tags_complete,
            "state": self.state,
        }

    def as_row(self) -> list[str]:
        tags = "n/a" if self.tags_complete is None else ("complete" if self.tags_complete else "MISSING")
        return [self.cluster, self.owner, self.role, self.kind, self.id, self.strategy, tags, self.state]


def cluster_of(obj: AWSCluster | AWSMachine | AWSMachinePool) -> str:
    """The cluster an AWSCluster or AWSMachine belongs to: its cluster-name label, Cluster owner, or name."""
    owner = next((r.name for r in obj.metadata.owner_references if r.kind == "Cluster"), None)
    return obj.metadata.labels.get(CLUSTER_NAME_LABEL) or owner or obj.name


def recorded_resources(
    store: ObjectStore, cluster: str | None = None, namespace: str | None = None
) -> list[RecordedRow]:
    rows: list[RecordedRow] = []
    regions: dict[tuple[str, str], str] = {}
    clusters = list(store.list(AWSCluster, namespace=namespace))
    for awscluster in clusters:
        regions[(awscluster.metadata.namespace or "", cluster_of(awscluster))] = awscluster.spec.region
    owners: list[AWSCluster | AWSMachine | AWSMachinePool] = [
        *clusters,
        *store.list(AWSMachine, namespace=namespace),
        *store.list(AWSMachinePool, namespace=namespace),
    ]
    for obj in owners:
        name = cluster_of(obj)
        if cluster is not None and name != cluster:
            continue
        region = regions.get((obj.metadata.namespace or "", name), "")
        extra = dict(obj.spec.additional_tags)
        for role, record in sorted(obj.status.resources.items()):
            rows.append(
                RecordedRow(
                    name,
                    f"{obj.KIND.lower()}/{obj.name}",
                    obj.metadata.namespace or "",
                    region,
                    role,
                    record.kind,
                    record.id,
                    record.strategy or "",
                    record.tags_complete,
                    "recorded",
                    extra,
                )
            )
    return rows
