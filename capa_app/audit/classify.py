"""Classification: every found resource against the object store, and every record against what was found.

In order, a found resource is

1. ``managed`` when a status records its kind and id;
2. for a part that cannot carry tags (a route, a subnet association, a gateway attachment, a target
   registration) of an orphan, that orphan's class: it goes with it;
3. with an owned tag: ``foreign (other store)`` when it carries another capa-py store's tag, ``foreign (no
   capa-py store)`` when it carries none; else ``pending intent`` when its role has an intent record (a
   separate-tagging create was interrupted after tagging: the next reconcile adopts it), else ``orphan
   (unrecorded)`` when the cluster still has a Cluster or AWSCluster object, else ``orphan (cluster gone)``;
4. without one: ``pending intent`` when it matches an intent record the way the engine would adopt it (same
   kind and region, the intent's request attributes, not among the resources that already existed when the
   intent was written, created within the adoption window when its creation time is known, among what the
   intent's first examination saw once there was one), else ``untagged in managed VPC`` when it lies in a
   VPC a cluster owns, else it is not the audit's business and gets no row.

In the other direction, a record whose resource AWS does not know is ``missing`` (drift).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import cache

from capa_app.audit.iam_kinds import made_by_iam_bootstrap
from capa_app.audit.model import FOREIGN_CLASSES, ORPHAN_CLASSES, AuditClass, AuditRow, Found
from capa_app.audit.records import Intent, Record, StoreView
from capa_py.engine.engine import PREEXISTING
from capa_py.engine.profiles import ADOPTION_WINDOW, CLOCK_SKEW
from capa_py.engine.resource import ResourceClass
from capa_py.engine.tags import (
    CLOUD_PROVIDER_TAG_PREFIX,
    CLUSTER_TAG_PREFIX,
    SHARED,
    foreign_store,
    role_of,
    store_of,
)

UNTAGGABLE_PARTS = {
    "route": "route-table",
    "route-table-association": "route-table",
    "internet-gateway-attachment": "internet-gateway",
    "target-registration": "target-group",
    "record-set": "hosted-zone",
}
"""Part kind → parent kind, for the parts that cannot carry a tag of their own."""


def shared_with(tags: dict[str, str]) -> str | None:
    """The cluster a resource is *shared* with (``…/cluster/<name>=shared``): the user's, never ours."""
    for key, value in tags.items():
        if value == SHARED and key.startswith((CLUSTER_TAG_PREFIX, CLOUD_PROVIDER_TAG_PREFIX)):
            return key.rsplit("/", 1)[-1]
    return None


@cache
def _engine_adopts_candidates(kind: str) -> bool:
    """Whether the engine can adopt an interrupted create of this kind (its class lists candidates)."""
    from resources import resource_class

    try:
        cls = resource_class(kind)
    except KeyError:
        return False
    return cls.describe_candidates is not ResourceClass.describe_candidates


def matches_intent(
    found: Found, intent: Intent, window: float = ADOPTION_WINDOW, skew: float = CLOCK_SKEW
) -> bool:
    """Whether an untagged resource may be what the create behind ``intent`` made, by the engine's bounds:
    not among the resources that already existed, created within the adoption window when its creation
    time is known, and among what the intent's first examination saw once there was one."""
    request = intent.record.request
    if found.kind != intent.record.kind or found.region != intent.region or found.owner is not None:
        return False
    if not _engine_adopts_candidates(found.kind):
        return False
    if found.id in set(filter(None, request.get(PREEXISTING, "").split(","))):
        return False
    if intent.record.examined_at is not None and found.id not in intent.record.seen:
        return False
    started = intent.record.started_at
    if found.created_at is not None and not (
        started - timedelta(seconds=skew) <= found.created_at <= started + timedelta(seconds=window)
    ):
        return False
    if found.kind == "elastic-ip" and (found.tags or found.attributes.get("association_id")):
        return False
    for key, wanted in request.items():
        if key == PREEXISTING:
            continue
        have = found.attributes.get(key)
        plural = found.attributes.get(f"{key}s")
        if have is None and isinstance(plural, list):
            if wanted not in plural:
                return False
            continue
        if have is None:
            continue
        if isinstance(have, list):
            have = ",".join(sorted(str(v) for v in have))
        if isinstance(have, bool):
            have = str(have).lower()
        if str(have) != wanted:
            return False
    return True


