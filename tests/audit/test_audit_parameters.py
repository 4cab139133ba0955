"""Bootstrap data parameters left behind (``secureSecretsBackend: ssm-parameter-store``) are leaks:
``capa audit`` finds them in both discovery modes (every ``SecureString`` parameter of the region, listed
with ``DescribeParameters`` and its tags with ``ListTagsForResource``), classifies them by their tags like
every other kind, and ``--delete`` deletes them — never another store's.

A parameter is made here the way a machine's create makes it (the resource class, the cluster's owned tag,
the store tag and the role's tags), for a cluster this store no longer has.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from capa_app.audit import AuditClass, AuditOptions, DeletionSettings, DiscoveryMode, delete_leaks, run_audit
from capa_app.audit.arns import parse_arn
from capa_py.aws.accounting import call_scope
from capa_py.aws.session import ClientPool
from capa_py.engine.tags import managed_tags
from capa_py.store import SQLiteStore
from resources.parameter import Parameter, ParameterDesired
from tests.audit.helpers import REGION, make_pool
from tests.harness.moto_server import MotoServer

FAST = DeletionSettings(dependency_timeout=3.0, wait_timeout=10.0, poll_interval=0.05, max_poll_interval=0.2)
OTHER_STORE = "0b1c2d3e-0000-4e5f-8a9b-112233445566"


def _leak(pool: ClientPool, cluster: str, store_uid: str) -> str:
    clients = pool.for_region(REGION)
    name = f"/cluster.x-k8s.io/{uuid.uuid4()}/0"
    tags = managed_tags(cluster, "bootstrap-parameter-machine-0-0", "machine-0", store_uid=store_uid)
    Parameter(clients).create(ParameterDesired(name, "H4sIjointoken"), tags, None)
    return name


def test_a_parameter_arn_names_the_parameter() -> None:
    ref = parse_arn("arn:aws:ssm:us-east-1:123456789012:parameter/cluster.x-k8s.io/abc/0")
    assert (ref.kind, ref.id, ref.region) == ("parameter", "/cluster.x-k8s.io/abc/0", "us-east-1")


@pytest.mark.parametrize("mode", list(DiscoveryMode), ids=lambda m: m.value)
def test_a_leaked_bootstrap_parameter_is_found_classified_and_deleted(
    moto_server: MotoServer, tmp_path: Path, mode: DiscoveryMode
) -> None:
    cluster = f"parameters-{mode.value}"
    with SQLiteStore(tmp_path / "state.db") as store:
        pool = make_pool(moto_server, tmp_path)
        mine = _leak(pool, cluster, store.uid)
        theirs = _leak(pool, cluster, OTHER_STORE)
        options = AuditOptions(clusters=frozenset({cluster}), discovery=mode, include_iam=False)

        with call_scope() as calls:
            report = run_audit(store, pool, options)

        rows = {row.id: row for row in report.rows if row.kind == "parameter"}
        assert {mine, theirs} <= set(rows), report.rows
        assert set(rows) == {mine, theirs}, "only the audited cluster's"
        assert rows[mine].classification is AuditClass.ORPHAN_CLUSTER_GONE
        assert rows[theirs].classification is AuditClass.FOREIGN_STORE
        assert rows[mine].leak
        assert not rows[theirs].leak
        by_operation = calls.by_operation()
        assert by_operation.get("ssm:DescribeParameters", 0) >= 1
        assert by_operation.get("ssm:ListTagsForResource", 0) >= 2, "one per SecureString parameter"

        deletion = delete_leaks(report, store, pool, FAST)

        assert deletion.all_removed, deletion.results
        parameters = Parameter(pool.for_region(REGION))
        assert parameters.describe_by_id(mine) is None, "the leaked parameter was deleted"
        assert parameters.describe_by_id(theirs) is not None, "another store's parameter stays"
        after = run_audit(store, pool, options)
        assert [row.id for row in after.rows if row.kind == "parameter"] == [theirs]
        parameters.delete(theirs)
