"""The contexts of the management cluster workflows: one per workflow kind, sharing what every management
workflow works with (the cluster file, the provider, the bootstrap cluster, the management cluster)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from capa_py.workflow.clusters import BootstrapCluster, ClusterAccess
from capa_py.workflow.config import ClusterFile
from capa_py.workflow.provider import Components, Provider
from capa_py.workflow.steps import cluster_kubeconfig_path, install_components
from capa_py.workflow.task import CHECKPOINTED, Context


def _quiet(_: str) -> None:
    return None


@dataclass
class ManagementContext(Context):
    """What the tasks of every management workflow receive.

    ``bootstrap()`` and ``management()`` are the two clusters' client configurations. The bootstrap cluster
    runs in this process: after a restart, ``bootstrap()`` serves its data again and restarts the
    components ``bootstrap_components`` (checkpointed) says were installed on it.
    """

    spec: ClusterFile
    provider: Provider
    core: Components
    state_dir: Path
    timeout: float = 1800.0
    """How long one task may wait for controllers."""
    notify: Callable[[str], None] = field(default=_quiet, repr=False)
    """Where tasks report progress within a task (each machine an upgrade replaces); the CLI prints it."""
    bootstrap_components: list[str] = field(default_factory=list, metadata=CHECKPOINTED)
    """The components installed on the bootstrap cluster (empty once it is deleted)."""
    _bootstrap: BootstrapCluster | None = field(default=None, init=False, repr=False)

    @property
    def bootstrap_cluster(self) -> BootstrapCluster:
        if self._bootstrap is None:
            self._bootstrap = BootstrapCluster(self.state_dir / "bootstrap" / self.spec.name)
        return self._bootstrap

    def bootstrap(self) -> ClusterAccess:
        """The bootstrap cluster, serving, with the components installed on it running."""
        access = self.bootstrap_cluster.start()
        if self.bootstrap_components:
            install_components(access, self.spec, self.core, self.provider)
        return access

    def management(self) -> ClusterAccess:
        """The management cluster, through the kubeconfig its ``<cluster>-kubeconfig`` Secret held."""
        return ClusterAccess(self.spec.name, cluster_kubeconfig_path(self.state_dir, self.spec.name))

    def close(self) -> None:
        """Stop whatever of the bootstrap cluster runs in this process (its data stays)."""
        if self._bootstrap is not None:
            self._bootstrap.stop()


@dataclass
class CreateContext(ManagementContext):
    """The context of ``management create``."""


@dataclass
class UpgradeContext(ManagementContext):
    """The context of ``management upgrade``."""


@dataclass
class DeleteContext(ManagementContext):
    """The context of ``management delete``."""
