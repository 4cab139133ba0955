"""Bootstrap data chunks left behind are leaks, on either backend (Secrets Manager secrets; SSM Parameter
Store ``SecureString`` parameters with ``secureSecretsBackend: ssm-parameter-store``, listed with
``DescribeParameters`` and their tags with ``ListTagsForResource``): ``capa audit`` finds them in both
discovery modes, classifies them by their tags like every other kind, and ``--delete`` deletes them — never
another store's.

A chunk is made here the way a machine's create makes it (the resource class, the cluster's owned tag,
the store tag and the role's tags), for a cluster this store no longer has: what a controller stopped for
good between the create and the delete leaves once the cluster's objects are gone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from capa_app.audit import AuditClass, AuditOptions, DeletionSettings, DiscoveryMode, delete_leaks, run_audit
from capa_py.aws.accounting import call_scope
from capa_py.aws.session import AWSClients, ClientPool
from capa_py.engine.resource import ResourceClass
from capa_py.engine.tags import managed_tags
from capa_py.store import SQLiteStore
from resources.parameter import Parameter, ParameterDesired
from resources.secret import Secret, SecretDesired
from tests.audit.helpers import REGION, make_pool
from tests.harness.moto_server import MotoServer

FAST = DeletionSettings(dependency_timeout=3.0, wait_timeout=10.0, poll_interval=0.05, max_poll_interval=0.2)
OTHER_STORE = "0b1c2d3e-0000-4e5f-8a9b-112233445566"


@dataclass(frozen=True)
class Leak:
    """One backend: its kind in the audit, how a machine names and makes a chunk, and the calls that list
    the kind (at least, per audit)."""

    kind: str
    resource: Callable[[AWSClients], ResourceClass[Any]]
    desired: Callable[[], Any]
    role: str
    listing: dict[str, int]


SECRETS = Leak(
    "secret",
    Secret,
    lambda: SecretDesired(f"aws.cluster.x-k8s.io/{uuid.uuid4()}-0", b"\x1f\x8bjoin token"),
    "bootstrap-secret-machine-0-0",
    {},
)
PARAMETERS = Leak(
    "parameter",
    Parameter,
    lambda: ParameterDesired(f"/cluster.x-k8s.io/{uuid.uuid4()}/0", "H4sIjointoken"),
    "bootstrap-parameter-machine-0-0",
    {"ssm:DescribeParameters": 1, "ssm:ListTagsForResource": 2},  # one per SecureString parameter
)


def _leak(pool: ClientPool, backend: Leak, cluster: str, store_uid: str) -> str:
    desired = backend.desired()
    tags = managed_tags(cluster, backend.role, "machine-0", store_uid=store_uid)
    backend.resource(pool.for_region(REGION)).create(desired, tags, None)
    name: str = desired.name
    return name


@pytest.mark.parametrize("backend", [SECRETS, PARAMETERS], ids=["secrets-manager", "ssm-parameter-store"])
@pytest.mark.parametrize("mode", list(DiscoveryMode), ids=lambda m: m.value)
def test_a_leaked_bootstrap_chunk_is_found_classified_and_deleted(
    moto_server: MotoServer, tmp_path: Path, mode: DiscoveryMode, backend: Leak
) -> None:
    cluster = f"{backend.kind}s-{mode.value}"
    with SQLiteStore(tmp_path / "state.db") as store:
        pool = make_pool(moto_server, tmp_path)
        mine = _leak(pool, backend, cluster, store.uid)
        theirs = _leak(pool, backend, cluster, OTHER_STORE)
        options = AuditOptions(clusters=frozenset({cluster}), discovery=mode, include_iam=False)

        with call_scope() as calls:
            report = run_audit(store, pool, options)

        rows = {row.id: row for row in report.rows if row.kind == backend.kind}
        assert set(rows) == {mine, theirs}, report.rows
        assert rows[mine].classification is AuditClass.ORPHAN_CLUSTER_GONE
        assert rows[theirs].classification is AuditClass.FOREIGN_STORE
        assert rows[mine].leak
        assert not rows[theirs].leak
        by_operation = calls.by_operation()
        for operation, least in backend.listing.items():
            assert by_operation.get(operation, 0) >= least, (operation, by_operation)

        deletion = delete_leaks(report, store, pool, FAST)

        assert deletion.all_removed, deletion.results
        chunks = backend.resource(pool.for_region(REGION))
        assert chunks.describe_by_id(mine) is None, "the leaked chunk was deleted"
        assert chunks.describe_by_id(theirs) is not None, "another store's chunk stays"
        after = run_audit(store, pool, options)
        assert [row.id for row in after.rows if row.kind == backend.kind] == [theirs]
        chunks.delete(theirs)
