"""``apiextensions.k8s.io/v1`` CustomResourceDefinitions for every custom kind in the registry.

A kind is custom when its group is not a built-in Kubernetes one (the core group, ``*.k8s.io``): Cluster and
Machine (Cluster API core's ``cluster.x-k8s.io``), AWSCluster and AWSMachine, and whatever a provider
registers later. Names, scope and short names come from the registry; the schema from the models
(:mod:`capa_py.manifests.schema`); printer columns follow Cluster API Provider AWS's.

The infrastructure CRDs (group ``infrastructure.cluster.x-k8s.io``: the AWS and Tinkerbell infrastructure
kinds) carry the label clusterctl gives a provider's components, ``cluster.x-k8s.io/provider:
infrastructure-capa-py`` (:data:`capa_py.manifests.rbac.PROVIDER`). capa-py's stand-ins for Cluster API core's
kinds (Cluster, Machine) and its own ClusterConfig do not: they belong to no infrastructure provider, and a
Cluster CRD labelled ``cluster-api`` means Cluster API core is installed instead. Every CRD but the Tinkerbell
ones carries the contract labels ``cluster.x-k8s.io/<contract>: <the CRD's version>`` (``v1beta1`` and
``v1beta2`` on the infrastructure kinds, ``v1beta1`` on the others: Cluster, Machine, ClusterConfig) and the
category ``cluster-api``. The identity kinds' CRDs also carry ``clusterctl.cluster.x-k8s.io/move-hierarchy:
""`` as Cluster API Provider AWS's do, so ``clusterctl move`` copies identities (with the static identity's
Secret) as global objects. AWSCluster and AWSMachine have Cluster API Provider AWS's short names,
categories and printer columns.

The Tinkerbell CRDs (``tinkerbell.org``: Hardware, OSIE, Template, Workflow) are not Cluster API's: clusterctl
must not count them as part of a provider nor read a contract version from them. They carry
:data:`TINKERBELL_LABELS` (``app.kubernetes.io/name: capa-py``, ``app.kubernetes.io/component: tinkerbell``,
so ``kubectl get crds -l app.kubernetes.io/component=tinkerbell`` lists them) and the category
``tinkerbell`` (``kubectl get tinkerbell`` lists every object of the four kinds).
"""

from __future__ import annotations

from typing import Any

from capa_py.api.admission_kinds import CERT_MANAGER_GROUP
from capa_py.api.aws_identity import IDENTITY_KINDS_BY_NAME
from capa_py.api.meta import KubeObject
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.api.tinkerbell import TINKERBELL_API_VERSION
from capa_py.manifests.rbac import PROVIDER, PROVIDER_LABEL
from capa_py.manifests.schema import structural_schema

CONTRACT = "v1beta1"
"""The Cluster API contract of capa-py's kinds outside the infrastructure group (its own Cluster and
Machine, ClusterConfig): the label key is ``cluster.x-k8s.io/<contract>``."""
INFRASTRUCTURE_GROUP = "infrastructure.cluster.x-k8s.io"
INFRASTRUCTURE_CONTRACTS = ("v1beta1", "v1beta2")
"""The contracts capa-py's infrastructure kinds implement (both at once: ``capa_py.api.contract``); Cluster
API core picks the newest one it supports that the CRD's labels name."""
CATEGORIES = ["cluster-api"]
TINKERBELL_GROUP = TINKERBELL_API_VERSION.rpartition("/")[0]
TINKERBELL_CATEGORIES = ["tinkerbell"]
TINKERBELL_LABELS = {"app.kubernetes.io/name": "capa-py", "app.kubernetes.io/component": "tinkerbell"}

_CLUSTER_LABEL_PATH = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"


def _column(
    name: str, path: str, description: str, kind: str = "string", priority: int = 0
) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path, "description": description}
    if priority:
        column["priority"] = priority
    return column


