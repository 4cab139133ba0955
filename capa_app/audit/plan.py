"""The deletion plan: which leaks ``capa audit --delete`` may remove, and in which order.

What may go (everything else is skipped, with the reason in the plan):

* an orphan (``cluster gone`` or ``unrecorded``) that carries the owned tag, or that is an untaggable part
  (a route, an association, an attachment, a registration) of an orphan that goes;
* an ``untagged in managed VPC`` resource only when that VPC is itself an orphan that goes;
* ``foreign`` resources (another store's, or with no capa-py store tag) only when asked explicitly
  (``--cluster NAME --include-foreign``), with the same rules as orphans;
* never ``managed`` or ``pending intent`` resources, never anything *shared* (``…=shared``: given by the
  user), never a kind the audit has no delete call for.

Then what would hurt something that stays is skipped too, until nothing changes: a route table still
associated with a subnet that stays (disassociating re-routes that subnet), an internet gateway attached to
a VPC that stays, a security group a rule of a staying group references, a VPC with anything inside that
stays. The order is AWS's dependency order (:data:`PHASES`): Auto Scaling groups (their instances
terminated with them, waited for), record sets and the private hosted zones that hold them (a zone refuses
its delete while it holds any), instances, bootstrap data (secrets, parameters), load balancers and target
groups, NAT gateways (waited for), VPC endpoints, elastic IPs, route tables, internet gateways (detached
first), network interfaces, volumes and launch templates, subnets, security groups (cross-references
revoked first), the VPC, buckets (emptied first: every object version and delete marker), and IAM last.
"""

from __future__ import annotations

from capa_app.audit.classify import UNTAGGABLE_PARTS, shared_with
from capa_app.audit.model import (
    FOREIGN_CLASSES,
    ORPHAN_CLASSES,
    AuditClass,
    AuditReport,
    AuditRow,
    DeletionPlan,
    PlannedDeletion,
    SkippedLeak,
)
from capa_py.engine.tags import owning_cluster

PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("delete Auto Scaling groups and their instances", ("autoscaling-group",)),
    ("delete DNS record sets and hosted zones", ("record-set", "hosted-zone")),
    ("terminate instances", ("instance",)),
    ("delete bootstrap data secrets", ("secret",)),
    ("delete bootstrap data parameters", ("parameter",)),
    ("delete load balancers", ("classic-load-balancer", "listener", "load-balancer")),
    ("delete target groups", ("target-registration", "target-group")),
    ("delete NAT gateways", ("nat-gateway",)),
    ("delete VPC endpoints", ("vpc-endpoint",)),
    ("release elastic IPs", ("elastic-ip",)),
    ("delete route tables", ("route-table-association", "route", "route-table")),
    ("detach and delete internet gateways", ("internet-gateway-attachment", "internet-gateway")),
    ("delete network interfaces", ("network-interface",)),
    ("delete volumes and launch templates", ("volume", "launch-template-version", "launch-template")),
    ("delete subnets", ("subnet",)),
    ("delete security groups", ("security-group-rule", "security-group")),
    ("delete VPCs", ("vpc",)),
    ("empty and delete buckets", ("bucket",)),
    ("delete IAM instance profiles and roles", ("iam-instance-profile", "iam-role")),
)


def _kind_order() -> dict[str, tuple[int, str]]:
    order: dict[str, tuple[int, str]] = {}
    for phase, kinds in PHASES:
        for kind in kinds:
            order[kind] = (len(order), phase)
    return order


KIND_ORDER = _kind_order()
"""Kind → (execution position, phase)."""

GOES_WITH_PARENT = {
    "route": "route-table",
    "target-registration": "target-group",
    "listener": "load-balancer",
    "launch-template-version": "launch-template",
}
"""Parts AWS removes together with their parent: no call of their own when the parent goes."""

Key = tuple[str, str]


def _key(row: AuditRow) -> Key:
    return (row.kind, row.id)


