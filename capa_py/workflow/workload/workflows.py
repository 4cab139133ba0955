"""The workload cluster workflows' tasks and constructors: create, upgrade and delete against an existing
management cluster."""

from __future__ import annotations

from collections.abc import Sequence

from capa_py.workflow.config import ClusterFile
from capa_py.workflow.diagnostics import ErrorHandler
from capa_py.workflow.hook import CreateHookRegistrar, DeleteHookRegistrar, UpgradeHookRegistrar
from capa_py.workflow.provider import Provider
from capa_py.workflow.task import Task, hook_point, task_of
from capa_py.workflow.workflow import Workflow
from capa_py.workflow.workload import tasks
from capa_py.workflow.workload.context import CreateContext, DeleteContext, UpgradeContext

CREATE = "workload create"
UPGRADE = "workload upgrade"
DELETE = "workload delete"

PRE_CREATE = hook_point(
    "Pre Create",
    "Runs first; executes the hooks bound to it. The management cluster works; the cluster does not exist.",
    CreateContext,
)
CREATE_WORKLOAD_CLUSTER = task_of(CreateContext, "Create Workload Cluster", tasks.create_workload_cluster)
INSTALL_NETWORKING = task_of(CreateContext, "Install Networking", tasks.install_networking)
INSTALL_CAPA_COMPONENTS = task_of(CreateContext, "Install capa-py Components", tasks.install_capa_components)
POST_CREATE = hook_point(
    "Post Create",
    "Runs last, once the workload cluster works; executes the hooks bound to it (writing the cluster files).",
    CreateContext,
)

PRE_UPGRADE = hook_point(
    "Pre Upgrade", "Runs first; executes the hooks bound to it. The cluster exists and works.", UpgradeContext
)
UPGRADE_NETWORKING = task_of(UpgradeContext, "Upgrade Networking", tasks.upgrade_networking)
UPGRADE_CAPA_COMPONENTS = task_of(UpgradeContext, "Upgrade capa-py Components", tasks.upgrade_capa_components)
UPGRADE_CLUSTER = task_of(UpgradeContext, "Upgrade Cluster", tasks.upgrade_cluster)
WRITE_CLUSTER_CONFIG = task_of(UpgradeContext, "Write Cluster Config", tasks.write_cluster_config)
POST_UPGRADE = hook_point(
    "Post Upgrade", "Runs last, once the cluster is upgraded; executes the hooks bound to it.", UpgradeContext
)

PRE_DELETE = hook_point(
    "Pre Delete", "Runs first; executes the hooks bound to it. The cluster exists.", DeleteContext
)
DELETE_WORKLOAD_CLUSTER = task_of(DeleteContext, "Delete Workload Cluster", tasks.delete_workload_cluster)
POST_DELETE = hook_point(
    "Post Delete",
    "Runs last, once the cluster is de-provisioned; executes the hooks bound to it (removing its files).",
    DeleteContext,
)


def new_create_workflow(
    spec: ClusterFile,
    provider: Provider,
    *,
    hooks: Sequence[CreateHookRegistrar] = (),
    error_handler: ErrorHandler | None = None,
) -> Workflow[CreateContext]:
    """The workload create workflow for ``spec``: Install Networking only when the config names a CNI
    manifest."""
    listed: list[Task[CreateContext]] = [PRE_CREATE, CREATE_WORKLOAD_CLUSTER]
    if spec.config.spec.networking.cni_manifest is not None:
        listed.append(INSTALL_NETWORKING)
    listed += [INSTALL_CAPA_COMPONENTS, POST_CREATE]
    return Workflow(
        CREATE,
        CreateContext,
        listed,
        hooks=[provider.bind_create_hooks, *(h.bind_create_hooks for h in hooks)],
        error_handler=error_handler,
    )


def new_upgrade_workflow(
    spec: ClusterFile,
    provider: Provider,
    *,
    hooks: Sequence[UpgradeHookRegistrar] = (),
    error_handler: ErrorHandler | None = None,
) -> Workflow[UpgradeContext]:
    """The workload upgrade workflow for ``spec``: Upgrade Networking only when the config names a CNI
    manifest."""
    listed: list[Task[UpgradeContext]] = [PRE_UPGRADE]
    if spec.config.spec.networking.cni_manifest is not None:
        listed.append(UPGRADE_NETWORKING)
    listed += [UPGRADE_CAPA_COMPONENTS, UPGRADE_CLUSTER, WRITE_CLUSTER_CONFIG, POST_UPGRADE]
    return Workflow(
        UPGRADE,
        UpgradeContext,
        listed,
        hooks=[provider.bind_upgrade_hooks, *(h.bind_upgrade_hooks for h in hooks)],
        error_handler=error_handler,
    )


def new_delete_workflow(
    spec: ClusterFile,
    provider: Provider,
    *,
    hooks: Sequence[DeleteHookRegistrar] = (),
    error_handler: ErrorHandler | None = None,
) -> Workflow[DeleteContext]:
    """The workload delete workflow for ``spec`` (the same tasks whatever the config says)."""
    del spec
    return Workflow(
        DELETE,
        DeleteContext,
        [PRE_DELETE, DELETE_WORKLOAD_CLUSTER, POST_DELETE],
        hooks=[provider.bind_delete_hooks, *(h.bind_delete_hooks for h in hooks)],
        error_handler=error_handler,
    )
