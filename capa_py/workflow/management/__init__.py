"""Management cluster workflows: create (from a bootstrap cluster, then pivot), upgrade and delete.

Each workflow kind has its context (:class:`CreateContext`, :class:`UpgradeContext`,
:class:`DeleteContext`), its tasks (module constants of :mod:`.create`, :mod:`.upgrade`, :mod:`.delete`,
under the design's names) and its constructor, the one place that decides which tasks run.
"""

from capa_py.workflow.management import create, delete, upgrade
from capa_py.workflow.management.context import (
    CreateContext,
    DeleteContext,
    ManagementContext,
    UpgradeContext,
)
from capa_py.workflow.management.create import new_create_workflow
from capa_py.workflow.management.delete import new_delete_workflow
from capa_py.workflow.management.upgrade import new_upgrade_workflow

__all__ = [
    "CreateContext",
    "DeleteContext",
    "ManagementContext",
    "UpgradeContext",
    "create",
    "delete",
    "new_create_workflow",
    "new_delete_workflow",
    "new_upgrade_workflow",
    "upgrade",
]
