"""Writing the cluster file where later commands find it, as a hook (the workflow design moves *Write
Cluster Config* out of the create workflow's task list into a post-workflow hook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capa_py.logging import get_logger
from capa_py.workflow import management, steps, workload
from capa_py.workflow.hook import Binder, NoopHookRegistrar

_log = get_logger("workflow.cluster_files")


class ClusterFiles(NoopHookRegistrar):
    """Keeps ``<state dir>/clusters/<cluster>/cluster.yaml`` (next to the kubeconfig the workflows write):
    written after a create, removed with the kubeconfig after a delete."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def bind_create_hooks(self, binder: Binder[Any]) -> None:
        for point in (management.create.POST_CREATE, workload.POST_CREATE):
            if binder.has(point):
                binder.after(point, self.write)

    def bind_delete_hooks(self, binder: Binder[Any]) -> None:
        for point in (management.delete.POST_DELETE, workload.POST_DELETE):
            if binder.has(point):
                binder.after(point, self.remove)

    def write(self, ctx: management.ManagementContext | workload.WorkloadContext) -> None:
        """Runs after Post Create, once the cluster works. Copies the cluster file to the cluster's
        directory, where its kubeconfig already is."""
        path = steps.write_cluster_files(self.state_dir, ctx.spec)
        _log.info("cluster file written", cluster=ctx.spec.name, path=str(path))

    def remove(self, ctx: management.ManagementContext | workload.WorkloadContext) -> None:
        """Runs after Post Delete, once the cluster is gone. Removes the cluster's directory (its file and
        kubeconfig)."""
        steps.remove_cluster_files(self.state_dir, ctx.spec.name)
