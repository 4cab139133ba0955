"""The audit end to end: read the store, discover, classify, check records against AWS, filter by age.

:func:`run_audit` returns an :class:`~capa_app.audit.model.AuditReport`; :func:`delete_leaks` plans and
carries out the deletion of its leaks, re-reading the store right before each delete so that a resource a
reconcile has recorded (or whose cluster is back) since the audit is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from capa_app.audit.classify import classify, drift_rows, matches_intent
from capa_app.audit.discovery import DiscoveryScope, discover
from capa_app.audit.execute import DeletionSettings, Recheck, execute_plan
from capa_app.audit.model import (
    AuditClass,
    AuditReport,
    AuditRow,
    DeletionPlan,
    DeletionReport,
    DiscoveryMode,
    Found,
)
from capa_app.audit.plan import KIND_ORDER, plan_deletion
from capa_app.audit.records import EVERY_IDENTITY, Record, StoreView, read_store
from capa_py.aws.session import ClientPool
from capa_py.engine.tags import role_of
from capa_py.store.protocol import ObjectStore

_CLASS_ORDER = {
    AuditClass.ORPHAN_CLUSTER_GONE: 0,
    AuditClass.ORPHAN_UNRECORDED: 1,
    AuditClass.UNTAGGED_IN_MANAGED_VPC: 2,
    AuditClass.PENDING_INTENT: 3,
    AuditClass.MISSING: 4,
    AuditClass.FOREIGN_STORE: 5,
    AuditClass.FOREIGN_NO_STORE: 6,
    AuditClass.MANAGED: 7,
}


@dataclass(frozen=True)
class AuditOptions:
    clusters: frozenset[str] | None = None
    """Only these clusters' resources (this store's or not); None: this store's scope (see
    :func:`in_store_scope`)."""
    regions: tuple[str, ...] = ()
    """Regions to search; empty: every region an AWSCluster names, and the default region."""
    discovery: DiscoveryMode = DiscoveryMode.TAGGING_API
    older_than: float | None = None
    """Seconds: leave out resources younger than this (those whose API gives a creation time)."""
    include_iam: bool = True
    identity: str | None = None
    """The identity (``Kind/name``) whose account the pool reaches: the audit judges that account by the
    records of the clusters using it; None, the controller's own account and the clusters without one."""


def audit_regions(view: StoreView, options: AuditOptions, default_region: str) -> list[str]:
    if options.regions:
        return list(dict.fromkeys(options.regions))
    return sorted(view.regions | {default_region})


def _in_scope(cluster: str | None, options: AuditOptions) -> bool:
    return options.clusters is None or cluster in options.clusters


def in_store_scope(row: AuditRow, view: StoreView) -> bool:
    """The default scope: everything of the clusters this store has objects for, and whatever carries this
    store's tag (the orphans of its gone clusters). Another store's clusters are not this audit's business."""
    if row.classification not in (AuditClass.FOREIGN_STORE, AuditClass.FOREIGN_NO_STORE):
        return True
    return row.cluster is not None and view.cluster_exists(row.cluster)


def _exists(pool: ClientPool, record: Record) -> bool:
    from resources import resource_class

    try:
        cls = resource_class(record.kind)
    except KeyError:
        return True  # a kind this version does not know: do not claim it is gone
    return cls(pool.for_region(record.region)).describe_by_id(record.id) is not None


def _sort_key(row: AuditRow) -> tuple[int, str, str, int, str]:
    return (
        _CLASS_ORDER[row.classification],
        row.cluster or "",
        row.region,
        KIND_ORDER.get(row.kind, (len(KIND_ORDER), ""))[0],
        row.id,
    )


def run_audit(
    store: ObjectStore, pool: ClientPool, options: AuditOptions | None = None, now: datetime | None = None
) -> AuditReport:
    """Classify every resource the clusters in scope own, hold, or left behind, and every record."""
    options = options or AuditOptions()
    now = now or datetime.now(UTC)
    default_region = pool.settings.region
    view = read_store(store, default_region, options.identity)
    regions = audit_regions(view, options, default_region)
    scopes = {
        region: DiscoveryScope(
            clusters=options.clusters,
            recorded_vpcs=frozenset(
                r.id
                for r in view.records
                if r.kind == "vpc" and r.region == region and _in_scope(r.cluster, options)
            ),
            intent_kinds=frozenset(
                i.record.kind for i in view.intents if i.region == region and _in_scope(i.cluster, options)
            ),
        )
        for region in regions
    }
    found = discover(pool, options.discovery, scopes, options.include_iam)
    rows = [row for row in classify(found, view, now) if _in_scope(row.cluster, options)]
    if options.clusters is None:
        rows = [row for row in rows if in_store_scope(row, view)]
    records = [r for r in view.records if r.region in regions and _in_scope(r.cluster, options)]
    rows += drift_rows(records, {f.key for f in found}, lambda r: _exists(pool, r), now)
    if options.older_than is not None:
        limit = options.older_than
        rows = [row for row in rows if row.age_seconds is None or row.age_seconds >= limit]
    rows.sort(key=_sort_key)
    return AuditReport(
        discovery=options.discovery,
        regions=regions,
        clusters=sorted(options.clusters) if options.clusters is not None else None,
        store_uid=view.store_uid,
        older_than_seconds=options.older_than,
        rows=rows,
    )


def store_recheck(store: ObjectStore, default_region: str) -> Recheck:
    """A veto that reads the store again: is the resource still a leak nobody is about to adopt?"""

    def recheck(row: AuditRow) -> str | None:
        # Recorded by any cluster, in any account: not a leak to delete.
        view = read_store(store, default_region, EVERY_IDENTITY)
        record = view.recorded(row.kind, row.id)
        if record is not None:
            return f"recorded since the audit, as role {record.role} in {record.owner}"
        came_back = row.cluster is not None and view.cluster_exists(row.cluster)
        if row.classification == AuditClass.ORPHAN_CLUSTER_GONE and came_back:
            return f"cluster {row.cluster} has objects again since the audit: audit again"
        role = role_of(row.tags)
        found = Found(row.region, row.kind, row.id, dict(row.tags), attributes=dict(row.attributes))
        for intent in view.intents:
            tagged_match = (
                found.owner is not None and intent.cluster == found.owner and role == intent.role
            ) and intent.record.kind == row.kind
            if tagged_match or matches_intent(found, intent):
                return f"an intent record of {intent.owner} (role {intent.role}) may adopt it since the audit"
        return None

    return recheck


def delete_leaks(
    report: AuditReport,
    store: ObjectStore,
    pool: ClientPool,
    settings: DeletionSettings | None = None,
    plan: DeletionPlan | None = None,
    include_foreign: bool = False,
) -> DeletionReport:
    """Delete the report's deletable leaks (see :mod:`capa_app.audit.plan`); report every leak's fate.
    ``include_foreign`` deletes the foreign rows too (only for a report of named clusters)."""
    plan = plan or plan_deletion(report, include_foreign=include_foreign)
    return execute_plan(plan, pool, settings, store_recheck(store, pool.settings.region))
