"""A machine pool moves with its cluster (examples/aws-cluster-machinepool.yaml on moto over HTTP): the
MachinePool, its AWSMachinePool and its bootstrap data Secret, status kept (providerIDList, the launch
template's id and version, the recorded group and template), so the target's controllers adopt the Auto
Scaling group and the launch template with no mutating AWS call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capa_py.api.aws import AWSCluster
from capa_py.api.cluster import Cluster
from capa_py.api.core import Secret
from capa_py.api.loader import load_manifests
from capa_py.api.machinepool import AWSMachinePool, MachinePool
from capa_py.api.meta import KubeObject
from capa_py.move import MOVED_FROM_UID, discover, move
from capa_py.store.sqlite import SQLiteStore
from controllers.run import converge
from tests.controllers.conftest import Harness

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machinepool.yaml"
NS = "default"


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if not isinstance(o, Secret)]


def _groups(h: Harness) -> dict[str, dict[str, Any]]:
    pages = h.aws.autoscaling.pages("DescribeAutoScalingGroups", "AutoScalingGroups")
    return {g["AutoScalingGroupName"]: g for g in pages}


def test_a_machine_pool_its_infrastructure_and_bootstrap_secret_are_in_the_clusters_graph(
    source: SQLiteStore,
) -> None:
    from capa_py.operations import apply_objects

    apply_objects(source, load_manifests([EXAMPLE]))

    graph = {(o.kind, o.name) for o in discover(source, cluster="pool")}

    assert graph == {
        ("Cluster", "pool"),
        ("AWSCluster", "pool"),
        ("MachinePool", "pool-workers"),
        ("AWSMachinePool", "pool-workers"),
        ("Secret", "pool-workers-bootstrap"),
    }


def test_the_targets_controllers_adopt_a_moved_machine_pool_with_no_mutating_aws_call(
    harness: Harness, tmp_path: Path
) -> None:
    h = harness
    applied = h.apply(load_manifests([EXAMPLE]))
    up = h.converge(_targets(applied), timeout=120)
    assert up.converged, up.states
    before = h.store.get(AWSMachinePool, "pool-workers", NS)
    assert before.status.launch_template_id
    assert before.status.resources
    assert len(before.spec.provider_id_list) == 2
    pool_before = h.store.get(MachinePool, "pool-workers", NS)
    group_before = _groups(h)["default-pool-workers"]
    bootstrap = h.store.get(Secret, "pool-workers-bootstrap", NS).value("value")

    target = SQLiteStore(tmp_path / "target.db")
    try:
        result = move(h.store, target, namespace=NS)

        assert (result.created["MachinePool"], result.created["AWSMachinePool"]) == (1, 1)
        assert h.store.list(MachinePool, namespace=NS) == []
        assert h.store.list(AWSMachinePool, namespace=NS) == []
        moved = target.get(AWSMachinePool, "pool-workers", NS)
        assert moved.metadata.annotations[MOVED_FROM_UID] == before.uid
        assert moved.status.resources == before.status.resources
        assert (moved.status.launch_template_id, moved.status.launch_template_version) == (
            before.status.launch_template_id,
            before.status.launch_template_version,
        )
        assert moved.spec.provider_id_list == before.spec.provider_id_list
        owner = target.get(MachinePool, "pool-workers", NS)
        assert [r.uid for r in moved.metadata.owner_references if r.kind == "MachinePool"] == [owner.uid]
        assert target.get(Secret, "pool-workers-bootstrap", NS).value("value") == bootstrap

        controllers = Harness(target, h.server).controllers()
        targets = [target.get(type(o), o.name, o.namespace) for o in _targets(applied)]
        adopted = converge(target, controllers, targets, goal="ready", timeout=60)

        assert adopted.converged, adopted.states
        operations = adopted.calls.by_operation()
        assert any(op.startswith("autoscaling:Describe") for op in operations), (
            "the target's controllers never looked at the group; the test is void"
        )
        assert adopted.calls.total(mutating=True) == 0, operations
        after = target.get(AWSMachinePool, "pool-workers", NS)
        assert after.status.resources == before.status.resources
        assert after.status.launch_template_version == before.status.launch_template_version
        assert after.spec.provider_id_list == before.spec.provider_id_list
        assert (after.status.ready, after.status.replicas) == (True, 2)
        pool_after = target.get(MachinePool, "pool-workers", NS)
        assert (pool_after.status.phase, pool_after.status.replicas) == (pool_before.status.phase, 2)
        group_after = _groups(h)["default-pool-workers"]
        assert {i["InstanceId"] for i in group_after["Instances"]} == {
            i["InstanceId"] for i in group_before["Instances"]
        }
        assert target.get(AWSCluster, "pool", NS).status.ready
        assert not target.get(Cluster, "pool", NS).spec.paused
    finally:
        target.close()


def _claimed_pool(store: SQLiteStore, paused: bool) -> None:
    """The example as Cluster API core claims it (the MachinePool owns its AWSMachinePool), its cluster
    paused as a move pauses it, or not."""
    from capa_py.operations import apply_objects

    apply_objects(store, load_manifests([EXAMPLE]))
    pool = store.get(MachinePool, "pool-workers", NS)
    infra = store.get(AWSMachinePool, "pool-workers", NS)
    infra.metadata.owner_references = [pool.owner_reference()]
    store.update(infra)
    cluster = store.get(Cluster, "pool", NS)
    cluster.spec.paused = paused
    store.update(cluster)


def _pool_controller(store: SQLiteStore, closed_endpoint: str) -> Any:
    from capa_py.aws.ratelimit import RateLimiter
    from capa_py.aws.session import AWSSettings, ClientPool, RetryPolicy
    from capa_py.engine.engine import Engine
    from capa_py.engine.profiles import MOTO
    from controllers.awsmachinepool import AWSMachinePoolController

    pool = ClientPool(
        AWSSettings(region="us-east-1", endpoint_url=closed_endpoint, retry=RetryPolicy(attempts=1)),
        limiter=RateLimiter(enabled=False),
    )
    return AWSMachinePoolController(store, pool, Engine(MOTO))


def test_the_pool_of_a_cluster_a_move_paused_is_left_alone(source: SQLiteStore, closed_endpoint: str) -> None:
    """While a move runs the source's AWSMachinePool controller (here against a closed port: any AWS call
    would fail) makes no call and writes only the Paused condition; unpaused, it takes the pool on."""
    from capa_py.runtime.queue import ObjectKey

    _claimed_pool(source, paused=True)
    controller = _pool_controller(source, closed_endpoint)

    controller.reconcile(ObjectKey("AWSMachinePool", NS, "pool-workers"))

    infra = source.get(AWSMachinePool, "pool-workers", NS)
    assert infra.metadata.finalizers == []
    assert infra.status.resources == {}
    condition = infra.status.paused_condition
    assert condition is not None
    assert (condition.status, condition.reason) == ("True", "Paused")

    cluster = source.get(Cluster, "pool", NS)
    cluster.spec.paused = False
    source.update(cluster)
    controller.reconcile(ObjectKey("AWSMachinePool", NS, "pool-workers"))
    assert source.get(AWSMachinePool, "pool-workers", NS).metadata.finalizers, "unpaused, it acts"