_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "Cluster": [
        _column("Phase", ".status.phase", "Cluster status such as Pending/Provisioning/Provisioned/Deleting"),
        _column("Infrastructure Ready", ".status.infrastructureReady", "Cluster infrastructure is ready"),
        _AGE,
    ],
    "Machine": [
        _column("Cluster", ".spec.clusterName", "Cluster to which this Machine belongs"),
        _column("ProviderID", ".spec.providerID", "Provider ID"),
        _column("Phase", ".status.phase", "Machine status such as Provisioning/Running/Failed"),
        _AGE,
        _column("Version", ".spec.version", "Kubernetes version of the Machine"),
    ],
    "MachineDeployment": [
        _column("Cluster", ".spec.clusterName", "Cluster"),
        _column(
            "Desired",
            ".spec.replicas",
            "Total number of machines desired by this MachineDeployment",
            "integer",
            10,
        ),
        _column(
            "Replicas",
            ".status.replicas",
            "Total number of non-terminated machines targeted by this MachineDeployment",
            "integer",
        ),
        _column(
            "Ready",
            ".status.readyReplicas",
            "Total number of ready machines targeted by this MachineDeployment",
            "integer",
        ),
        _column(
            "Updated",
            ".status.updatedReplicas",
            "Total number of non-terminated machines targeted by this deployment that have the desired "
            "template spec",
            "integer",
        ),
        _column(
            "Unavailable",
            ".status.unavailableReplicas",
            "Total number of unavailable machines targeted by this MachineDeployment",
            "integer",
        ),
        _column(
            "Phase",
            ".status.phase",
            "MachineDeployment status such as ScalingUp/ScalingDown/Running/Failed/Unknown",
        ),
        {**_AGE, "description": "Time duration since creation of MachineDeployment"},
        _column(
            "Version",
            ".spec.template.spec.version",
            "Kubernetes version associated with this MachineDeployment",
        ),
    ],
    "MachineSet": [
        _column("Cluster", ".spec.clusterName", "Cluster"),
        _column(
            "Desired", ".spec.replicas", "Total number of machines desired by this machineset", "integer", 10
        ),
        _column(
            "Replicas",
            ".status.replicas",
            "Total number of non-terminated machines targeted by this machineset",
            "integer",
        ),
        _column(
            "Ready",
            ".status.readyReplicas",
            "Total number of ready machines targeted by this machineset.",
            "integer",
        ),
        _column(
            "Available",
            ".status.availableReplicas",
            "Total number of available machines (ready for at least minReadySeconds)",
            "integer",
        ),
        {**_AGE, "description": "Time duration since creation of MachineSet"},
        _column(
            "Version", ".spec.template.spec.version", "Kubernetes version associated with this MachineSet"
        ),
    ],
    # AWSCluster and AWSMachine: Cluster API Provider AWS's v1beta2 columns (names, types, paths,
    # priorities), so `kubectl get` reads the same whichever provider serves the kind. Like CAPA's, they
    # have no Age column. One difference: CAPA writes the VPC it made into spec.network.vpc.id, capa-py keeps
    # the spec as the user wrote it (that field names a VPC brought along) and records the VPC in use in
    # status.network.vpcId, so the VPC column reads the status.
    "AWSCluster": [
        _column("Cluster", _CLUSTER_LABEL_PATH, "Cluster to which this AWSCluster belongs"),
        _column("Ready", ".status.ready", "Cluster infrastructure is ready for EC2 instances"),
        _column("VPC", ".status.network.vpcId", "AWS VPC the cluster is using"),
        _column("Endpoint", ".spec.controlPlaneEndpoint", "API Endpoint", priority=1),
        _column("Bastion IP", ".status.bastion.publicIp", "Bastion IP address for breakglass access"),
    ],
    "AWSMachine": [
        _column("Cluster", _CLUSTER_LABEL_PATH, "Cluster to which this AWSMachine belongs"),
        _column("State", ".status.instanceState", "EC2 instance state"),
        _column("Ready", ".status.ready", "Machine ready status"),
        _column("InstanceID", ".spec.providerID", "EC2 instance ID"),
        _column(
            "Machine",
            '.metadata.ownerReferences[?(@.kind=="Machine")].name',
            "Machine object which owns this AWSMachine",
        ),
    ],
    "AWSClusterTemplate": [
        {**_AGE, "description": "Time duration since creation of AWSClusterTemplate"},
    ],
    "TinkerbellCluster": [
        _column("Cluster", _CLUSTER_LABEL_PATH, "Cluster to which this TinkerbellCluster belongs"),
        _column("Ready", ".status.ready", "TinkerbellCluster is ready"),
        _column("Endpoint", ".spec.controlPlaneEndpoint.host", "API Endpoint", priority=1),
        _AGE,
    ],
    "TinkerbellMachine": [
        _column("Cluster", _CLUSTER_LABEL_PATH, "Cluster to which this TinkerbellMachine belongs"),
        _column("Hardware", ".spec.hardwareName", "Hardware the machine was provisioned on"),
        _column("ProviderID", ".spec.providerID", "Provider ID"),
        _column("Ready", ".status.ready", "Machine ready status"),
        _AGE,
    ],
    # A Hardware's MACs and addresses are keys of a map, which no printer column's JSONPath prints
    # deterministically: the columns name what the Hardware boots and is managed by.
    "Hardware": [
        _column("OSIE", ".spec.osie.osieRef.name", "OSIE the Hardware netboots"),
        _column("BMC", ".spec.bmcRef.name", "Rufio Machine managing the Hardware's BMC"),
        _AGE,
    ],
    "OSIE": [
        _column("Kernel", ".spec.kernelUrl", "URL of the kernel"),
        _column("Initrd", ".spec.initrdUrl", "URL of the initrd", priority=1),
        _AGE,
    ],
    "Workflow": [
        _column("State", ".status.state", "Workflow state such as Pending/Running/Succeeded"),
        _column("Current Action", ".status.currentAction", "Action running or next to run"),
        _column("Reason", ".status.reason", "Why the workflow failed or was canceled"),
        _column("Hardware", ".spec.hardwareRef.name", "Hardware the workflow runs on"),
        _column("Template", ".spec.templateRef.name", "Template the actions are rendered from"),
        _AGE,
    ],
}
"""Per kind, kubectl's table columns; a kind not listed (Template: a count of actions has no JSONPath) gets
Age only. ``capa get`` prints the same columns (:data:`capa_py.api.columns.COLUMNS`)."""


