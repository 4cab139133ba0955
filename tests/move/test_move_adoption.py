"""After a move, the target's controllers find every AWS resource as the moved statuses record it and make
no mutating AWS call; the source keeps nothing. moto over HTTP stands in for AWS."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.move import move
from capa_py.store.sqlite import SQLiteStore
from controllers.run import converge
from tests.controllers.conftest import Harness


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if not isinstance(o, Secret)]


def test_the_targets_controllers_adopt_a_moved_aws_cluster_with_no_mutating_aws_call(
    harness: Harness, example: Callable[[], list[KubeObject]], tmp_path: Path
) -> None:
    applied = harness.apply(example())
    assert harness.converge(_targets(applied)).converged
    before = harness.store.get(AWSCluster, "demo", "default")
    instances = {m.name: m.status.instance_id for m in harness.store.list(AWSMachine, namespace="default")}
    assert before.status.ready
    assert all(instances.values())
    phases = {m.name: m.status.phase for m in harness.store.list(Machine, namespace="default")}

    target = SQLiteStore(tmp_path / "target.db")
    try:
        result = move(harness.store, target, namespace="default")
        assert result.created["AWSMachine"] == 3
        assert harness.store.list(Cluster, namespace="default") == []
        assert harness.store.list(AWSMachine, namespace="default") == []
        moved = [target.get(type(o), o.name, o.namespace) for o in _targets(applied)]

        controllers = Harness(target, harness.server).controllers()

        adopted = converge(target, controllers, moved, goal="ready", timeout=60)

        assert adopted.converged, adopted.states
        assert adopted.calls.total() > 0, "the target's controllers made no AWS call; the test is void"
        assert adopted.calls.total(mutating=True) == 0, adopted.calls.by_operation()
        after = target.get(AWSCluster, "demo", "default")
        assert after.status.resources == before.status.resources
        assert {
            m.name: m.status.instance_id for m in target.list(AWSMachine, namespace="default")
        } == instances
        assert target.get(Cluster, "demo", "default").status.phase == "Provisioned"
        assert {m.name: m.status.phase for m in target.list(Machine, namespace="default")} == phases
    finally:
        target.close()


def test_an_audit_of_the_target_counts_a_moved_clusters_resources_as_its_own(
    harness: Harness, example: Callable[[], list[KubeObject]], tmp_path: Path
) -> None:
    """The moved cluster's resources keep the source store's tag; the target acts for that uid for the
    moved cluster only, so its audit reports the moved cluster's unrecorded resource as its own leak (an
    orphan it may delete), not another store's (a pivoted management cluster audits itself once its
    bootstrap store is gone)."""
    from capa_app.audit import AuditClass, AuditOptions, run_audit

    applied = harness.apply(example())
    assert harness.converge(_targets(applied)).converged
    target = SQLiteStore(tmp_path / "target.db")
    try:
        move(harness.store, target, namespace="default")
        cluster = target.get(AWSCluster, "demo", "default")
        # A lost status write: one security group is no longer recorded.
        role = next(r for r, res in cluster.status.resources.items() if res.kind == "security-group")
        lost = cluster.status.resources.pop(role).id
        target.update_status(cluster)

        report = run_audit(target, harness.pool, AuditOptions())
        by_id = {row.id: row for row in report.rows}
        assert by_id[lost].classification == AuditClass.ORPHAN_UNRECORDED, by_id[lost].reason
        others = {row.classification for row in report.rows if row.id != lost}
        assert others == {AuditClass.MANAGED}, [(r.kind, r.id, r.reason) for r in report.rows]

        # A store that moved nothing still sees the cluster's resources as another store's.
        other = SQLiteStore(tmp_path / "other.db")
        try:
            report = run_audit(other, harness.pool, AuditOptions(clusters=frozenset({"demo"})))
            assert report.rows
            assert {row.classification for row in report.rows} == {AuditClass.FOREIGN_STORE}
        finally:
            other.close()
    finally:
        target.close()
