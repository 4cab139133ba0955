"""The orphan audit: find every AWS resource a cluster leaked, say why it is one, and remove it safely.

The strategy engine gives each resource the strongest protection against orphans its API allows; the audit
finds what still slips through — a create whose record was lost, a cluster object deleted while its AWS
resources stayed, an interface left behind by a terminated instance — and the reverse, records AWS no longer
knows. ``capa audit`` is its command line; this package is the library:

* :mod:`~capa_app.audit.discovery` finds resources with the Resource Groups Tagging API or with per-service
  describe calls (:mod:`~capa_app.audit.ec2_kinds`, :mod:`~capa_app.audit.lb_kinds`,
  :mod:`~capa_app.audit.iam_kinds`);
* :mod:`~capa_app.audit.records` reads what the object store records and intends;
* :mod:`~capa_app.audit.classify` compares the two (the classes are listed in :mod:`~capa_app.audit.model`);
* :mod:`~capa_app.audit.plan` decides what ``--delete`` may remove and in which order,
  :mod:`~capa_app.audit.execute` does it with :mod:`~capa_app.audit.deleters`;
* :mod:`~capa_app.audit.run` ties them together.
"""

from capa_app.audit.execute import DeletionSettings, execute_plan
from capa_app.audit.model import (
    LEAK_CLASSES,
    AuditClass,
    AuditReport,
    AuditRow,
    DeletionPlan,
    DeletionReport,
    DeletionResult,
    DiscoveryMode,
    Outcome,
    PlannedDeletion,
    SkippedLeak,
)
from capa_app.audit.plan import plan_deletion
from capa_app.audit.run import AuditOptions, delete_leaks, run_audit, store_recheck

__all__ = [
    "LEAK_CLASSES",
    "AuditClass",
    "AuditOptions",
    "AuditReport",
    "AuditRow",
    "DeletionPlan",
    "DeletionReport",
    "DeletionResult",
    "DeletionSettings",
    "DiscoveryMode",
    "Outcome",
    "PlannedDeletion",
    "SkippedLeak",
    "delete_leaks",
    "execute_plan",
    "plan_deletion",
    "run_audit",
    "store_recheck",
]
