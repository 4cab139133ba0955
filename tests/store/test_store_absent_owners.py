"""An object whose owners are all absent is garbage, however it came to name them: created or updated after
its owner was deleted, naming an owner re-created under the same name (another uid), or one in another
namespace. Kubernetes' garbage collector (in kube-controller-manager) deletes such an object; the SQLite
store deletes it in the transaction of the write that made it so. Each contract test runs against every
store (``tests/store/conftest.py``): the real API server gets there eventually, the others at once.

Before the SQLite store checked owners on create and update, every test here except the last one (which
checks what must stay) failed on the SQLite store and on ``capa serve``: the dependents lived on."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from capa_py.api import Cluster, KubeObject, Machine
from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.core import ConfigMap, Namespace
from capa_py.api.meta import OwnerReference
from capa_py.apiserver import start_in_thread
from capa_py.store import NotFound, SQLiteStore
from capa_py.store.protocol import ObjectStore
from tests.apiserver.crd_support import widget_crd
from tests.peers.cluster import PeerCluster
from tests.store.kube_support import api_client_for
from tests.support.eventually import eventually

HOLD = "test.capa.io/hold"


def new_cluster(name: str, namespace: str = "default", finalizers: tuple[str, ...] = ()) -> Cluster:
    return Cluster.model_validate(
        {"metadata": {"name": name, "namespace": namespace, "finalizers": list(finalizers)}}
    )


def new_machine(
    name: str,
    *owners: KubeObject | OwnerReference,
    namespace: str = "default",
    finalizers: tuple[str, ...] = (),
) -> Machine:
    machine = Machine.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "finalizers": list(finalizers)},
            "spec": {"clusterName": "demo", "infrastructureRef": {"kind": "AWSMachine", "name": name}},
        }
    )
    machine.metadata.owner_references = [
        owner if isinstance(owner, OwnerReference) else owner.owner_reference(controller=index == 0)
        for index, owner in enumerate(owners)
    ]
    return machine


def exists(store: ObjectStore, kind: type[KubeObject], name: str, namespace: str | None = None) -> bool:
    try:
        store.get(kind, name, namespace)
    except NotFound:
        return False
    return True


def deleted_owner(store: ObjectStore, name: str = "gone") -> Cluster:
    """A Cluster as it was created, deleted since (its uid names no object any more)."""
    owner = store.create(new_cluster(name))
    store.delete(Cluster, name)
    eventually(lambda: not exists(store, Cluster, name), f"Cluster {name} deleted")
    return owner


def namespace_object(store: ObjectStore, name: str) -> Namespace:
    """The Namespace ``name``, created when the store has none (the real API server has the test's)."""
    try:
        return store.get(Namespace, name)
    except NotFound:
        return store.create(Namespace.model_validate({"metadata": {"name": name}}))


def owner_names(store: ObjectStore, name: str) -> list[str]:
    return [ref.name for ref in store.get(Machine, name).metadata.owner_references]


def test_a_dependent_created_after_its_owner_was_deleted_is_collected(store: ObjectStore) -> None:
    owner = deleted_owner(store)

    created = store.create(new_machine("late", owner))

    assert created.metadata.uid, "the create itself succeeds, as on an API server"
    eventually(lambda: not exists(store, Machine, "late"), "the dependent of a deleted owner collected")


def test_the_collection_reaches_watchers_as_added_then_deleted(store: ObjectStore) -> None:
    owner = deleted_owner(store)
    since = store.list(Machine).resource_version

    store.create(new_machine("late", owner))

    def events() -> list[tuple[str, str]] | None:
        seen = [(e.type, e.object.name) for e in store.watch(Machine, resource_version=since, timeout=0)]
        return seen if ("DELETED", "late") in seen else None

    assert eventually(events, "the collection watched") == [("ADDED", "late"), ("DELETED", "late")]


def test_an_update_naming_only_a_deleted_owner_collects_the_object(store: ObjectStore) -> None:
    owner = deleted_owner(store)
    machine = store.create(new_machine("adopted"))

    machine.metadata.owner_references = [owner.owner_reference()]
    store.update(machine)

    eventually(
        lambda: not exists(store, Machine, "adopted"), "the object adopted by a deleted owner collected"
    )


def test_a_deleted_owner_beside_a_live_one_is_dropped_and_the_dependent_kept(store: ObjectStore) -> None:
    owner = deleted_owner(store)
    live = store.create(new_cluster("live"))

    store.create(new_machine("shared", owner, live))

    eventually(lambda: owner_names(store, "shared") == ["live"], "the reference to the deleted owner dropped")
    assert not store.get(Machine, "shared").being_deleted, "a dependent with a live owner must stay"


def test_a_collected_dependent_with_finalizers_is_only_marked(store: ObjectStore) -> None:
    owner = deleted_owner(store)

    store.create(new_machine("held", owner, finalizers=(HOLD,)))

    eventually(lambda: store.get(Machine, "held").being_deleted, "the held dependent marked for deletion")
    held = store.get(Machine, "held")
    assert held.metadata.finalizers == [HOLD], "the collector's delete keeps the dependent's finalizers"
    assert [ref.uid for ref in held.metadata.owner_references] == [owner.uid], "the reference stays"

    held.metadata.finalizers = []
    store.update(held)
    eventually(lambda: not exists(store, Machine, "held"), "the dependent gone with its finalizer")


def test_an_owner_re_created_under_the_same_name_does_not_own_the_old_uid_s_dependents(
    store: ObjectStore,
) -> None:
    owner = deleted_owner(store, "again")
    store.create(new_cluster("again"))

    store.create(new_machine("stale", owner))

    eventually(lambda: not exists(store, Machine, "stale"), "the dependent of the earlier uid collected")
    assert exists(store, Cluster, "again"), "the re-created owner is not touched"


def test_an_owner_in_another_namespace_is_absent(store: ObjectStore) -> None:
    elsewhere = store.create(new_cluster("elsewhere", namespace="team-a"))

    store.create(new_machine("across", elsewhere, namespace="team-b"))

    eventually(
        lambda: not exists(store, Machine, "across", "team-b"), "the dependent across namespaces collected"
    )
    assert exists(store, Cluster, "elsewhere", "team-a"), "the owner in the other namespace is not touched"


def test_owners_that_exist_or_cannot_be_resolved_keep_their_dependents(store: ObjectStore) -> None:
    """An owner marked for deletion still exists; a cluster-scoped owner (a Namespace) may own a namespaced
    object; an owner of a kind no server serves cannot be resolved, nor a namespaced owner of a cluster-scoped
    object: the collector leaves all of those alone. Checked once a dependent created after them is collected
    (the real collector works asynchronously)."""
    marked = store.create(new_cluster("marked", finalizers=(HOLD,)))
    store.delete(Cluster, "marked")
    unknown = OwnerReference(api_version="example.com/v1", kind="Widget", name="w", uid=str(uuid.uuid4()))
    namespace = namespace_object(store, "team-a")
    gone = deleted_owner(store)
    store.create(new_machine("owned-by-marked", marked))
    store.create(new_machine("owned-by-namespace", namespace))
    store.create(new_machine("owned-by-widget", unknown))
    scoped = Namespace.model_validate({"metadata": {"name": "team"}})
    scoped.metadata.owner_references = [gone.owner_reference()]
    store.create(scoped)

    store.create(new_machine("witness", gone))
    eventually(lambda: not exists(store, Machine, "witness"), "the witness collected")

    expected = {"owned-by-marked": "marked", "owned-by-namespace": "team-a", "owned-by-widget": "w"}
    for name, owner in expected.items():
        kept = store.get(Machine, name)
        assert not kept.being_deleted, f"{name} must not be deleted"
        assert [ref.name for ref in kept.metadata.owner_references] == [owner], f"{name} keeps its owner"
    kept_namespace = store.get(Namespace, "team")
    assert not kept_namespace.being_deleted, "a cluster-scoped object's namespaced owner cannot be resolved"
    assert [ref.uid for ref in kept_namespace.metadata.owner_references] == [gone.uid]


# -- the same, as a client of the official library sees it on both servers ------------------------------


def _config_map(name: str, owners: list[dict[str, Any]], finalizers: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "ownerReferences": owners, "finalizers": list(finalizers)},
        "data": {"k": "v"},
    }


