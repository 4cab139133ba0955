"""The provider interface of the cluster lifecycle workflows: what a workflow asks of a provider and of
capa-py's own components, and what a provider reports back.

A provider does exactly what the workflows ask of it, no more:

- ``install_components(cluster, spec)`` / ``upgrade_components``: make the provider's components run on
  ``cluster``. On the bootstrap cluster (``cluster.in_process``) that means starting its controllers (and,
  for Tinkerbell, the workflow service and Hegel) in this process against the bootstrap API server; on any
  other cluster it means applying its manifests (:mod:`capa_py.manifests.components`) to the API server.
  Both are idempotent.
- ``create_cluster`` / ``upgrade_cluster`` / ``delete_cluster``: bring the cluster's objects on ``cluster``
  (a bootstrap or management cluster) to the spec and wait until the controllers there are done.
- ``bind_create_hooks`` / ``bind_upgrade_hooks`` / ``bind_delete_hooks``: hook into the workflows (no-ops
  unless overridden).

capa-py's own components (Cluster API core's Cluster and Machine controllers, its CRDs, RBAC and the
controller Deployment) are installed by a :class:`Components` before the provider's, in the same tasks.
The implementations (the AWS and Tinkerbell providers, capa-py's core components, the rollout of an upgrade)
compose the controllers, so they live in the application layer (``capa_app.providers``, ``capa_app.rollout``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from capa_py.api.clusterconfig import ProviderName
from capa_py.store.kube import KubeStore
from capa_py.workflow.clusters import ClusterAccess
from capa_py.workflow.config import ClusterFile
from capa_py.workflow.hook import Binder

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"

StepPhase = Literal["started", "finished"]
StepAction = Literal["create", "replace", "delete", "unchanged"]


@dataclass(frozen=True)
class RolloutStep:
    """One machine's step of an upgrade's rollout."""

    action: StepAction
    machine: str
    """The machine's name in the config (or the MachineDeployment's)."""
    old: str | None
    """The stored Machine replaced, deleted or kept unchanged (names joined by ", " when an interrupted
    replace left several)."""
    new: str | None
    """The Machine created."""


OnStep = Callable[[RolloutStep, StepPhase], None]
"""Hears each machine's rollout step as it starts and finishes."""


class ProvisioningError(RuntimeError):
    """The controllers did not bring the cluster's objects where the workflow needs them."""


class Provider(Protocol):
    """What the cluster lifecycle workflows need from an infrastructure provider."""

    name: ProviderName

    def install_components(self, cluster: ClusterAccess, spec: ClusterFile) -> None: ...

    def upgrade_components(self, cluster: ClusterAccess, spec: ClusterFile) -> None: ...

    def create_cluster(self, cluster: ClusterAccess, spec: ClusterFile, timeout: float) -> None: ...

    def upgrade_cluster(
        self, cluster: ClusterAccess, spec: ClusterFile, timeout: float, on_step: OnStep | None = None
    ) -> list[RolloutStep]: ...

    def delete_cluster(self, cluster: ClusterAccess, spec: ClusterFile, timeout: float) -> None: ...

    def bind_create_hooks(self, binder: Binder[Any]) -> None: ...

    def bind_upgrade_hooks(self, binder: Binder[Any]) -> None: ...

    def bind_delete_hooks(self, binder: Binder[Any]) -> None: ...


class Components(Protocol):
    """capa-py's own components, installed on a cluster before its provider's."""

    name: str

    def install(self, cluster: ClusterAccess, spec: ClusterFile) -> None: ...


@contextlib.contextmanager
def opened(cluster: ClusterAccess) -> Iterator[KubeStore]:
    store = cluster.store()
    try:
        yield store
    finally:
        store.close()
