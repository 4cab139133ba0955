"""RBAC for the controller process: a ServiceAccount, a ClusterRole with exactly the verbs it uses, a binding.

:data:`ACCESS` is the list of what the controllers and leader election request from the API server, by
group and resource; ``tests/manifests/test_rbac.py`` derives the same list by recording every request a
real create and delete of the example cluster makes, so a controller that starts reading or writing
something new fails that test until it is added here.

Store operations map onto API verbs one to one (``get``, ``list``, ``watch``, ``create``, ``update``,
``delete``); a status write is ``update`` on ``<plural>/status``. A store that writes with PATCH must add
``patch`` here. Where the OwnerReferencesPermissionEnforcement admission plugin is on, a write that sets an
owner reference blocking its owner's deletion (``blockOwnerDeletion``, which every controlling reference
capa-py sets has) also needs ``update`` on the *owner's* ``<plural>/finalizers``, and changing an object's
owner references needs ``delete`` on it: the Cluster owns its AWSCluster and the Machine its AWSMachine,
so ``clusters/finalizers`` and ``machines/finalizers`` are granted (the infrastructure kinds own nothing).
``tests/realkube`` runs the controller on a real API server with that plugin on and compares the audit log
with this role. :data:`OUTSIDE_THE_RECORDING` lists what the controller process needs that the in-process
recording cannot see, each with its reason; :data:`READ_FROM_THE_CACHE` what it records but the process
never asks the API server for.
"""

from __future__ import annotations

from typing import Any

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_identity import (
    AWSClusterControllerIdentity,
    AWSClusterRoleIdentity,
    AWSClusterStaticIdentity,
)
from capa_py.api.aws_templates import AWSMachineTemplate
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.coordination import Lease
from capa_py.api.core import ConfigMap, Event, Namespace, Secret
from capa_py.api.machinepool import AWSMachinePool, MachinePool
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import OSIE, Hardware, Template, Workflow
from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine, TinkerbellMachineTemplate

NAMESPACE = "capa-py-system"
"""capa-py's own namespace: Cluster API Provider AWS (CAPA) installs into ``capa-system``, and deleting one
provider's components deletes its namespace, so the two never share one."""
SERVICE_ACCOUNT = "capa-py-controller-manager"
CLUSTER_ROLE = "capa-py-manager-role"
CLUSTER_ROLE_BINDING = "capa-py-manager-rolebinding"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
PROVIDER = "infrastructure-capa-py"
"""The value clusterctl gives ``cluster.x-k8s.io/provider`` on the components of the infrastructure
provider named ``capa-py`` (``infrastructure-<name>``)."""
COMMON_LABELS = {PROVIDER_LABEL: PROVIDER, "app.kubernetes.io/name": "capa-py"}

_WATCHED = ("get", "list", "watch")

ACCESS: tuple[tuple[type[KubeObject], str, tuple[str, ...]], ...] = (
    # Cluster API core's kinds: the minimal core controller finalises them, writes their status and the
    # Cluster's endpoint, and deletes a deleted Cluster's Machines. The finalizers subresource: the owner of
    # a controlling reference that blocks deletion (Cluster → AWSCluster, Machine → AWSMachine).
    (Cluster, "", (*_WATCHED, "update")),
    (Cluster, "status", ("update",)),
    (Cluster, "finalizers", ("update",)),
    (Machine, "", (*_WATCHED, "update", "delete")),
    (Machine, "status", ("update",)),
    (Machine, "finalizers", ("update",)),
    # The infrastructure kinds: owner references, labels and finalizers, status, and the cascade.
    (AWSCluster, "", (*_WATCHED, "update", "delete")),
    (AWSCluster, "status", ("update",)),
    (AWSMachine, "", (*_WATCHED, "update", "delete")),
    (AWSMachine, "status", ("update",)),
    # The bootstrap data a machine launches with, watched so that a machine waiting for it starts when it
    # appears; read from the watch cache (READ_FROM_THE_CACHE), never one by one.
    (Secret, "", ("list", "watch")),
    # Leader election: a waiting candidate watches the record, to take it at once when it is released.
    (Lease, "", ("get", "create", "update", "watch")),
    # Kubernetes Events (capa_py.runtime.events): written once, then counted again with an update.
    (Event, "", ("create", "get", "update")),
)

