"""``management create``: a management cluster made from a temporary bootstrap cluster, which then takes
over its own objects."""

from __future__ import annotations

from collections.abc import Sequence

from capa_py.workflow.config import ClusterFile
from capa_py.workflow.diagnostics import ErrorHandler
from capa_py.workflow.hook import CreateHookRegistrar
from capa_py.workflow.management import tasks
from capa_py.workflow.management.context import CreateContext
from capa_py.workflow.provider import Provider
from capa_py.workflow.task import Task, hook_point, task_of
from capa_py.workflow.workflow import Workflow

NAME = "management create"

PRE_CREATE = hook_point(
    "Pre Create",
    "Runs first; executes the hooks bound before and after it. Nothing exists yet.",
    CreateContext,
)
CREATE_BOOTSTRAP_CLUSTER = task_of(CreateContext, "Create Bootstrap Cluster", tasks.create_bootstrap_cluster)
INSTALL_BOOTSTRAP_COMPONENTS = task_of(
    CreateContext, "Install Bootstrap Components", tasks.install_bootstrap_components
)
CREATE_MANAGEMENT_CLUSTER = task_of(
    CreateContext, "Create Management Cluster", tasks.create_management_cluster
)
INSTALL_NETWORKING = task_of(CreateContext, "Install Networking", tasks.install_networking)
INSTALL_MANAGEMENT_COMPONENTS = task_of(
    CreateContext, "Install Management Components", tasks.install_management_components
)
PIVOT_TO_MANAGEMENT = task_of(CreateContext, "Pivot to Management", tasks.pivot_to_management)
INSTALL_CLUSTER_CONFIGURATION = task_of(
    CreateContext, "Install Cluster Configuration", tasks.install_cluster_configuration
)
DELETE_BOOTSTRAP_CLUSTER = task_of(CreateContext, "Delete Bootstrap Cluster", tasks.delete_bootstrap_cluster)
POST_CREATE = hook_point(
    "Post Create",
    "Runs last, once the management cluster holds its own objects and the bootstrap cluster is gone; "
    "executes the hooks bound to it (writing the cluster files, installing extra resources).",
    CreateContext,
)


def new_create_workflow(
    spec: ClusterFile,
    provider: Provider,
    *,
    hooks: Sequence[CreateHookRegistrar] = (),
    error_handler: ErrorHandler | None = None,
) -> Workflow[CreateContext]:
    """The management create workflow for ``spec``: Install Networking only when the config names a CNI
    manifest. The provider and every registrar of ``hooks`` bind their create hooks."""
    listed: list[Task[CreateContext]] = [
        PRE_CREATE,
        CREATE_BOOTSTRAP_CLUSTER,
        INSTALL_BOOTSTRAP_COMPONENTS,
        CREATE_MANAGEMENT_CLUSTER,
    ]
    if spec.config.spec.networking.cni_manifest is not None:
        listed.append(INSTALL_NETWORKING)
    listed += [
        INSTALL_MANAGEMENT_COMPONENTS,
        PIVOT_TO_MANAGEMENT,
        INSTALL_CLUSTER_CONFIGURATION,
        DELETE_BOOTSTRAP_CLUSTER,
        POST_CREATE,
    ]
    return Workflow(
        NAME,
        CreateContext,
        listed,
        hooks=[provider.bind_create_hooks, *(h.bind_create_hooks for h in hooks)],
        error_handler=error_handler,
    )