def _reference(config_map: client.V1ConfigMap) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": config_map.metadata.name,
        "uid": config_map.metadata.uid,
    }


def _scenario(api: client.ApiClient, namespace: str, other: str) -> None:
    """Owners deleted, re-created and elsewhere, and the ConfigMaps that name them."""
    core = client.CoreV1Api(api)
    for name in (namespace, other):
        core.create_namespace({"metadata": {"name": name}})
    owner = core.create_namespaced_config_map(namespace, _config_map("owner", []))
    core.delete_namespaced_config_map("owner", namespace)
    live = core.create_namespaced_config_map(namespace, _config_map("live", []))
    elsewhere = core.create_namespaced_config_map(other, _config_map("elsewhere", []))
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w", "uid": str(uuid.uuid4())}
    core.create_namespaced_config_map(namespace, _config_map("late", [_reference(owner)]))
    core.create_namespaced_config_map(namespace, _config_map("shared", [_reference(owner), _reference(live)]))
    core.create_namespaced_config_map(namespace, _config_map("held", [_reference(owner)], finalizers=(HOLD,)))
    core.create_namespaced_config_map(namespace, _config_map("across", [_reference(elsewhere)]))
    core.create_namespaced_config_map(namespace, _config_map("unresolvable", [unknown]))
    adopted = core.create_namespaced_config_map(namespace, _config_map("adopted", []))
    adopted.metadata.owner_references = [_reference(owner)]
    core.replace_namespaced_config_map("adopted", namespace, adopted)
    core.create_namespaced_config_map(namespace, _config_map("owner", []))  # the name again, another uid


