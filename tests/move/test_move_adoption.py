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