OUTSIDE_THE_RECORDING: tuple[tuple[type[KubeObject], str, tuple[str, ...], str], ...] = (
    (
        ConfigMap,
        "",
        ("get", "create"),
        "the kube store keeps its uid in ConfigMap capa-py-system/capa-py-store, created on first use",
    ),
    (
        CustomResourceDefinition,
        "",
        ("get",),
        "`capa controller --core-controllers auto` reads the Cluster CRD's provider label, once at start",
    ),
)
"""What the controller process requests beyond the in-process create and delete the RBAC test records (on
the SQLite store, with the core controllers on), each with the reason it is needed."""

READ_FROM_THE_CACHE: tuple[tuple[type[KubeObject], str, str], ...] = (
    (
        Secret,
        "get",
        "the controllers read bootstrap Secrets (and a static identity's Secret) by name; `capa controller` "
        "answers that from its Secret watch, so its ServiceAccount lists and watches Secrets but never gets "
        "one",
    ),
)
"""Requests the in-process recording sees (its controllers read the store itself) that `capa controller`
serves from its informers' cache instead, so the ClusterRole does not grant them."""

TINKERBELL_ACCESS: tuple[tuple[type[KubeObject], str, tuple[str, ...]], ...] = (
    # The workflow controller prepares and supervises Workflows: their finalizer, their status (rendered
    # actions, state and timeouts), and the spec it never changes but must update to remove the finalizer.
    # The TinkerbellMachine controller creates a machine's Workflow and deletes it with the machine.
    (Workflow, "", (*_WATCHED, "create", "update", "delete")),
    (Workflow, "status", ("update",)),
    (Workflow, "finalizers", ("update",)),
    # What a Workflow is rendered from, watched so that a workflow waiting for one resumes when it appears;
    # the TinkerbellMachine controller claims and releases Hardware (labels, user-data) and creates and
    # deletes its machine's Template.
    (Hardware, "", (*_WATCHED, "update")),
    (Template, "", (*_WATCHED, "create", "delete")),
    (OSIE, "", _WATCHED),
    # The bare-metal provider's kinds, as the AWS ones: owner references, labels, finalizers, status and
    # the cascade from Cluster API core.
    (TinkerbellCluster, "", (*_WATCHED, "update", "delete")),
    (TinkerbellCluster, "status", ("update",)),
    (TinkerbellMachine, "", (*_WATCHED, "update", "delete")),
    (TinkerbellMachine, "status", ("update",)),
    (TinkerbellMachine, "finalizers", ("update",)),
)
"""What the Tinkerbell workflow controller and the bare-metal provider's controllers request (the RBAC
test's recording covers the AWS side; the provider's tests record theirs)."""


MACHINE_SET_ACCESS: tuple[tuple[type[KubeObject], str, tuple[str, ...]], ...] = (
    # Cluster API core's MachineDeployment and MachineSet controllers: a deployment's finalizer, labels,
    # Cluster owner reference and revision, its MachineSets (created, scaled, deleted), their Machines and
    # each Machine's infrastructure cloned from a template (read, and given an owner reference to the
    # Cluster: an update changing owner references needs delete on it). The finalizers
    # subresources: the controlling references MachineDeployment → MachineSet → Machine block deletion.
    (MachineDeployment, "", (*_WATCHED, "update", "delete")),
    (MachineDeployment, "status", ("update",)),
    (MachineDeployment, "finalizers", ("update",)),
    (MachineSet, "", (*_WATCHED, "create", "update", "delete")),
    (MachineSet, "status", ("update",)),
    (MachineSet, "finalizers", ("update",)),
    (Machine, "", ("create",)),
    (AWSMachine, "", ("create",)),
    (TinkerbellMachine, "", ("create",)),
    (TinkerbellMachineTemplate, "", ("get", "update", "delete")),
    (AWSMachineTemplate, "", ("get", "update", "delete")),
)
"""What the MachineDeployment and MachineSet controllers request beyond :data:`ACCESS` (recorded by
``tests/machinesets``)."""