def _age(created_at: datetime | None, now: datetime) -> int | None:
    if created_at is None:
        return None
    return max(int((now - created_at).total_seconds()), 0)


def _untagged_reason(found: Found, vpc_id: str, cluster: str | None) -> str:
    where = f"inside {vpc_id}, which cluster {cluster} owns" if cluster else f"inside managed {vpc_id}"
    if found.kind == "network-interface":
        text = f"an unattached network interface (left by a terminated instance?) with no owned tag, {where}"
    elif found.kind == "security-group-rule":
        text = (
            f"a rule of {found.attributes.get('group_id')} that references "
            f"{found.attributes.get('referenced_group')} (it blocks deleting that group), {where}"
        )
    elif found.kind in UNTAGGABLE_PARTS:
        text = f"part of {UNTAGGABLE_PARTS[found.kind]} {found.parent}, recorded nowhere, {where}"
    else:
        text = f"no owned tag, {where}"
    shared = shared_with(found.tags)
    if shared:
        text += f"; shared with cluster {shared} (given by the user, never deleted)"
    elif any(k.startswith(CLOUD_PROVIDER_TAG_PREFIX) for k in found.tags):
        text += "; tagged by the in-cluster cloud provider"
    return text


class _Classifier:
    def __init__(self, view: StoreView, found: Iterable[Found], now: datetime) -> None:
        self.view = view
        self.now = now
        self.found = list(found)
        self.rows: dict[tuple[str, str], AuditRow] = {}
        self.managed_vpcs: dict[str, str | None] = {r.id: r.cluster for r in view.records if r.kind == "vpc"}
        for f in self.found:
            if f.kind == "vpc" and f.id not in self.managed_vpcs and f.owner is not None and self.ours(f):
                self.managed_vpcs[f.id] = f.owner

    def ours(self, found: Found) -> bool:
        return foreign_store(found.tags, self.view.store_uid_of(found.owner)) is None

    def row(self, found: Found, classification: AuditClass, cluster: str | None, reason: str) -> AuditRow:
        created_at = found.created_at
        return AuditRow(
            region=found.region,
            kind=found.kind,
            id=found.id,
            name=found.name,
            cluster=cluster,
            classification=classification,
            reason=reason,
            created_at=created_at,
            age_seconds=_age(created_at, self.now),
            vpc_id=found.vpc_id,
            parent=found.parent,
            state=found.state,
            store=store_of(found.tags),
            tags=dict(found.tags),
            attributes=dict(found.attributes),
        )

    def classify_all(self) -> list[AuditRow]:
        ordered = sorted(self.found, key=lambda f: f.kind in UNTAGGABLE_PARTS)
        for found in ordered:
            row = self.classify(found)
            if row is not None:
                self.rows[found.key] = row
        return list(self.rows.values())

    def classify(self, found: Found) -> AuditRow | None:
        record = self.view.recorded(found.kind, found.id)
        if record is not None:
            row = self.row(
                found, AuditClass.MANAGED, record.cluster, f"recorded as role {record.role} in {record.owner}"
            )
            row.owner, row.role = record.owner, record.role
            row.created_at = row.created_at or record.created_at
            row.age_seconds = _age(row.created_at, self.now)
            return row
        if found.kind in UNTAGGABLE_PARTS and found.parent is not None:
            parent = self.rows.get((UNTAGGABLE_PARTS[found.kind], found.parent))
            if parent is not None and parent.classification in ORPHAN_CLASSES | FOREIGN_CLASSES:
                reason = f"part of {parent.kind} {parent.id}, which is an {parent.classification}"
                return self.row(found, parent.classification, parent.cluster, reason)
        if found.owner is None and made_by_iam_bootstrap(found.tags):
            return self.classify_iam_bootstrap(found)
        if found.owner is not None:
            return self.classify_owned(found, found.owner)
        for intent in self.view.intents:
            if matches_intent(found, intent):
                reason = (
                    f"matches the intent for role {intent.role} of {intent.owner} (written "
                    f"{intent.record.started_at:%Y-%m-%d %H:%M:%S}): the next reconcile may adopt it"
                )
                if intent.record.examined_at is not None:
                    reason += (
                        f"; first examined {intent.record.examined_at:%Y-%m-%d %H:%M:%S}, when it saw "
                        f"{', '.join(intent.record.seen)}: several, or one seen after the adoption window, "
                        "are undecidable until the strays are deleted and the intent cleared"
                    )
                row = self.row(found, AuditClass.PENDING_INTENT, intent.cluster, reason)
                row.owner, row.role = intent.owner, intent.role
                return row
        if found.vpc_id in self.managed_vpcs and found.kind != "vpc":
            cluster = self.managed_vpcs[found.vpc_id]
            reason = _untagged_reason(found, found.vpc_id, cluster)
            return self.row(found, AuditClass.UNTAGGED_IN_MANAGED_VPC, cluster, reason)
        return None

    def classify_iam_bootstrap(self, found: Found) -> AuditRow:
        store = store_of(found.tags)
        if store == self.view.store_uid:
            reason = "made by this store's capa iam bootstrap (capa iam delete removes it)"
            return self.row(found, AuditClass.MANAGED, None, reason)
        reason = f"made by capa iam bootstrap of capa-py store {store or '(none)'}, not of this store"
        return self.row(found, AuditClass.FOREIGN_STORE, None, reason)

    def classify_owned(self, found: Found, cluster: str) -> AuditRow:
        other = foreign_store(found.tags, self.view.store_uid_of(cluster))
        if other:
            reason = f"owned by cluster {cluster} of capa-py store {other}, not of this store"
            return self.row(found, AuditClass.FOREIGN_STORE, cluster, reason)
        if other is not None:
            reason = (
                f"owned by cluster {cluster} but carries no capa-py store tag (made by CAPA, by hand, or by "
                "a capa-py version without store tags)"
            )
            return self.row(found, AuditClass.FOREIGN_NO_STORE, cluster, reason)
        role = role_of(found.tags)
        for intent in self.view.intents:
            if intent.cluster == cluster and role == intent.role and intent.record.kind == found.kind:
                reason = (
                    f"carries role {role}, for which {intent.owner} holds an intent record: the next "
                    "reconcile finds it by its tags and records it"
                )
                row = self.row(found, AuditClass.PENDING_INTENT, cluster, reason)
                row.owner, row.role = intent.owner, intent.role
                return row
        if not self.view.cluster_exists(cluster):
            reason = f"owned by cluster {cluster}, which has no Cluster or AWSCluster object"
            return self.row(found, AuditClass.ORPHAN_CLUSTER_GONE, cluster, reason)
        same_role = [r for r in self.view.records_of_role(cluster, role or "") if r.kind == found.kind]
        if same_role:
            reason = f"a duplicate: {same_role[0].owner} records role {role} as {same_role[0].id}"
        elif role:
            reason = f"carries role {role}, which no object of cluster {cluster} records"
        else:
            reason = f"owned by cluster {cluster}, but no object records it"
        return self.row(found, AuditClass.ORPHAN_UNRECORDED, cluster, reason)


def classify(found: Iterable[Found], view: StoreView, now: datetime) -> list[AuditRow]:
    """A row for every found resource that is a cluster's business (see the module docstring)."""
    return _Classifier(view, found, now).classify_all()


def drift_rows(
    records: Iterable[Record],
    seen: set[tuple[str, str]],
    exists: Callable[[Record], bool],
    now: datetime,
) -> list[AuditRow]:
    """Rows for records discovery did not see: ``managed`` when AWS still knows the id (its tags may be
    gone), ``missing`` when it does not."""
    rows: list[AuditRow] = []
    for record in records:
        if (record.kind, record.id) in seen:
            continue
        present = exists(record)
        rows.append(
            AuditRow(
                region=record.region,
                kind=record.kind,
                id=record.id,
                cluster=record.cluster,
                classification=AuditClass.MANAGED if present else AuditClass.MISSING,
                reason=(
                    f"recorded as role {record.role} in {record.owner}"
                    if present
                    else f"recorded as role {record.role} in {record.owner}, but AWS does not know it"
                ),
                created_at=record.created_at,
                age_seconds=_age(record.created_at, now),
                owner=record.owner,
                role=record.role,
            )
        )
    return rows
