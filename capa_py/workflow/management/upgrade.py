"""``management upgrade``: the management cluster's components and networking brought up to date in place,
then the cluster itself changed from a bootstrap cluster (its objects pivoted there and back)."""

from __future__ import annotations

from collections.abc import Sequence

from capa_py.workflow.config import ClusterFile
from capa_py.workflow.diagnostics import ErrorHandler
from capa_py.workflow.hook import UpgradeHookRegistrar
from capa_py.workflow.management import tasks
from capa_py.workflow.management.context import UpgradeContext
from capa_py.workflow.provider import Provider
from capa_py.workflow.task import Task, hook_point, task_of
from capa_py.workflow.workflow import Workflow

NAME = "management upgrade"

PRE_UPGRADE = hook_point(
    "Pre Upgrade",
    "Runs first; executes the hooks bound to it. The management cluster works and holds the cluster.",
    UpgradeContext,
)
UPGRADE_MANAGEMENT_COMPONENTS = task_of(
    UpgradeContext, "Upgrade Management Components", tasks.upgrade_management_components
)
UPGRADE_NETWORKING = task_of(UpgradeContext, "Upgrade Networking", tasks.upgrade_networking)
INSTALL_MANAGEMENT_COMPONENTS = task_of(
    UpgradeContext, "Install Management Components", tasks.install_management_components
)
CREATE_BOOTSTRAP_CLUSTER = task_of(UpgradeContext, "Create Bootstrap Cluster", tasks.create_bootstrap_cluster)
INSTALL_BOOTSTRAP_COMPONENTS = task_of(
    UpgradeContext, "Install Bootstrap Components", tasks.install_bootstrap_components
)
PIVOT_TO_BOOTSTRAP = task_of(UpgradeContext, "Pivot to Bootstrap", tasks.pivot_to_bootstrap)
UPGRADE_CLUSTER = task_of(UpgradeContext, "Upgrade Cluster", tasks.upgrade_cluster)
PIVOT_TO_MANAGEMENT = task_of(UpgradeContext, "Pivot to Management", tasks.pivot_to_management)
DELETE_BOOTSTRAP_CLUSTER = task_of(UpgradeContext, "Delete Bootstrap Cluster", tasks.delete_bootstrap_cluster)
WRITE_CLUSTER_CONFIG = task_of(UpgradeContext, "Write Cluster Config", tasks.write_cluster_config)
POST_UPGRADE = hook_point(
    "Post Upgrade",
    "Runs last, once the upgraded cluster is back on the management cluster; executes the hooks bound to it.",
    UpgradeContext,
)


def new_upgrade_workflow(
    spec: ClusterFile,
    provider: Provider,
    *,
    hooks: Sequence[UpgradeHookRegistrar] = (),
    error_handler: ErrorHandler | None = None,
) -> Workflow[UpgradeContext]:
    """The management upgrade workflow for ``spec``: Upgrade Networking only when the config names a CNI
    manifest."""
    listed: list[Task[UpgradeContext]] = [PRE_UPGRADE, UPGRADE_MANAGEMENT_COMPONENTS]
    if spec.config.spec.networking.cni_manifest is not None:
        listed.append(UPGRADE_NETWORKING)
    listed += [
        INSTALL_MANAGEMENT_COMPONENTS,
        CREATE_BOOTSTRAP_CLUSTER,
        INSTALL_BOOTSTRAP_COMPONENTS,
        PIVOT_TO_BOOTSTRAP,
        UPGRADE_CLUSTER,
        PIVOT_TO_MANAGEMENT,
        DELETE_BOOTSTRAP_CLUSTER,
        WRITE_CLUSTER_CONFIG,
        POST_UPGRADE,
    ]
    return Workflow(
        NAME,
        UpgradeContext,
        listed,
        hooks=[provider.bind_upgrade_hooks, *(h.bind_upgrade_hooks for h in hooks)],
        error_handler=error_handler,
    )