def _state(api: client.ApiClient, namespace: str) -> dict[str, tuple[list[str], bool, list[str]]]:
    """Each ConfigMap of the namespace: its owners' names, whether it is marked, its finalizers."""
    found = client.CoreV1Api(api).list_namespaced_config_map(namespace).items
    return {
        c.metadata.name: (
            [r.name for r in c.metadata.owner_references or []],
            c.metadata.deletion_timestamp is not None,
            list(c.metadata.finalizers or []),
        )
        for c in found
        if c.metadata.name != "kube-root-ca.crt"
    }


def _release(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    for c in core.list_namespaced_config_map(namespace).items:
        if c.metadata.finalizers:
            core.patch_namespaced_config_map(c.metadata.name, namespace, {"metadata": {"finalizers": None}})


@pytest.fixture
def served(tmp_path: Path) -> Iterator[client.ApiClient]:
    """The official client of ``capa serve`` over a fresh SQLite store."""
    store = SQLiteStore(tmp_path / "store.db", poll_interval=0.02)
    running = start_in_thread(store)
    api = api_client_for(running)
    try:
        yield api
    finally:
        api.close()
        running.stop()
        store.close()


@pytest.fixture
def real(peer_cluster: PeerCluster) -> Iterator[client.ApiClient]:
    """The official client of the real kube-apiserver (with kube-controller-manager's garbage collector)."""
    with config.new_client_from_config(config_file=str(peer_cluster.admin_kubeconfig)) as api:
        yield api


def test_capa_serve_and_the_real_cluster_end_with_the_same_config_maps(
    served: client.ApiClient, real: client.ApiClient
) -> None:
    suffix = uuid.uuid4().hex[:6]
    namespace, other = f"absent-owners-{suffix}", f"absent-owners-other-{suffix}"
    expected = {
        "owner": ([], False, []),
        "live": ([], False, []),
        "shared": (["live"], False, []),
        "held": (["owner"], True, [HOLD]),
        "unresolvable": (["w"], False, []),
    }
    try:
        _scenario(real, namespace, other)
        on_the_cluster = eventually(
            lambda: (state := _state(real, namespace)) == expected and state,
            "the real garbage collector done",
            timeout=60,
            detail=lambda: repr(_state(real, namespace)),
        )
        _scenario(served, namespace, other)
        assert _state(served, namespace) == on_the_cluster, "capa serve ends where the real cluster ends"
    finally:
        for api in (real, served):
            _release(api, namespace)
            core = client.CoreV1Api(api)
            for name in (namespace, other):
                core.delete_namespace(name)


def test_owners_of_a_kind_a_stored_crd_serves_are_resolved_by_its_served_versions(tmp_path: Path) -> None:
    """A kind no model registers but a stored CustomResourceDefinition defines is served in the CRD's served
    versions: an owner of it that is absent is absent; a version the CRD does not serve, or a kind it does
    not define, cannot be resolved and keeps the dependent (as the real collector, which finds no mapping)."""
    crd = CustomResourceDefinition.model_validate(widget_crd("example.com"))
    served = [v["name"] for v in crd.to_dict()["spec"]["versions"] if v.get("served")]
    assert "v9" not in served
    with SQLiteStore(tmp_path / "store.db") as store:
        store.create(crd)

        def owned_by(name: str, api_version: str, kind: str) -> None:
            reference = {"apiVersion": api_version, "kind": kind, "name": "w", "uid": str(uuid.uuid4())}
            config_map = ConfigMap.model_validate(
                {"metadata": {"name": name, "ownerReferences": [reference]}}
            )
            store.create(config_map)

        owned_by("served", f"example.com/{served[0]}", "Widget")
        owned_by("unserved-version", "example.com/v9", "Widget")
        owned_by("undefined-kind", f"example.com/{served[0]}", "Gadget")

        assert sorted(c.name for c in store.list(ConfigMap)) == ["undefined-kind", "unserved-version"]


def test_garbage_a_store_kept_from_before_is_collected_when_it_is_opened(tmp_path: Path) -> None:
    """A store written before capa-py collected objects whose owners are absent may hold some (a Workflow made
    for a machine deleted meanwhile): opening it for writing collects them, as the real collector does with
    what it finds when it starts."""
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        owner = store.create(new_cluster("gone"))
        live = store.create(new_cluster("live"))
        store.create(new_machine("left", owner))
        store.create(new_machine("shared", owner, live))
        store.create(new_machine("alone"))
    # What an earlier version left: the owner removed, its dependents not collected.
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM objects WHERE uid=?", (owner.uid,))

    with SQLiteStore(path) as reopened:
        assert sorted(m.name for m in reopened.list(Machine)) == ["alone", "shared"]
        assert owner_names(reopened, "shared") == ["live"]