def _first_check(
    row: AuditRow, orphan_vpcs: set[str], going: set[Key], include_foreign: bool = False
) -> str | None:
    """Why the row may not go on its own terms (None: it may)."""
    if row.kind not in KIND_ORDER:
        return f"capa-py has no delete call for {row.kind}: delete it by hand"
    shared = shared_with(row.tags)
    if shared:
        return f"shared with cluster {shared}: given by the user, never deleted"
    deletable = ORPHAN_CLASSES | FOREIGN_CLASSES if include_foreign else ORPHAN_CLASSES
    if row.classification in deletable:
        if owning_cluster(row.tags) is not None:
            return None
        parent_kind = UNTAGGABLE_PARTS.get(row.kind)
        if parent_kind and (parent_kind, row.parent or "") in going:
            return None
        return "no owned tag, and not part of an orphan that is deleted"
    if row.classification == AuditClass.UNTAGGED_IN_MANAGED_VPC:
        if row.vpc_id in orphan_vpcs:
            return None
        return (
            f"no owned tag, and its VPC {row.vpc_id} is not an orphan that is deleted: not touched "
            "(delete it by hand if it is a leak)"
        )
    return f"{row.classification} resources are never deleted"


def _hurts_what_stays(row: AuditRow, rows: list[AuditRow], going: set[Key]) -> str | None:
    """Why deleting the row would harm something that stays (None: it would not)."""
    if row.kind == "route-table":
        for association in row.attributes.get("associations", []):
            subnet = association.get("subnet_id")
            if subnet and not association.get("main") and ("subnet", subnet) not in going:
                return f"associated with {subnet}, which stays: disassociating would re-route it"
    if row.kind == "internet-gateway":
        for vpc in row.attributes.get("attached_vpcs", []):
            if ("vpc", vpc) not in going:
                return f"attached to {vpc}, which stays: detaching would cut its internet access"
    if row.kind == "security-group":
        for other in rows:
            if (
                other.kind == "security-group-rule"
                and other.attributes.get("referenced_group") == row.id
                and _key(other) not in going
                and (  # a rule goes with its group too
                    ("security-group", str(other.attributes.get("group_id"))) not in going
                )
            ):
                return f"referenced by {other.id} of {other.attributes.get('group_id')}, which stays"
    if row.kind == "vpc":
        for other in rows:
            if other.vpc_id == row.id and _key(other) not in going and other.kind != "vpc":
                return f"{other.kind} {other.id} ({other.classification}) inside it stays"
    return None


def plan_deletion(report: AuditReport, include_foreign: bool = False) -> DeletionPlan:
    """The ordered deletions for the report's leaks (and, with ``include_foreign``, its foreign resources),
    and the leaks left alone with why."""
    rows = report.rows
    leaks = [row for row in rows if row.leak or (include_foreign and row.classification in FOREIGN_CLASSES)]
    going: set[Key] = {_key(row) for row in leaks}
    reasons: dict[Key, str] = {}
    changed = True
    while changed:
        changed = False
        orphan_vpcs = {row.id for row in leaks if row.kind == "vpc" and _key(row) in going}
        for row in leaks:
            if _key(row) not in going:
                continue
            reason = _first_check(row, orphan_vpcs, going, include_foreign) or _hurts_what_stays(
                row, rows, going
            )
            if reason is not None:
                going.discard(_key(row))
                reasons[_key(row)] = reason
                changed = True
    planned = sorted(
        (row for row in leaks if _key(row) in going), key=lambda r: (KIND_ORDER[r.kind][0], r.region, r.id)
    )
    steps = []
    for order, row in enumerate(planned, start=1):
        parent_kind = GOES_WITH_PARENT.get(row.kind)
        with_parent = row.parent if parent_kind and (parent_kind, row.parent or "") in going else None
        phase = KIND_ORDER[row.kind][1]
        steps.append(PlannedDeletion(order=order, phase=phase, row=row, with_parent=with_parent))
    skipped = [SkippedLeak(row=row, reason=reasons[_key(row)]) for row in leaks if _key(row) not in going]
    return DeletionPlan(steps=steps, skipped=skipped)