MACHINE_POOL_ACCESS: tuple[tuple[type[KubeObject], str, tuple[str, ...]], ...] = (
    # Cluster API core's MachinePool controller: its finalizer, Cluster owner reference, label and
    # providerIDList, its status, and the controlling reference it gives its AWSMachinePool (which blocks
    # the pool's deletion: the finalizers subresource). The AWSMachinePool controller: the pool's
    # finalizer, labels and providerIDList, its status, and the cascade from the MachinePool.
    (MachinePool, "", (*_WATCHED, "update", "delete")),
    (MachinePool, "status", ("update",)),
    (MachinePool, "finalizers", ("update",)),
    (AWSMachinePool, "", (*_WATCHED, "update", "delete")),
    (AWSMachinePool, "status", ("update",)),
)
"""What the MachinePool and AWSMachinePool controllers request beyond :data:`ACCESS`, read from their code:
the RBAC recording test applies the example cluster, which has no machine pool."""


IDENTITY_ACCESS: tuple[tuple[type[KubeObject], str, tuple[str, ...]], ...] = (
    # An AWSCluster's spec.identityRef (and a role identity's sourceIdentityRef), read by name when a
    # cluster's controllers make their clients, and watched so that a change wakes the clusters using it;
    # a static identity's Secret is read from the Secret watch (READ_FROM_THE_CACHE). The Namespace: an
    # allowedNamespaces.selector matches its labels.
    (AWSClusterControllerIdentity, "", _WATCHED),
    (AWSClusterStaticIdentity, "", _WATCHED),
    (AWSClusterRoleIdentity, "", _WATCHED),
    (Namespace, "", ("get",)),
)
"""What the AWS controllers request for a cluster with an identity (``tests/controllers/test_identities.py``;
the example cluster the RBAC test records names none)."""


def _group(model: type[KubeObject]) -> str:
    return model.API_VERSION.rpartition("/")[0]


def object_metadata(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(COMMON_LABELS)
    return meta


def cluster_role() -> dict[str, Any]:
    """One rule per (group, verbs), resources sorted: the form ``kubectl describe`` reads easily."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    access = [
        *ACCESS,
        *TINKERBELL_ACCESS,
        *MACHINE_SET_ACCESS,
        *IDENTITY_ACCESS,
        *MACHINE_POOL_ACCESS,
        *((model, sub, verbs) for model, sub, verbs, _ in OUTSIDE_THE_RECORDING),
    ]
    for model, subresource, verbs in access:
        resource = model.PLURAL + (f"/{subresource}" if subresource else "")
        grouped.setdefault((_group(model), tuple(sorted(verbs))), []).append(resource)
    rules = [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": list(verbs)}
        for (group, verbs), resources in sorted(grouped.items())
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": object_metadata(CLUSTER_ROLE),
        "rules": rules,
    }


def service_account() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_metadata(SERVICE_ACCOUNT, NAMESPACE),
    }


def cluster_role_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": object_metadata(CLUSTER_ROLE_BINDING),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
    }


def namespace() -> dict[str, Any]:
    """The namespace the controller's ServiceAccount (and later its Deployment) lives in."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": dict(COMMON_LABELS)},
    }


def rbac() -> list[dict[str, Any]]:
    return [namespace(), service_account(), cluster_role(), cluster_role_binding()]