SCALE_KINDS = frozenset({"MachineDeployment", "MachineSet"})
"""Kinds with a scale subresource (``kubectl scale machinedeployment``), as Cluster API defines them."""
SCALE_SUBRESOURCE = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}


def group_version(model: type[KubeObject]) -> tuple[str, str]:
    group, _, version = model.API_VERSION.rpartition("/")
    return group, version


def is_builtin_group(group: str) -> bool:
    """Kubernetes' own groups: the core group, groups without a dot (``apps``), ``*.k8s.io``.

    ``x-k8s.io`` (Kubernetes SIG projects such as Cluster API) is not one: those are CRDs.
    """
    return "." not in group or group == "k8s.io" or group.endswith((".k8s.io", ".kubernetes.io"))


INSTALLED_BY_OTHERS = (CERT_MANAGER_GROUP,)
"""Groups whose CRDs another project installs: capa serve stores their kinds, capa-py defines no CRD for
them and validates none of their objects."""


def custom_kinds(registry: KindRegistry = REGISTRY) -> list[type[KubeObject]]:
    """Every registered kind served by one of capa-py's CRDs, in name order (group, then plural)."""
    kinds = [
        m
        for m in registry.kinds()
        if not is_builtin_group(group_version(m)[0]) and group_version(m)[0] not in INSTALLED_BY_OTHERS
    ]
    return sorted(kinds, key=lambda m: (group_version(m)[0], m.PLURAL))


