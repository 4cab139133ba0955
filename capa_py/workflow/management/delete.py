"""``management delete``: the cluster's objects pivoted onto a bootstrap cluster, whose controllers then
de-provision the cluster."""

from __future__ import annotations

from collections.abc import Sequence

from capa_py.workflow.config import ClusterFile
from capa_py.workflow.diagnostics import ErrorHandler
from capa_py.workflow.hook import DeleteHookRegistrar
from capa_py.workflow.management import tasks
from capa_py.workflow.management.context import DeleteContext
from capa_py.workflow.provider import Provider
from capa_py.workflow.task import Task, hook_point, task_of
from capa_py.workflow.workflow import Workflow

NAME = "management delete"

PRE_DELETE = hook_point(
    "Pre Delete",
    "Runs first; executes the hooks bound to it. The management cluster works and holds the cluster.",
    DeleteContext,
)
CREATE_BOOTSTRAP_CLUSTER = task_of(DeleteContext, "Create Bootstrap Cluster", tasks.create_bootstrap_cluster)
INSTALL_BOOTSTRAP_COMPONENTS = task_of(
    DeleteContext, "Install Bootstrap Components", tasks.install_bootstrap_components
)
PIVOT_TO_BOOTSTRAP = task_of(DeleteContext, "Pivot to Bootstrap", tasks.pivot_to_bootstrap)
DELETE_CLUSTER = task_of(DeleteContext, "Delete Cluster", tasks.delete_cluster)
DELETE_BOOTSTRAP_CLUSTER = task_of(DeleteContext, "Delete Bootstrap Cluster", tasks.delete_bootstrap_cluster)
POST_DELETE = hook_point(
    "Post Delete",
    "Runs last, once the cluster is de-provisioned and the bootstrap cluster is gone; executes the hooks "
    "bound to it (removing the cluster's files).",
    DeleteContext,
)


def new_delete_workflow(
    spec: ClusterFile,
    provider: Provider,
    *,
    hooks: Sequence[DeleteHookRegistrar] = (),
    error_handler: ErrorHandler | None = None,
) -> Workflow[DeleteContext]:
    """The management delete workflow for ``spec`` (the same tasks whatever the config says)."""
    del spec  # nothing in the config changes which tasks run
    listed: list[Task[DeleteContext]] = [
        PRE_DELETE,
        CREATE_BOOTSTRAP_CLUSTER,
        INSTALL_BOOTSTRAP_COMPONENTS,
        PIVOT_TO_BOOTSTRAP,
        DELETE_CLUSTER,
        DELETE_BOOTSTRAP_CLUSTER,
        POST_DELETE,
    ]
    return Workflow(
        NAME,
        DeleteContext,
        listed,
        hooks=[provider.bind_delete_hooks, *(h.bind_delete_hooks for h in hooks)],
        error_handler=error_handler,
    )
