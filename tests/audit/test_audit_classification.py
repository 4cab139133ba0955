"""The audit finds every leak of the world in ``world.py`` and classifies it as it happened, with either
discovery, and never calls a healthy cluster's managed resources orphans."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_app.audit import AuditClass, AuditOptions, AuditReport, AuditRow, DiscoveryMode, run_audit
from capa_py.aws.accounting import call_scope
from capa_py.store import SQLiteStore
from resources import resource_class
from tests.audit.helpers import REGION
from tests.audit.world import World, build_world
from tests.harness.moto_server import MotoServer

GONE = AuditClass.ORPHAN_CLUSTER_GONE
UNRECORDED = AuditClass.ORPHAN_UNRECORDED
UNTAGGED = AuditClass.UNTAGGED_IN_MANAGED_VPC
MODELED = {
    "vpc",
    "subnet",
    "internet-gateway",
    "elastic-ip",
    "nat-gateway",
    "route-table",
    "security-group",
    "instance",
    "load-balancer",
    "target-group",
    "listener",
}
"""Kinds a resource class manages that the audit lists on their own or as a load balancer's listeners."""


@pytest.fixture(scope="module")
def world(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    scratch = tmp_path_factory.mktemp("audit-world")
    with SQLiteStore(Path(scratch) / "state.db") as store:
        yield build_world(moto_server, store, scratch)


@pytest.fixture(scope="module")
def report(world: World) -> AuditReport:
    return run_audit(world.store, world.pool, AuditOptions(discovery=DiscoveryMode.TAGGING_API))


@pytest.fixture(scope="module")
def describe_report(world: World) -> AuditReport:
    return run_audit(world.store, world.pool, AuditOptions(discovery=DiscoveryMode.DESCRIBE))


def _row(report: AuditReport, resource_id: str) -> AuditRow:
    rows = [r for r in report.rows if r.id == resource_id]
    assert len(rows) == 1, f"expected one row for {resource_id}, got {rows}"
    return rows[0]


def _classes(report: AuditReport) -> set[tuple[str, str, str, str | None]]:
    return {(r.kind, r.id, str(r.classification), r.cluster) for r in report.rows}


def test_healthy_cluster_resources_are_managed_never_orphans(world: World, report: AuditReport) -> None:
    for resource_id, kind in world.alpha.items():
        if resource_id == world.missing_route:
            continue
        row = _row(report, resource_id)
        assert (row.kind, row.classification, row.cluster) == (kind, AuditClass.MANAGED, "alpha"), row
        assert row.owner is not None
        assert row.reason.startswith("recorded as role ")
    recorded = set(world.alpha)
    assert not [r for r in report.leaks if r.id in recorded]


def test_resources_of_a_cluster_whose_objects_were_removed_are_orphans_of_a_gone_cluster(
    world: World, report: AuditReport
) -> None:
    assert world.beta, "beta recorded nothing"
    for resource_id, kind in world.beta.items():
        row = _row(report, resource_id)
        assert (row.kind, row.classification, row.cluster) == (kind, GONE, "beta"), row
    vpc = _row(report, world.beta_vpc)
    assert "no Cluster or AWSCluster object" in vpc.reason


def test_a_lost_status_write_leaves_an_unrecorded_orphan_named_by_its_role(
    world: World, report: AuditReport
) -> None:
    row = _row(report, world.unrecorded_subnet)
    assert (row.kind, row.classification, row.cluster) == ("subnet", UNRECORDED, "alpha")
    assert "subnet-extra" in row.reason


def test_a_crash_between_create_and_record_leaves_an_unrecorded_orphan(
    world: World, report: AuditReport
) -> None:
    row = _row(report, world.crashed_eip)
    assert (row.kind, row.classification) == ("elastic-ip", UNRECORDED)
    assert "eip-bastion" in row.reason


def test_resources_made_by_hand_with_the_cluster_tag_are_unrecorded_orphans(
    world: World, report: AuditReport
) -> None:
    for resource_id, kind in ((world.hand_template, "launch-template"), (world.hand_volume, "volume")):
        row = _row(report, resource_id)
        assert (row.kind, row.classification, row.cluster) == (kind, UNRECORDED, "alpha")


def test_untagged_leftovers_in_managed_vpcs_are_reported_with_their_vpc(
    world: World, report: AuditReport
) -> None:
    alpha_eni = _row(report, world.alpha_eni)
    assert (alpha_eni.kind, alpha_eni.classification, alpha_eni.cluster) == (
        "network-interface",
        UNTAGGED,
        "alpha",
    )
    assert world.alpha_vpc in alpha_eni.reason
    beta_eni = _row(report, world.beta_eni)
    assert (beta_eni.classification, beta_eni.cluster) == (UNTAGGED, "beta")
    group = _row(report, world.debug_group)
    assert (group.kind, group.classification) == ("security-group", UNTAGGED)
    rules = [r for r in report.rows if r.kind == "security-group-rule"]
    assert len(rules) == 1, rules
    node_group = world.alpha_object().status.resources["sg-node"].id
    assert rules[0].classification == UNTAGGED
    assert rules[0].attributes["referenced_group"] == node_group
    assert rules[0].parent == world.debug_group


def test_an_untagged_resource_an_intent_waits_for_is_pending(world: World, report: AuditReport) -> None:
    row = _row(report, world.intent_eip)
    assert (row.kind, row.classification, row.cluster, row.role) == (
        "elastic-ip",
        AuditClass.PENDING_INTENT,
        "alpha",
        "eip-intent",
    )
    assert not row.leak


def test_a_recorded_resource_deleted_behind_our_back_is_missing(world: World, report: AuditReport) -> None:
    row = _row(report, world.missing_route)
    assert (row.kind, row.classification, row.role) == ("route", AuditClass.MISSING, "route-public-default")
    assert "AWS does not know it" in row.reason


def test_resources_that_are_not_any_clusters_get_no_row(world: World, report: AuditReport) -> None:
    ids = {r.id for r in report.rows}
    assert not {world.outside_vpc, world.outside_subnet, world.shared_vpc} & ids


def test_every_leak_is_found_and_nothing_else_is_a_leak(world: World, report: AuditReport) -> None:
    expected = {
        *world.beta,
        world.unrecorded_subnet,
        world.crashed_eip,
        world.hand_template,
        world.hand_volume,
        world.alpha_eni,
        world.beta_eni,
        world.debug_group,
    }
    leaks = {r.id for r in report.leaks if r.kind != "security-group-rule"}
    assert leaks == expected


def test_tagging_api_and_describe_discovery_give_the_same_answer(
    report: AuditReport, describe_report: AuditReport
) -> None:
    assert _classes(report) == _classes(describe_report)
    assert report.summary() == describe_report.summary()


def test_tagging_api_discovery_is_paginated_and_supplemented_by_describe_calls(world: World) -> None:
    with call_scope() as calls:
        run_audit(world.store, world.pool, AuditOptions(discovery=DiscoveryMode.TAGGING_API))
    operations = calls.by_operation()
    # moto pages GetResources by about 100 tags: this world's owned resources take several pages
    assert operations.get("resourcegroupstaggingapi:GetResources", 0) >= 2
    assert operations.get("resourcegroupstaggingapi:GetTagKeys", 0) >= 1
    assert "ec2:DescribeAddresses" in operations  # elastic IPs: not returned by the tagging API
    with call_scope() as calls:
        run_audit(world.store, world.pool, AuditOptions(discovery=DiscoveryMode.DESCRIBE))
    assert not [op for op in calls.by_operation() if op.startswith("resourcegroupstaggingapi:")]


def test_one_cluster_audit_reports_only_that_cluster(world: World) -> None:
    report = run_audit(world.store, world.pool, AuditOptions(clusters=frozenset({"beta"})))
    assert {r.cluster for r in report.rows} == {"beta"}
    assert {r.id for r in report.rows} == {*world.beta, world.beta_eni}


def test_older_than_leaves_out_resources_known_to_be_younger(world: World) -> None:
    report = run_audit(world.store, world.pool, AuditOptions(older_than=3600))
    assert report.rows
    assert all(r.age_seconds is None for r in report.rows)
    kept = {r.kind for r in report.rows}
    assert "instance" not in kept  # launched seconds ago
    assert "vpc" in kept  # AWS gives no creation time: kept, never silently dropped


def _without_listing_facts(attributes: dict[str, Any]) -> dict[str, Any]:
    """A route's ``origin`` is a fact only a listing adds (which routes CreateRoute made)."""
    routes = attributes.get("routes")
    if routes is None:
        return attributes
    return {**attributes, "routes": [{k: v for k, v in r.items() if k != "origin"} for r in routes]}


@pytest.mark.parametrize("mode", list(DiscoveryMode))
def test_the_audit_reads_managed_kinds_as_their_resource_classes_do(
    world: World, mode: DiscoveryMode
) -> None:
    """One model: every resource the audit found of a kind a resource class manages carries what that class's
    own describe observes (tags, state, attributes), whichever discovery found it. Before the audit parsed
    them through the classes, its own parsers kept other attributes (no ingress rules, no subnet ids)."""
    report = run_audit(world.store, world.pool, AuditOptions(discovery=mode))
    modeled = [r for r in report.rows if r.kind in MODELED and r.classification is not AuditClass.MISSING]
    assert {r.kind for r in modeled} == MODELED
    aws = world.pool.for_region(REGION)
    for row in modeled:
        observed = resource_class(row.kind)(aws).describe_by_id(row.id)
        assert observed is not None, row.ref
        assert (row.state, row.tags) == (observed.state, observed.tags), row.ref
        listed = _without_listing_facts(row.attributes)
        assert {k: listed.get(k) for k in observed.attributes} == observed.attributes, row.ref
