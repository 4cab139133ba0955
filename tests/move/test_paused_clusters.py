"""A paused Cluster's objects are not reconciled by any controller a move relies on: Cluster API core
(Cluster, Machine), the AWS provider (AWSCluster, AWSMachine) and the bare-metal provider
(TinkerbellCluster, TinkerbellMachine). The AWS controllers talk to a closed port: any AWS call would fail
the reconcile. The one write allowed is the infrastructure objects' v1beta2 ``Paused`` condition, once, as
Cluster API's controllers report theirs."""

from __future__ import annotations

from typing import Any

from capa_py.api.aws import AWSCLUSTER_FINALIZER, AWSMACHINE_FINALIZER, AWSCluster, AWSMachine
from capa_py.api.cluster import DELETE_FOR_MOVE_ANNOTATION, Cluster, Machine
from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSSettings, ClientPool, RetryPolicy
from capa_py.engine.engine import Engine
from capa_py.engine.profiles import MOTO
from capa_py.move import MOVABLE_KINDS
from capa_py.runtime.queue import ObjectKey
from capa_py.store.sqlite import SQLiteStore
from controllers import aws_controllers
from controllers.core import ClusterController, MachineController
from controllers.tinkerbell_capi import tinkerbell_capi_controllers
from tests.move.scenario import populate


def _claimed(store: SQLiteStore) -> None:
    """Owner references as Cluster API core writes them: Cluster owns its infrastructure, Machine its."""
    for cluster in store.list(Cluster):
        infra_kind = AWSCluster if cluster.name == "demo" else TinkerbellCluster
        infra: Any = store.get(infra_kind, cluster.name, cluster.namespace)
        infra.metadata.owner_references = [cluster.owner_reference()]
        store.update(infra)
    for machine in store.list(Machine):
        kind = AWSMachine if machine.spec.cluster_name == "demo" else TinkerbellMachine
        infra = store.get(kind, machine.name, machine.namespace)
        infra.metadata.owner_references = [machine.owner_reference()]
        store.update(infra)


def _versions(store: SQLiteStore) -> dict[str, str | None]:
    return {o.ref(): o.metadata.resource_version for k in MOVABLE_KINDS for o in store.list(k)}


def _contents(store: SQLiteStore) -> dict[str, dict[str, Any]]:
    """Every movable object as stored, but for its resourceVersion and the v1beta2 ``Paused`` condition."""
    contents = {}
    for kind in MOVABLE_KINDS:
        for obj in store.list(kind):
            data = obj.to_dict()
            data["metadata"].pop("resourceVersion", None)
            v1beta2 = data.get("status", {}).pop("v1beta2", None) or {}
            others = [c for c in v1beta2.get("conditions", []) if c["type"] != "Paused"]
            if others:
                data["status"]["v1beta2"] = {"conditions": others}
            contents[obj.ref()] = data
    return contents


def _paused_conditions(store: SQLiteStore) -> dict[str, tuple[str, str, str]]:
    """``{object: (status, reason, message)}`` of each infrastructure object's ``Paused`` condition."""
    found = {}
    for kind in (AWSCluster, AWSMachine, TinkerbellCluster, TinkerbellMachine):
        for obj in store.list(kind):
            condition = obj.status.paused_condition  # type: ignore[attr-defined]
            if condition is not None:
                found[obj.ref()] = (condition.status, condition.reason, condition.message)
    return found


def _reconcile_all(store: SQLiteStore, controllers: list[Any]) -> None:
    for controller in controllers:
        for obj in store.list(controller.kind):
            controller.reconcile(ObjectKey(obj.kind, obj.namespace or "", obj.name))


def _controllers(store: SQLiteStore, closed_endpoint: str, aws: bool = True) -> list[Any]:
    core: list[Any] = [
        ClusterController(store, infrastructure_kinds=(AWSCluster, TinkerbellCluster)),
        MachineController(store, infrastructure_kinds=(AWSMachine, TinkerbellMachine)),
        *tinkerbell_capi_controllers(store),
    ]
    if not aws:
        return core
    pool = ClientPool(
        AWSSettings(region="us-east-1", endpoint_url=closed_endpoint, retry=RetryPolicy(attempts=1)),
        limiter=RateLimiter(enabled=False),
    )
    return [*core, *aws_controllers(store, pool, Engine(MOTO))[2:]]


def test_no_controller_writes_an_object_of_a_paused_cluster(
    source: SQLiteStore, closed_endpoint: str
) -> None:
    populate(source)
    _claimed(source)
    for cluster in source.list(Cluster):
        cluster.spec.paused = True
        source.update(cluster)
    before = _contents(source)

    _reconcile_all(source, _controllers(source, closed_endpoint))

    assert _contents(source) == before
    # Each infrastructure object says why it is left alone; saying it again writes nothing.
    paused = _paused_conditions(source)
    infrastructure = {
        o.ref()
        for k in (AWSCluster, AWSMachine, TinkerbellCluster, TinkerbellMachine)
        for o in source.list(k)
    }
    assert set(paused) == infrastructure, paused
    for ref, (status, reason, message) in paused.items():
        cluster = "demo" if ref.startswith("AWS") else "lab"
        assert (status, reason, message) == (
            "True",
            "Paused",
            f"cluster {cluster} has spec.paused set to true",
        )
    versions = _versions(source)
    _reconcile_all(source, _controllers(source, closed_endpoint))
    assert _versions(source) == versions


def test_the_same_objects_are_reconciled_once_unpaused(source: SQLiteStore, closed_endpoint: str) -> None:
    """The control for the test above: without the pause, these controllers do write."""
    populate(source)
    _claimed(source)
    before = _versions(source)

    _reconcile_all(source, _controllers(source, closed_endpoint, aws=False))

    after = _versions(source)
    changed = {ref for ref in before if after.get(ref) != before[ref]}
    assert {"Cluster default/demo", "Cluster default/lab", "TinkerbellCluster default/lab"} <= changed


def test_objects_of_a_paused_cluster_deleted_by_clusterctl_move_are_left_to_it(
    source: SQLiteStore, closed_endpoint: str
) -> None:
    """``clusterctl move`` pauses the Cluster, then deletes each source object (annotated
    ``clusterctl.cluster.x-k8s.io/delete-for-move``) and removes its finalizers a moment later. In that
    moment the AWS controllers must not delete anything in AWS: the moved objects' resources now belong to
    the target. (Before, a source controller still running terminated an instance and deleted a listener
    during the move.)"""
    populate(source)
    _claimed(source)
    for cluster in source.list(Cluster):
        cluster.spec.paused = True
        source.update(cluster)
    for kind, finalizer in ((AWSCluster, AWSCLUSTER_FINALIZER), (AWSMachine, AWSMACHINE_FINALIZER)):
        for obj in source.list(kind):
            obj.metadata.finalizers = [finalizer]
            obj.metadata.annotations[DELETE_FOR_MOVE_ANNOTATION] = ""
            source.update(obj)
            source.delete(kind, obj.name, obj.namespace)
    before = _contents(source)
    assert all(o.being_deleted for k in (AWSCluster, AWSMachine) for o in source.list(k))

    _reconcile_all(source, _controllers(source, closed_endpoint))

    assert _contents(source) == before
