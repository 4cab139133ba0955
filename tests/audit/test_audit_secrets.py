"""Bootstrap data secrets left behind are leaks: ``capa audit`` finds them (in both discovery modes),
classifies them by their tags like every other kind, and ``--delete`` deletes them — never another store's.

A secret is made here the way a machine's create makes it (the resource class, the cluster's owned tag,
the store tag and the role's tags), for a cluster this store no longer has: what a controller stopped for
good between ``CreateSecret`` and ``DeleteSecret`` leaves once the cluster's objects are gone.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from capa_app.audit import AuditClass, AuditOptions, DeletionSettings, DiscoveryMode, delete_leaks, run_audit
from capa_py.aws.session import ClientPool
from capa_py.engine.tags import managed_tags
from capa_py.store import SQLiteStore
from resources.secret import Secret, SecretDesired
from tests.audit.helpers import REGION, make_pool
from tests.harness.moto_server import MotoServer

FAST = DeletionSettings(dependency_timeout=3.0, wait_timeout=10.0, poll_interval=0.05, max_poll_interval=0.2)
OTHER_STORE = "0b1c2d3e-0000-4e5f-8a9b-112233445566"


def _leak(pool: ClientPool, cluster: str, store_uid: str) -> str:
    clients = pool.for_region(REGION)
    name = f"aws.cluster.x-k8s.io/{uuid.uuid4()}-0"
    tags = managed_tags(cluster, "bootstrap-secret-machine-0-0", "machine-0", store_uid=store_uid)
    Secret(clients).create(SecretDesired(name, b"\x1f\x8bjoin token"), tags, None)
    return name


@pytest.mark.parametrize("mode", list(DiscoveryMode), ids=lambda m: m.value)
def test_a_leaked_bootstrap_secret_is_found_classified_and_deleted(
    moto_server: MotoServer, tmp_path: Path, mode: DiscoveryMode
) -> None:
    cluster = f"secrets-{mode.value}"
    with SQLiteStore(tmp_path / "state.db") as store:
        pool = make_pool(moto_server, tmp_path)
        mine = _leak(pool, cluster, store.uid)
        theirs = _leak(pool, cluster, OTHER_STORE)
        options = AuditOptions(clusters=frozenset({cluster}), discovery=mode, include_iam=False)

        report = run_audit(store, pool, options)

        rows = {row.id: row for row in report.rows if row.kind == "secret"}
        assert set(rows) == {mine, theirs}, report.rows
        assert rows[mine].classification is AuditClass.ORPHAN_CLUSTER_GONE
        assert rows[theirs].classification is AuditClass.FOREIGN_STORE
        assert rows[mine].leak
        assert not rows[theirs].leak

        deletion = delete_leaks(report, store, pool, FAST)

        assert deletion.all_removed, deletion.results
        secrets = Secret(pool.for_region(REGION))
        assert secrets.describe_by_id(mine) is None, "the leaked secret was deleted"
        assert secrets.describe_by_id(theirs) is not None, "another store's secret stays"
        after = run_audit(store, pool, options)
        assert [row.id for row in after.rows if row.kind == "secret"] == [theirs]
        secrets.delete(theirs)
