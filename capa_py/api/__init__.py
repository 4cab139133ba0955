"""Kubernetes-shaped models of every object kind capa-py reads or writes.

This package knows nothing of AWS calls, stores or the CLI: it is the vocabulary the other layers share.
"""

from capa_py.api.aws import (
    AWSCLUSTER_FINALIZER,
    AWSMACHINE_FINALIZER,
    AWSCluster,
    AWSClusterSpec,
    AWSClusterStatus,
    AWSMachine,
    AWSMachineSpec,
    AWSMachineStatus,
    IntentRecord,
    RecordedResource,
)
from capa_py.api.cluster import (
    CLUSTER_NAME_LABEL,
    CONTROL_PLANE_LABEL,
    PAUSED_ANNOTATION,
    Cluster,
    Machine,
)
from capa_py.api.core import Secret
from capa_py.api.loader import ManifestError, ManifestProblem, load_manifest_text, load_manifests
from capa_py.api.meta import (
    Condition,
    FieldIssue,
    KubeModel,
    KubeObject,
    ObjectMeta,
    ObjectReference,
    OwnerReference,
    utcnow,
)
from capa_py.api.registry import REGISTRY, KindRegistry, UnknownKind

__all__ = [
    "AWSCLUSTER_FINALIZER",
    "AWSMACHINE_FINALIZER",
    "CLUSTER_NAME_LABEL",
    "CONTROL_PLANE_LABEL",
    "PAUSED_ANNOTATION",
    "REGISTRY",
    "AWSCluster",
    "AWSClusterSpec",
    "AWSClusterStatus",
    "AWSMachine",
    "AWSMachineSpec",
    "AWSMachineStatus",
    "Cluster",
    "Condition",
    "FieldIssue",
    "IntentRecord",
    "KindRegistry",
    "KubeModel",
    "KubeObject",
    "Machine",
    "ManifestError",
    "ManifestProblem",
    "ObjectMeta",
    "ObjectReference",
    "OwnerReference",
    "RecordedResource",
    "Secret",
    "UnknownKind",
    "load_manifest_text",
    "load_manifests",
    "utcnow",
]
