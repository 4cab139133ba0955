"""The contexts of the workload cluster workflows: one per workflow kind, sharing what every workload
workflow works with (the cluster file, the provider, the management cluster that holds the cluster)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from capa_py.workflow.clusters import ClusterAccess
from capa_py.workflow.config import ClusterFile
from capa_py.workflow.provider import Components, Provider
from capa_py.workflow.steps import fetch_cluster_kubeconfig
from capa_py.workflow.task import Context


def _quiet(_: str) -> None:
    return None


@dataclass
class WorkloadContext(Context):
    """What the tasks of every workload workflow receive: ``management`` is the management cluster's
    client configuration (``--kubeconfig``); ``workload()`` the workload cluster's."""

    spec: ClusterFile
    provider: Provider
    core: Components
    management: ClusterAccess
    state_dir: Path
    timeout: float = 1800.0
    """How long one task may wait for controllers."""
    notify: Callable[[str], None] = field(default=_quiet, repr=False)
    """Where tasks report progress within a task (each machine an upgrade replaces); the CLI prints it."""

    def workload(self) -> ClusterAccess:
        """The workload cluster, through the kubeconfig its ``<cluster>-kubeconfig`` Secret on the management
        cluster holds now (read again each time, so a rotated kubeconfig is followed; written to
        ``<state dir>/clusters/<cluster>/kubeconfig``)."""
        path = fetch_cluster_kubeconfig(self.management, self.spec, self.state_dir, self.timeout)
        return ClusterAccess(self.spec.name, path)

    def close(self) -> None:
        """Nothing of a workload workflow runs in this process after it returns."""


@dataclass
class CreateContext(WorkloadContext):
    """The context of ``workload create``."""


@dataclass
class UpgradeContext(WorkloadContext):
    """The context of ``workload upgrade``."""


@dataclass
class DeleteContext(WorkloadContext):
    """The context of ``workload delete``."""
