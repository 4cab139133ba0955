"""A second reconciler whose view lags behind the store makes no surplus MachineSet or Machine.

``capa controller`` reads through informers, and a ``capa apply --wait`` beside it on the same store runs
the controllers too: a reconcile can decide from a view that has not yet seen what another writer made a
moment ago. Each test here gives a second pair of controllers such a view (a cache listed once, before the
first writer's work, and never caught up) and drives both one reconcile at a time, so the interleaving is
the same on every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.cluster import Cluster, Machine
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell_capi import TinkerbellMachine, TinkerbellMachineTemplate
from capa_py.runtime.informer import CachedStore, Informer
from capa_py.runtime.queue import ObjectKey
from capa_py.store.protocol import ObjectStore
from controllers.machinesets import MachineDeploymentController, MachineSetController, free_machine_names
from tests.machinesets.world import NS, World, deployment, template

KINDS: tuple[type[KubeObject], ...] = (
    Cluster,
    MachineDeployment,
    MachineSet,
    Machine,
    TinkerbellMachine,
    TinkerbellMachineTemplate,
)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "state.db")
    w.cluster()
    w.store.create(template("workers-a", {"rack": "a"}))
    yield w
    w.close()


def stale_view(store: ObjectStore) -> CachedStore:
    """The store as a reconciler whose informers listed it now and then heard nothing more sees it (its
    own writes it holds, as every cached client does)."""
    informers = [Informer(store, kind) for kind in KINDS]
    for informer in informers:
        informer.relist()
    return CachedStore(store, informers)


def _set_key(world: World) -> ObjectKey:
    [ms] = world.machine_sets()
    return ObjectKey("MachineSet", NS, ms.name)


def test_a_deployment_reconciled_from_a_lagging_view_adds_no_second_machine_set(world: World) -> None:
    world.store.create(deployment(replicas=2))
    lagging = MachineDeploymentController(stale_view(world.store))
    key = ObjectKey("MachineDeployment", NS, "workers")

    world.deployments.reconcile(key)
    first = {s.name for s in world.machine_sets()}
    assert len(first) == 1
    lagging.reconcile(key)  # its cache has not seen the set: it asks for one again

    assert {s.name for s in world.machine_sets()} == first
    [ms] = world.machine_sets()
    assert ms.spec.replicas == 2
    world.settle()
    assert len(world.machine_sets()) == 1
    assert len(world.live_machines()) == 2


def test_a_machine_set_reconciled_from_a_lagging_view_adds_no_machine(world: World) -> None:
    world.store.create(deployment(replicas=2))
    world.deployments.reconcile(ObjectKey("MachineDeployment", NS, "workers"))
    key = _set_key(world)
    lagging = MachineSetController(stale_view(world.store))  # has seen the set, none of its Machines

    world.sets.reconcile(key)
    made = {m.name for m in world.all_machines()}
    assert len(made) == 2
    lagging.reconcile(key)

    assert {m.name for m in world.all_machines()} == made
    assert {i.name for i in world.infra()} == made
    [ms] = world.machine_sets()
    assert ms.status.replicas == 2  # the lagging writer counted the Machines it found made


def test_two_lagging_reconcilers_of_a_fresh_deployment_end_with_its_replicas(world: World) -> None:
    """Both start from the same empty view (as an apply's controllers and a running controller do when a
    manifest lands in one transaction) and take turns."""
    world.store.create(deployment(replicas=3))
    views = [stale_view(world.store), stale_view(world.store)]
    pairs = [(MachineDeploymentController(v), MachineSetController(v)) for v in views]
    md_key = ObjectKey("MachineDeployment", NS, "workers")
    for deployments, _ in pairs:
        deployments.reconcile(md_key)
    key = _set_key(world)
    for _, sets in pairs:
        sets.reconcile(key)

    assert len(world.machine_sets()) == 1
    assert len(world.all_machines()) == 3
    assert len(world.infra()) == 3


class Died(BaseException):
    """The process ending between two writes (no ``except Exception`` clean-up runs)."""


class DiesCreatingMachines:
    """Delegates to the store; the first ``create`` of a Machine ends the 'process'."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, obj: Any) -> Any:
        if isinstance(obj, Machine):
            raise Died
        return self.inner.create(obj)


def test_a_clone_left_by_a_writer_that_died_before_its_machine_is_taken_not_leaked(world: World) -> None:
    world.store.create(deployment(replicas=2))
    world.deployments.reconcile(ObjectKey("MachineDeployment", NS, "workers"))
    key = _set_key(world)
    dying = MachineSetController(DiesCreatingMachines(world.store))  # type: ignore[arg-type]
    with pytest.raises(Died):
        dying.reconcile(key)
    [left] = world.infra()
    assert world.all_machines() == []

    world.sets.reconcile(key)

    machines = world.all_machines()
    assert len(machines) == 2
    assert {i.name for i in world.infra()} == {m.name for m in machines}
    assert left.name in {m.name for m in machines}
    taken = next(m for m in machines if m.name == left.name)
    assert taken.spec.infrastructure_ref.name == left.name


def test_a_slot_whose_name_someone_else_holds_is_passed_over(world: World) -> None:
    """An object of the clone's kind that the set does not own keeps its name; the set takes the next."""
    world.store.create(deployment(replicas=1))
    world.deployments.reconcile(ObjectKey("MachineDeployment", NS, "workers"))
    key = _set_key(world)
    [ms] = world.machine_sets()
    first = next(free_machine_names(ms, set()))
    world.store.create(
        TinkerbellMachine.from_dict({"metadata": {"name": first, "namespace": NS}, "spec": {}})
    )

    world.sets.reconcile(key)

    [machine] = world.all_machines()
    assert machine.name != first
    assert world.store.get(TinkerbellMachine, first, NS).metadata.owner_references == []
    [ms] = world.machine_sets()
    assert ms.status.conditions
    assert all(c.reason != "InfrastructureTemplateCloningFailed" for c in ms.status.conditions)
