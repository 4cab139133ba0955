"""``--delete`` reads the store again right before each delete: what a reconcile recorded, or a cluster
that came back, between the audit and the delete is left alone, however the audit classed it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from capa_app.audit import (
    AuditClass,
    AuditOptions,
    AuditReport,
    DeletionReport,
    DeletionResult,
    DeletionSettings,
    Outcome,
    delete_leaks,
    plan_deletion,
    run_audit,
)
from capa_py.api.aws import AWSCluster
from capa_py.api.loader import load_manifest_text
from capa_py.aws.session import ClientPool
from capa_py.engine.engine import Engine, Scope
from capa_py.engine.errors import RetryableError
from capa_py.engine.profiles import MOTO
from capa_py.engine.recorder import StatusRecorder
from capa_py.operations import apply_objects
from capa_py.store import SQLiteStore
from capa_py.store.protocol import ObjectStore
from resources.elastic_ip import ElasticIp, ElasticIpDesired
from tests.audit.helpers import REGION, FailingStatusStore, cluster_manifest, forget_cluster, make_pool
from tests.harness.moto_server import MotoServer

FAST = DeletionSettings(dependency_timeout=3.0, wait_timeout=10.0, poll_interval=0.05, max_poll_interval=0.2)
ROLE = "eip-bastion"


@dataclass
class Setting:
    store: ObjectStore
    pool: ClientPool


@pytest.fixture
def setting(moto_server: MotoServer, tmp_path: Path) -> Iterator[Setting]:
    moto_server.reset()
    pool = make_pool(moto_server, tmp_path)
    with SQLiteStore(tmp_path / "state.db") as store:
        yield Setting(store, pool)


def _store_cluster(store: ObjectStore, name: str, cidr: str) -> AWSCluster:
    """The cluster's objects, as ``capa apply`` stores them (no controller has run)."""
    apply_objects(store, load_manifest_text(cluster_manifest(name, cidr), "test.yaml"))
    return store.get(AWSCluster, name, "default")


def _reconcile_address(setting: Setting, cluster: str, store: ObjectStore | None = None) -> str:
    """One reconcile of the cluster's elastic IP by the engine; returns its allocation id."""
    owner = setting.store.get(AWSCluster, cluster, "default")
    recorder = StatusRecorder(store or setting.store, owner)
    observed = Engine(MOTO).ensure(
        ElasticIp(setting.pool.for_region(REGION)),
        ROLE,
        ElasticIpDesired(),
        Scope(cluster, owner.metadata.uid, recorder),
    )
    return observed.id


def _recorded(store: ObjectStore, cluster: str) -> dict[str, str]:
    status = store.get(AWSCluster, cluster, "default").status
    return {role: resource.id for role, resource in status.resources.items()}


def _address_exists(setting: Setting, allocation_id: str) -> bool:
    ec2 = setting.pool.for_region(REGION).ec2.raw
    found = ec2.describe_addresses(Filters=[{"Name": "allocation-id", "Values": [allocation_id]}])
    return bool(found["Addresses"])


def _planned(report: AuditReport, resource_id: str, classification: AuditClass) -> None:
    rows = {r.id: r.classification for r in report.rows}
    assert rows.get(resource_id) == classification, rows
    planned = {s.row.id for s in plan_deletion(report).steps}
    assert resource_id in planned, f"the audit did not plan to delete {resource_id}: {planned}"


def _result(deletion: DeletionReport, resource_id: str) -> DeletionResult:
    return next(r for r in deletion.results if r.id == resource_id)


def test_a_leak_recorded_by_a_reconcile_after_the_audit_is_not_deleted(setting: Setting) -> None:
    _store_cluster(setting.store, "delta", "10.5")
    # The create succeeded, its status write was lost: tagged, recorded nowhere.
    with pytest.raises(RetryableError, match="recording failed"):
        _reconcile_address(setting, "delta", store=FailingStatusStore(setting.store))  # type: ignore[arg-type]
    [leaked] = [
        a["AllocationId"] for a in setting.pool.for_region(REGION).ec2.raw.describe_addresses()["Addresses"]
    ]
    assert ROLE not in _recorded(setting.store, "delta")

    report = run_audit(setting.store, setting.pool, AuditOptions(clusters=frozenset({"delta"})))
    _planned(report, leaked, AuditClass.ORPHAN_UNRECORDED)
    plan = plan_deletion(report)

    # Between the audit and the delete, the next reconcile finds the address by its tags and records it.
    assert _reconcile_address(setting, "delta") == leaked
    assert _recorded(setting.store, "delta")[ROLE] == leaked

    deletion = delete_leaks(report, setting.store, setting.pool, FAST, plan=plan)
    result = _result(deletion, leaked)
    assert result.outcome == Outcome.SKIPPED, result
    assert "recorded since the audit" in result.detail
    assert ROLE in result.detail
    assert _address_exists(setting, leaked), "the audit deleted a resource the store records"


def test_a_leak_of_a_cluster_that_came_back_after_the_audit_is_not_deleted(setting: Setting) -> None:
    _store_cluster(setting.store, "epsilon", "10.6")
    address = _reconcile_address(setting, "epsilon")
    forget_cluster(setting.store, "epsilon")

    report = run_audit(setting.store, setting.pool, AuditOptions(clusters=frozenset({"epsilon"})))
    _planned(report, address, AuditClass.ORPHAN_CLUSTER_GONE)
    plan = plan_deletion(report)

    # Between the audit and the delete, the cluster is applied again: its next reconcile adopts the address.
    _store_cluster(setting.store, "epsilon", "10.6")

    deletion = delete_leaks(report, setting.store, setting.pool, FAST, plan=plan)
    result = _result(deletion, address)
    assert result.outcome == Outcome.SKIPPED, result
    assert "epsilon has objects again" in result.detail
    assert _address_exists(setting, address), "the audit deleted a resource of a cluster that is back"


def test_without_a_change_since_the_audit_the_planned_delete_happens(setting: Setting) -> None:
    """The control: the same leak, nothing changed in between, is deleted."""
    _store_cluster(setting.store, "zeta", "10.8")
    address = _reconcile_address(setting, "zeta")
    forget_cluster(setting.store, "zeta")

    report = run_audit(setting.store, setting.pool, AuditOptions(clusters=frozenset({"zeta"})))
    _planned(report, address, AuditClass.ORPHAN_CLUSTER_GONE)
    deletion = delete_leaks(report, setting.store, setting.pool, FAST)
    assert _result(deletion, address).outcome == Outcome.DELETED
    assert not _address_exists(setting, address)
