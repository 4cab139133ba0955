"""Deletion keeps Kubernetes semantics: finalizers hold an object, owner references cascade the delete."""

from __future__ import annotations

import pytest

from capa_py.api import AWSCluster, AWSMachine, Cluster, KubeObject, Machine
from capa_py.store import Conflict, Invalid, NotFound, SQLiteStore

HOLD = "test.capa.io/hold"


def new_cluster(name: str = "demo", finalizers: tuple[str, ...] = ()) -> Cluster:
    return Cluster.model_validate({"metadata": {"name": name, "finalizers": list(finalizers)}})


def new_machine(name: str, *owners: KubeObject, finalizers: tuple[str, ...] = ()) -> Machine:
    machine = Machine.model_validate(
        {
            "metadata": {"name": name, "finalizers": list(finalizers)},
            "spec": {"clusterName": "demo", "infrastructureRef": {"kind": "AWSMachine", "name": name}},
        }
    )
    machine.metadata.owner_references = [
        owner.owner_reference(controller=index == 0) for index, owner in enumerate(owners)
    ]
    return machine


def new_aws_machine(name: str, owner: KubeObject) -> AWSMachine:
    aws_machine = AWSMachine.model_validate(
        {"metadata": {"name": name}, "spec": {"instanceType": "t3.small", "ami": {"id": "ami-785db401"}}}
    )
    aws_machine.metadata.owner_references = [owner.owner_reference()]
    return aws_machine


def exists(store: SQLiteStore, kind: type[KubeObject], name: str) -> bool:
    try:
        store.get(kind, name)
    except NotFound:
        return False
    return True


def remove_finalizer(store: SQLiteStore, kind: type[KubeObject], name: str, finalizer: str) -> None:
    obj = store.get(kind, name)
    obj.metadata.finalizers = [f for f in obj.metadata.finalizers if f != finalizer]
    store.update(obj)


# -- finalizers ----------------------------------------------------------------------------------------


def test_delete_without_finalizers_removes_the_object_and_returns_its_last_state(store: SQLiteStore) -> None:
    created = store.create(new_cluster())

    last = store.delete(Cluster, "demo")

    assert last is not None
    assert last.metadata.uid == created.metadata.uid
    if isinstance(store, SQLiteStore):
        assert int(last.metadata.resource_version or 0) > int(created.metadata.resource_version or 0), (
            "the deletion is a write and gets its own resourceVersion"
        )
    else:
        # A Kubernetes API server answers a delete that removes the object at once with a Status, custom
        # resources included: the kube store's last state is the object as read just before.
        assert last.metadata.resource_version == created.metadata.resource_version
    assert not exists(store, Cluster, "demo"), "an object without finalizers must be gone after delete"


def test_delete_with_finalizers_only_marks_the_object(store: SQLiteStore) -> None:
    created = store.create(new_cluster(finalizers=(HOLD,)))

    marked = store.delete(Cluster, "demo")

    assert marked is not None
    assert marked.metadata.deletion_timestamp is not None, "delete must set deletionTimestamp"
    assert marked.metadata.generation == 2, "marking for deletion bumps generation, as Kubernetes does"
    assert marked.metadata.resource_version != created.metadata.resource_version
    assert store.get(Cluster, "demo").being_deleted, "the object must still exist while finalizers remain"


def test_deleting_again_while_finalizers_remain_is_a_no_op(store: SQLiteStore) -> None:
    store.create(new_cluster(finalizers=(HOLD,)))
    first = store.delete(Cluster, "demo")
    second = store.delete(Cluster, "demo")

    assert first is not None
    assert second is not None
    assert second.metadata.resource_version == first.metadata.resource_version, "a repeated delete wrote"
    assert second.metadata.deletion_timestamp == first.metadata.deletion_timestamp


def test_object_disappears_when_its_last_finalizer_is_removed(store: SQLiteStore) -> None:
    store.create(new_cluster(finalizers=(HOLD, "second.capa.io/hold")))
    store.delete(Cluster, "demo")

    remove_finalizer(store, Cluster, "demo", HOLD)
    assert exists(store, Cluster, "demo"), "one finalizer left: the object must stay"

    remove_finalizer(store, Cluster, "demo", "second.capa.io/hold")
    assert not exists(store, Cluster, "demo"), "no finalizers left: the object must be gone"


def test_removing_the_last_finalizer_emits_a_deleted_event(store: SQLiteStore) -> None:
    store.create(new_cluster(finalizers=(HOLD,)))
    marked = store.delete(Cluster, "demo")
    assert marked is not None

    remove_finalizer(store, Cluster, "demo", HOLD)

    events = list(store.watch(Cluster, resource_version=marked.metadata.resource_version, timeout=0))
    assert [e.type for e in events] == ["DELETED"], f"expected one DELETED event, got {events}"


def test_new_finalizers_cannot_be_added_while_deleting(store: SQLiteStore) -> None:
    store.create(new_cluster(finalizers=(HOLD,)))
    store.delete(Cluster, "demo")

    deleting = store.get(Cluster, "demo")
    deleting.metadata.finalizers.append("late.capa.io/hold")
    with pytest.raises(Invalid) as caught:
        store.update(deleting)
    assert caught.value.field == "metadata.finalizers", f"Invalid must name the field, got {caught.value}"
    assert store.get(Cluster, "demo").metadata.finalizers == [HOLD]


def test_an_update_cannot_clear_the_deletion_timestamp(store: SQLiteStore) -> None:
    store.create(new_cluster(finalizers=(HOLD,)))
    store.delete(Cluster, "demo")

    deleting = store.get(Cluster, "demo")
    deleting.metadata.deletion_timestamp = None
    deleting.metadata.labels["still"] = "here"
    updated = store.update(deleting)

    assert updated.being_deleted, "deletionTimestamp is set by the store and cannot be undone"


