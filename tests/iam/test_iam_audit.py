"""``capa audit`` and what ``capa iam bootstrap`` made: this store's is managed (never a leak, never deleted
by the audit); another store's is not this audit's business."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_app.audit import AuditClass, AuditOptions, DiscoveryMode, run_audit
from capa_app.iam.bootstrap import apply_steps, observe, plan_bootstrap
from capa_app.iam.policy import ROLE_SUFFIX
from capa_py.aws.session import AWSClients
from capa_py.store import SQLiteStore
from tests.audit.helpers import make_pool
from tests.harness.moto_server import MotoServer

NAMES = sorted(f"{p}{ROLE_SUFFIX}" for p in ("control-plane", "controllers", "nodes"))


def _bootstrap(aws: AWSClients, store_uid: str) -> None:
    apply_steps(aws, plan_bootstrap(aws, observe(aws), store_uid))


@pytest.mark.parametrize("discovery", list(DiscoveryMode))
def test_the_bootstraps_roles_profiles_and_policies_are_managed_by_the_store_that_made_them(
    aws: AWSClients, moto_server: MotoServer, store: SQLiteStore, tmp_path: Path, discovery: DiscoveryMode
) -> None:
    _bootstrap(aws, store.uid)
    report = run_audit(store, make_pool(moto_server, tmp_path), AuditOptions(discovery=discovery))
    rows = {(r.kind, r.id): r for r in report.rows}
    for kind in ("iam-role", "iam-instance-profile", "iam-policy"):
        for name in NAMES:
            row = rows.get((kind, name))
            assert row is not None, f"the audit did not find {kind} {name}: {sorted(rows)}"
            assert row.classification == AuditClass.MANAGED
            assert "this store's capa iam bootstrap" in row.reason
    assert report.leaks == []


def test_another_stores_bootstrap_is_not_listed_nor_a_leak(
    aws: AWSClients, moto_server: MotoServer, store: SQLiteStore, tmp_path: Path
) -> None:
    _bootstrap(aws, "another-store")
    report = run_audit(store, make_pool(moto_server, tmp_path))
    assert [r for r in report.rows if r.kind.startswith("iam-")] == []
    assert report.leaks == []
