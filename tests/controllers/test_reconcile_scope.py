"""What a wait reconciles (controllers.scope): the targets and their relatives, never another cluster.

Read from a real SQLite store holding two clusters made from the example manifest; no AWS involved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject
from capa_py.operations import apply_objects
from capa_py.runtime.queue import ObjectKey
from capa_py.store.sqlite import SQLiteStore
from controllers.scope import reconcile_scope
from tests.controllers.conftest import EXAMPLE


def example_named(name: str, directory: Path) -> list[KubeObject]:
    """The example cluster (three machines) with every ``demo`` in its names replaced by ``name``."""
    path = directory / f"{name}.yaml"
    path.write_text(EXAMPLE.read_text().replace("demo", name))
    return load_manifests([path])


def keys_of(name: str) -> set[ObjectKey]:
    """Every object of the example cluster called ``name``."""
    return {
        ObjectKey("Cluster", "default", name),
        ObjectKey("AWSCluster", "default", name),
        ObjectKey("Secret", "default", f"{name}-bootstrap"),
        *(
            ObjectKey(kind, "default", f"{name}-{machine}")
            for kind in ("Machine", "AWSMachine")
            for machine in ("control-plane-0", "worker-0", "worker-1")
        ),
    }


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "state.db")
    for name in ("alpha", "beta"):
        apply_objects(store, example_named(name, tmp_path))
    return store


def _stored(store: SQLiteStore, kind: str, name: str) -> KubeObject:
    from capa_py.api.registry import REGISTRY

    model = REGISTRY.resolve(kind)
    return store.get(model, name, "default")


def test_a_cluster_file_reaches_its_own_objects_and_nothing_of_another_cluster(
    store: SQLiteStore, tmp_path: Path
) -> None:
    beta = [o for o in example_named("beta", tmp_path) if o.KIND != "Secret"]
    scope = reconcile_scope(store, beta)
    assert scope == keys_of("beta"), sorted(map(str, scope ^ keys_of("beta")))
    assert not scope & keys_of("alpha")


def test_a_machine_brings_its_cluster_and_infrastructure_but_not_its_sibling_machines(
    store: SQLiteStore,
) -> None:
    machine = _stored(store, "Machine", "beta-worker-0")
    scope = reconcile_scope(store, [machine])
    assert scope == {
        ObjectKey("Machine", "default", "beta-worker-0"),
        ObjectKey("AWSMachine", "default", "beta-worker-0"),
        ObjectKey("Cluster", "default", "beta"),
        ObjectKey("AWSCluster", "default", "beta"),
        ObjectKey("Secret", "default", "beta-bootstrap"),
    }, sorted(map(str, scope))


def test_an_infrastructure_machine_alone_finds_its_machine_by_the_reference_to_it(store: SQLiteStore) -> None:
    # Freshly applied: no owner reference or label ties the AWSMachine to anything yet but the Machine's
    # spec.infrastructureRef (the example labels it, so drop the label to be sure).
    infra = _stored(store, "AWSMachine", "beta-worker-1")
    infra.metadata.labels.pop("cluster.x-k8s.io/cluster-name", None)
    store.update(infra)
    scope = reconcile_scope(store, [_stored(store, "AWSMachine", "beta-worker-1")])
    assert ObjectKey("Machine", "default", "beta-worker-1") in scope, sorted(map(str, scope))
    assert ObjectKey("Cluster", "default", "beta") in scope, sorted(map(str, scope))
    assert not scope & keys_of("alpha")


def test_deleting_a_cluster_reaches_its_cascade_only(store: SQLiteStore) -> None:
    cluster = _stored(store, "Cluster", "beta")
    scope = reconcile_scope(store, [cluster], goal="gone")
    assert scope == keys_of("beta") - {ObjectKey("Secret", "default", "beta-bootstrap")}, sorted(
        map(str, scope)
    )


def test_deleting_a_machine_reaches_its_infrastructure_machine_only(store: SQLiteStore) -> None:
    machine = _stored(store, "Machine", "alpha-worker-0")
    scope = reconcile_scope(store, [machine], goal="gone")
    assert scope == {
        ObjectKey("Machine", "default", "alpha-worker-0"),
        ObjectKey("AWSMachine", "default", "alpha-worker-0"),
    }, sorted(map(str, scope))


def test_a_target_no_longer_stored_is_still_in_scope(store: SQLiteStore, tmp_path: Path) -> None:
    gone = next(o for o in example_named("gamma", tmp_path) if o.KIND == "Cluster")
    assert reconcile_scope(store, [gone], goal="gone") == {
        ObjectKey("Cluster", "default", "gamma"),
        ObjectKey("AWSCluster", "default", "gamma"),
    }