def is_tinkerbell_kind(model: type[KubeObject]) -> bool:
    return group_version(model)[0] == TINKERBELL_GROUP


def is_infrastructure_kind(model: type[KubeObject]) -> bool:
    """An infrastructure provider's kind (``infrastructure.cluster.x-k8s.io``): AWS and Tinkerbell."""
    return group_version(model)[0] == INFRASTRUCTURE_GROUP


MOVE_HIERARCHY_LABEL = "clusterctl.cluster.x-k8s.io/move-hierarchy"
"""On a CRD: ``clusterctl move`` takes every object of the kind, with what it owns, as global objects
(copied to the target, kept on the source)."""
MOVE_HIERARCHY_KINDS = frozenset(IDENTITY_KINDS_BY_NAME)
"""The kinds whose CRDs Cluster API Provider AWS labels :data:`MOVE_HIERARCHY_LABEL`: its identities."""


def crd_labels(model: type[KubeObject]) -> dict[str, str]:
    if is_tinkerbell_kind(model):
        return dict(TINKERBELL_LABELS)
    labels = contract_labels(model)
    if is_infrastructure_kind(model):
        labels = {PROVIDER_LABEL: PROVIDER, **labels}
    if model.KIND in MOVE_HIERARCHY_KINDS:
        labels[MOVE_HIERARCHY_LABEL] = ""
    return labels


def crd_name(model: type[KubeObject]) -> str:
    return f"{model.PLURAL}.{group_version(model)[0]}"


def contract_labels(model: type[KubeObject]) -> dict[str, str]:
    """``cluster.x-k8s.io/<contract>: <the version served>`` for each contract the kind implements."""
    version = group_version(model)[1]
    contracts = INFRASTRUCTURE_CONTRACTS if group_version(model)[0] == INFRASTRUCTURE_GROUP else (CONTRACT,)
    return {f"cluster.x-k8s.io/{contract}": version for contract in contracts}


def crd_for(model: type[KubeObject]) -> dict[str, Any]:
    """The CustomResourceDefinition serving one kind."""
    group, version = group_version(model)
    names: dict[str, Any] = {
        "kind": model.KIND,
        "listKind": f"{model.KIND}List",
        "plural": model.PLURAL,
        "singular": model.KIND.lower(),
        "categories": list(TINKERBELL_CATEGORIES if is_tinkerbell_kind(model) else CATEGORIES),
    }
    if model.SHORT_NAMES:
        names["shortNames"] = list(model.SHORT_NAMES)
    served: dict[str, Any] = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": structural_schema(model)},
        "additionalPrinterColumns": PRINTER_COLUMNS.get(model.KIND, [_AGE]),
    }
    if model.HAS_STATUS:
        served["subresources"] = {"status": {}}
    if model.KIND in SCALE_KINDS:
        served["subresources"]["scale"] = dict(SCALE_SUBRESOURCE)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": crd_name(model),
            "labels": crd_labels(model),
        },
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced" if model.NAMESPACED else "Cluster",
            "versions": [served],
        },
    }


CORE_GROUP = "cluster.x-k8s.io"
"""Cluster API core's group: Cluster and Machine. Where Cluster API is installed its CRDs and webhooks own
these kinds; capa-py's stand-ins are for clusters without it."""


def is_core_kind(model: type[KubeObject]) -> bool:
    return model.API_VERSION.rpartition("/")[0] == CORE_GROUP


def crds(registry: KindRegistry = REGISTRY, core: bool = True) -> list[dict[str, Any]]:
    """A CRD for every custom kind of the registry; ``core=False`` leaves out Cluster API core's kinds
    (Cluster, Machine), for a cluster where Cluster API itself installed them."""
    return [crd_for(model) for model in custom_kinds(registry) if core or not is_core_kind(model)]
