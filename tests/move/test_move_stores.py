"""A move between two SQLite stores: what arrives on the target (uids remapped, status and finalizers kept,
clusters unpaused only at the end) and what is left on the source (nothing of the graph)."""

from __future__ import annotations

import pytest

from capa_py.api.cluster import Cluster
from capa_py.api.meta import Condition
from capa_py.api.tinkerbell import Workflow
from capa_py.api.tinkerbell_capi import TinkerbellMachine
from capa_py.move import MOVED_FROM_UID, PAUSED_BY_MOVE, MoveError, discover, move
from capa_py.store.sqlite import SQLiteStore
from tests.move.scenario import UNRELATED, keys, populate


def _everything(store: SQLiteStore) -> set[tuple[str, str | None, str]]:
    from capa_py.move import MOVABLE_KINDS

    return {(o.kind, o.namespace, o.name) for kind in MOVABLE_KINDS for o in store.list(kind)}


def test_the_graph_arrives_with_new_uids_remapped_owner_references_status_and_finalizers(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    machine = source.get(TinkerbellMachine, "lab-cp-0", "default")
    machine.metadata.finalizers = ["tinkerbellmachine.infrastructure.cluster.x-k8s.io"]
    machine = source.update(machine)
    machine.status.ready = True
    machine.status.conditions = [Condition(type="Ready", status="True")]
    machine = source.update_status(machine)
    graph = discover(source, namespace="default")
    rest = _everything(source) - keys(graph)
    assert rest >= UNRELATED

    result = move(source, target, namespace="default")

    assert _everything(target) == keys(graph)
    assert _everything(source) == rest
    assert sum(result.created.values()) == len(graph) == sum(result.deleted.values())
    moved = target.get(TinkerbellMachine, "lab-cp-0", "default")
    assert moved.uid != machine.uid
    assert moved.metadata.annotations[MOVED_FROM_UID] == machine.uid
    assert moved.status.ready
    assert moved.status.conditions[0].type == "Ready"
    assert moved.metadata.finalizers == ["tinkerbellmachine.infrastructure.cluster.x-k8s.io"]
    (owner,) = target.get(Workflow, "lab-cp-0", "default").metadata.owner_references
    assert owner.uid == moved.uid, "the Workflow's owner reference names the moved machine's new uid"
    for cluster in target.list(Cluster):
        assert not cluster.spec.paused
        assert PAUSED_BY_MOVE not in cluster.metadata.annotations


def test_a_cluster_its_user_paused_stays_paused_on_the_target(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    lab = source.get(Cluster, "lab", "default")
    lab.spec.paused = True
    source.update(lab)

    move(source, target, namespace="default")

    assert target.get(Cluster, "lab", "default").spec.paused
    assert not target.get(Cluster, "demo", "default").spec.paused


def test_moving_one_cluster_leaves_the_other_on_the_source_untouched(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    demo_before = {o.ref(): o.metadata.resource_version for o in discover(source, cluster="demo")}

    move(source, target, cluster="lab")

    assert {o.ref(): o.metadata.resource_version for o in discover(source, cluster="demo")} == demo_before
    assert target.list(Cluster, namespace="default")[0].name == "lab"
    assert len(target.list(Cluster)) == 1


def test_a_name_taken_on_the_target_by_another_object_refuses_the_move_before_any_write(
    source: SQLiteStore, target: SQLiteStore
) -> None:
    populate(source)
    target.create(Cluster.model_validate({"metadata": {"name": "lab", "namespace": "default"}}))
    before = {o.ref(): o.metadata.resource_version for o in discover(source, namespace="default")}

    with pytest.raises(MoveError, match="Cluster default/lab already exists on the target"):
        move(source, target, namespace="default")

    assert {o.ref(): o.metadata.resource_version for o in discover(source, namespace="default")} == before
    assert len(target.list(Cluster)) == 1


def test_a_dry_run_writes_nothing_on_either_side(source: SQLiteStore, target: SQLiteStore) -> None:
    populate(source)
    before = {o.ref(): o.metadata.resource_version for o in discover(source, namespace="default")}

    result = move(source, target, namespace="default", dry_run=True)

    assert keys(result.objects) == keys(discover(source, namespace="default"))
    assert not keys(result.objects) & UNRELATED
    assert {o.ref(): o.metadata.resource_version for o in discover(source, namespace="default")} == before
    assert _everything(target) == set()
