"""The columns ``capa get`` prints per kind, as kubectl prints them: the same definitions serve the tables
``capa serve`` sends (:mod:`capa_py.apiserver.tables`) and the command line's own tables."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Column = tuple[str, Callable[[dict[str, Any]], str]]


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's short age: ``42s``, ``7m``, ``3h``, ``12d``."""
    if not timestamp:
        return "<unknown>"
    created = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    seconds = int(((now or datetime.now(UTC)) - created).total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def _path(doc: dict[str, Any], path: str, default: str = "") -> str:
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    if isinstance(value, bool):
        return "true" if value else "false"
    return default if value is None else str(value)


def _endpoint(doc: dict[str, Any]) -> str:
    host = _path(doc, "spec.controlPlaneEndpoint.host")
    port = _path(doc, "spec.controlPlaneEndpoint.port", "0")
    return f"{host}:{port}" if host else ""


def _cluster_label(doc: dict[str, Any]) -> str:
    return str(doc.get("metadata", {}).get("labels", {}).get("cluster.x-k8s.io/cluster-name", ""))


def _age(doc: dict[str, Any]) -> str:
    return age(doc.get("metadata", {}).get("creationTimestamp"))


COLUMNS: dict[str, list[Column]] = {
    "Cluster": [
        ("PHASE", lambda d: _path(d, "status.phase")),
        ("INFRASTRUCTURE READY", lambda d: _path(d, "status.infrastructureReady", "false")),
        ("PAUSED", lambda d: _path(d, "spec.paused", "false")),
    ],
    "Machine": [
        ("CLUSTER", lambda d: _path(d, "spec.clusterName")),
        ("PHASE", lambda d: _path(d, "status.phase")),
        ("PROVIDERID", lambda d: _path(d, "spec.providerID")),
    ],
    # Cluster API's own columns (Desired is kubectl's -o wide only); AGE where Cluster API prints it.
    "MachineDeployment": [
        ("CLUSTER", lambda d: _path(d, "spec.clusterName")),
        ("DESIRED", lambda d: _path(d, "spec.replicas")),
        ("REPLICAS", lambda d: _path(d, "status.replicas", "0")),
        ("READY", lambda d: _path(d, "status.readyReplicas", "0")),
        ("UPDATED", lambda d: _path(d, "status.updatedReplicas", "0")),
        ("UNAVAILABLE", lambda d: _path(d, "status.unavailableReplicas", "0")),
        ("PHASE", lambda d: _path(d, "status.phase")),
        ("AGE", _age),
        ("VERSION", lambda d: _path(d, "spec.template.spec.version")),
    ],
    "MachineSet": [
        ("CLUSTER", lambda d: _path(d, "spec.clusterName")),
        ("DESIRED", lambda d: _path(d, "spec.replicas")),
        ("REPLICAS", lambda d: _path(d, "status.replicas", "0")),
        ("READY", lambda d: _path(d, "status.readyReplicas", "0")),
        ("AVAILABLE", lambda d: _path(d, "status.availableReplicas", "0")),
        ("AGE", _age),
        ("VERSION", lambda d: _path(d, "spec.template.spec.version")),
    ],
    "AWSCluster": [
        ("READY", lambda d: _path(d, "status.ready", "false")),
        ("VPC", lambda d: _path(d, "status.network.vpcId")),
        ("ENDPOINT", _endpoint),
        ("BASTION IP", lambda d: _path(d, "status.bastion.publicIp")),
    ],
    "AWSMachine": [
        ("READY", lambda d: _path(d, "status.ready", "false")),
        ("STATE", lambda d: _path(d, "status.instanceState")),
        ("INSTANCE", lambda d: _path(d, "status.instanceID")),
    ],
    "Secret": [
        ("TYPE", lambda d: _path(d, "type")),
        ("DATA", lambda d: str(len(d.get("data", {})))),
    ],
    "ConfigMap": [("DATA", lambda d: str(len(d.get("data") or {}) + len(d.get("binaryData") or {})))],
    "Lease": [("HOLDER", lambda d: _path(d, "spec.holderIdentity"))],
    "Namespace": [("STATUS", lambda d: _path(d, "status.phase", "Active"))],
    "Event": [
        ("TYPE", lambda d: _path(d, "type")),
        ("REASON", lambda d: _path(d, "reason")),
        ("OBJECT", lambda d: f"{_path(d, 'involvedObject.kind').lower()}/{_path(d, 'involvedObject.name')}"),
        ("COUNT", lambda d: _path(d, "count", "1")),
        ("MESSAGE", lambda d: _path(d, "message")),
    ],
    "TinkerbellCluster": [
        ("CLUSTER", _cluster_label),
        ("READY", lambda d: _path(d, "status.ready", "false")),
        ("ENDPOINT", _endpoint),
    ],
    "TinkerbellMachine": [
        ("CLUSTER", _cluster_label),
        ("HARDWARE", lambda d: _path(d, "spec.hardwareName")),
        ("PROVIDERID", lambda d: _path(d, "spec.providerID")),
        ("READY", lambda d: _path(d, "status.ready", "false")),
    ],
    # The Tinkerbell kinds: the columns of their CRDs (capa_py.manifests.crds.PRINTER_COLUMNS).
    "Hardware": [
        ("OSIE", lambda d: _path(d, "spec.osie.osieRef.name")),
        ("BMC", lambda d: _path(d, "spec.bmcRef.name")),
    ],
    "OSIE": [
        ("KERNEL", lambda d: _path(d, "spec.kernelUrl")),
        ("INITRD", lambda d: _path(d, "spec.initrdUrl")),
    ],
    "Workflow": [
        ("STATE", lambda d: _path(d, "status.state")),
        ("CURRENT ACTION", lambda d: _path(d, "status.currentAction")),
        ("REASON", lambda d: _path(d, "status.reason")),
        ("HARDWARE", lambda d: _path(d, "spec.hardwareRef.name")),
        ("TEMPLATE", lambda d: _path(d, "spec.templateRef.name")),
    ],
}

WIDE_COLUMNS: dict[str, frozenset[str]] = {
    "OSIE": frozenset({"INITRD"}),
    "MachineDeployment": frozenset({"DESIRED"}),
    "MachineSet": frozenset({"DESIRED"}),
}
"""Per kind, the columns printed only with ``-o wide`` (kubectl's priority 1)."""


AGE_COLUMN: Column = ("AGE", _age)
"""The column ``capa get`` adds to a kind whose columns have no AGE."""


def columns_for(kind: str, wide: bool = False) -> list[Column]:
    hidden = frozenset() if wide else WIDE_COLUMNS.get(kind, frozenset())
    return [column for column in COLUMNS.get(kind, []) if column[0] not in hidden]
