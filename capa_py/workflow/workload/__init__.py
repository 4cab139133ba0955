"""Workload cluster workflows: create, upgrade and delete a cluster against an existing management cluster.

Each workflow kind has its context (:class:`CreateContext`, :class:`UpgradeContext`,
:class:`DeleteContext`), its tasks (module constants of :mod:`.workflows`, under the design's names) and its
constructor, the one place that decides which tasks run.
"""

from capa_py.workflow.workload.context import CreateContext, DeleteContext, UpgradeContext, WorkloadContext
from capa_py.workflow.workload.workflows import (
    CREATE_WORKLOAD_CLUSTER,
    DELETE_WORKLOAD_CLUSTER,
    INSTALL_CAPA_COMPONENTS,
    INSTALL_NETWORKING,
    POST_CREATE,
    POST_DELETE,
    POST_UPGRADE,
    PRE_CREATE,
    PRE_DELETE,
    PRE_UPGRADE,
    UPGRADE_CAPA_COMPONENTS,
    UPGRADE_CLUSTER,
    UPGRADE_NETWORKING,
    WRITE_CLUSTER_CONFIG,
    new_create_workflow,
    new_delete_workflow,
    new_upgrade_workflow,
)

__all__ = [
    "CREATE_WORKLOAD_CLUSTER",
    "DELETE_WORKLOAD_CLUSTER",
    "INSTALL_CAPA_COMPONENTS",
    "INSTALL_NETWORKING",
    "POST_CREATE",
    "POST_DELETE",
    "POST_UPGRADE",
    "PRE_CREATE",
    "PRE_DELETE",
    "PRE_UPGRADE",
    "UPGRADE_CAPA_COMPONENTS",
    "UPGRADE_CLUSTER",
    "UPGRADE_NETWORKING",
    "WRITE_CLUSTER_CONFIG",
    "CreateContext",
    "DeleteContext",
    "UpgradeContext",
    "WorkloadContext",
    "new_create_workflow",
    "new_delete_workflow",
    "new_upgrade_workflow",
]