def test_delete_with_a_stale_resource_version_precondition_raises_conflict(store: SQLiteStore) -> None:
    created = store.create(new_cluster())
    created.metadata.labels["moved"] = "on"
    store.update(created)

    with pytest.raises(Conflict):
        store.delete(Cluster, "demo", resource_version=created.metadata.resource_version)
    assert exists(store, Cluster, "demo"), "a failed precondition must not delete"


# -- owner references: background propagation ---------------------------------------------------------


def test_deleting_an_owner_deletes_its_dependents(store: SQLiteStore) -> None:
    owner = store.create(new_cluster())
    store.create(new_machine("m-0", owner))
    store.create(new_machine("m-1", owner))
    store.create(new_machine("unrelated"))

    store.delete(Cluster, "demo")

    assert [m.name for m in store.list(Machine)] == ["unrelated"], "dependents must be garbage collected"


def test_cascading_deletion_is_visible_to_watchers(store: SQLiteStore) -> None:
    owner = store.create(new_cluster())
    machine = store.create(new_machine("m-0", owner))

    store.delete(Cluster, "demo")

    events = list(store.watch(Machine, resource_version=machine.metadata.resource_version, timeout=0))
    assert [(e.type, e.object.name) for e in events] == [("DELETED", "m-0")], (
        "garbage collection must emit DELETED for the dependent, as any delete does"
    )


def test_cascading_deletion_goes_down_every_level(store: SQLiteStore) -> None:
    cluster = store.create(new_cluster())
    machine = store.create(new_machine("m-0", cluster))
    store.create(new_aws_machine("m-0", machine))

    store.delete(Cluster, "demo")

    assert not exists(store, Machine, "m-0"), "the owned Machine must be collected"
    assert not exists(store, AWSMachine, "m-0"), "the Machine's own dependent must be collected too"


def test_dependents_wait_for_the_owner_to_really_go(store: SQLiteStore) -> None:
    owner = store.create(new_cluster(finalizers=(HOLD,)))
    store.create(new_machine("m-0", owner))

    store.delete(Cluster, "demo")
    assert exists(store, Machine, "m-0"), "while the owner is held by a finalizer, dependents stay"

    remove_finalizer(store, Cluster, "demo", HOLD)
    assert not exists(store, Machine, "m-0"), "once the owner is gone, dependents are collected"


def test_a_dependent_with_finalizers_is_marked_not_removed(store: SQLiteStore) -> None:
    cluster = store.create(new_cluster())
    machine = store.create(new_machine("m-0", cluster, finalizers=(HOLD,)))
    store.create(new_aws_machine("m-0", machine))

    store.delete(Cluster, "demo")

    held = store.get(Machine, "m-0")
    assert held.being_deleted, "the collected dependent must be marked for deletion"
    assert exists(store, AWSMachine, "m-0"), "the held dependent's own dependents must wait for it"

    remove_finalizer(store, Machine, "m-0", HOLD)
    assert not exists(store, Machine, "m-0")
    assert not exists(store, AWSMachine, "m-0"), "removing the finalizer must continue the cascade"


def test_a_dependent_with_another_live_owner_is_kept_without_the_dead_reference(store: SQLiteStore) -> None:
    first = store.create(new_cluster("first"))
    second = store.create(new_cluster("second"))
    store.create(new_machine("shared", first, second))

    store.delete(Cluster, "first")

    survivor = store.get(Machine, "shared")
    assert [ref.name for ref in survivor.metadata.owner_references] == ["second"], (
        "the reference to the deleted owner must be removed and the live one kept"
    )

    store.delete(Cluster, "second")
    assert not exists(store, Machine, "shared"), "with its last owner gone the dependent is collected"


def test_cascading_deletion_crosses_kinds(store: SQLiteStore) -> None:
    cluster = store.create(new_cluster())
    aws_cluster = AWSCluster.model_validate(
        {
            "metadata": {"name": "demo"},
            "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}},
        }
    )
    aws_cluster.metadata.owner_references = [cluster.owner_reference()]
    store.create(aws_cluster)

    store.delete(Cluster, "demo")

    assert not exists(store, AWSCluster, "demo")


# -- owner references: orphan propagation --------------------------------------------------------------


def test_orphan_propagation_keeps_dependents_and_strips_the_reference(store: SQLiteStore) -> None:
    owner = store.create(new_cluster())
    other = store.create(new_cluster("other"))
    store.create(new_machine("m-0", owner))
    store.create(new_machine("m-1", owner, other))

    store.delete(Cluster, "demo", propagation="Orphan")

    assert not exists(store, Cluster, "demo")
    orphan = store.get(Machine, "m-0")
    assert orphan.metadata.owner_references == [], "the orphan must lose the reference to the dead owner"
    assert not orphan.being_deleted, "an orphan must not be deleted"
    assert [ref.name for ref in store.get(Machine, "m-1").metadata.owner_references] == ["other"]


def test_orphan_propagation_waits_for_the_owners_finalizers(store: SQLiteStore) -> None:
    owner = store.create(new_cluster(finalizers=(HOLD,)))
    store.create(new_machine("m-0", owner))

    marked = store.delete(Cluster, "demo", propagation="Orphan")
    assert marked is not None
    assert marked.being_deleted
    assert store.get(Machine, "m-0").metadata.owner_references, "orphaning happens when the owner goes"

    remove_finalizer(store, Cluster, "demo", HOLD)

    assert not exists(store, Cluster, "demo"), "the orphan finalizer alone must not hold the owner"
    assert store.get(Machine, "m-0").metadata.owner_references == [], "the dependent must be orphaned"
