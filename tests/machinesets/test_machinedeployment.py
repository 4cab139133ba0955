"""MachineDeployments and MachineSets on the embedded store: Machines and their infrastructure made from
templates, scaling, rolling updates within maxSurge/maxUnavailable, OnDelete, pausing and deletion.

Every reconcile is driven by the test (:class:`tests.machinesets.world.World`), so each step is
deterministic and the invariants are checked after every single reconcile.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.api.cluster import CLUSTER_NAME_LABEL, PAUSED_ANNOTATION, Cluster, Machine
from capa_py.api.machinesets import (
    CLONED_FROM_GROUPKIND_ANNOTATION,
    CLONED_FROM_NAME_ANNOTATION,
    DELETE_MACHINE_ANNOTATION,
    DEPLOYMENT_NAME_LABEL,
    DISABLE_MACHINE_CREATE_ANNOTATION,
    MACHINE_DEPLOYMENT_FINALIZER,
    MACHINE_SET_FINALIZER,
    REVISION_ANNOTATION,
    SET_NAME_LABEL,
    TEMPLATE_HASH_LABEL,
    MachineDeployment,
    MachineSet,
)
from capa_py.api.tinkerbell_capi import TinkerbellMachine, TinkerbellMachineTemplate
from capa_py.manifests.rbac import MACHINE_SET_ACCESS, cluster_role
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import retry_on_conflict
from controllers.core import ClusterController, MachineController
from controllers.machinesets import MachineDeploymentController, MachineSetController, machine_ready
from controllers.run import converge
from tests.machinesets.world import CLUSTER, NS, Provider, World, deployment, template


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "state.db")
    w.cluster()
    w.store.create(template("workers-a", {"rack": "a"}))
    w.store.create(template("workers-b", {"rack": "b"}))
    yield w
    w.close()


def _edit(world: World, change: object) -> MachineDeployment:
    return retry_on_conflict(world.store, world.md(), change)  # type: ignore[arg-type]


def test_a_deployment_of_two_makes_one_set_two_machines_and_their_infrastructure(world: World) -> None:
    md = world.store.create(deployment(replicas=2))
    world.settle()

    (ms,) = world.machine_sets()
    # <deployment>-<5 random>, its hash label <template hash>-<the same 5>, as Cluster API core names them.
    digest = ms.metadata.labels[TEMPLATE_HASH_LABEL]
    suffix = ms.name.removeprefix("workers-")
    assert len(suffix) == 5
    assert digest.endswith(f"-{suffix}")
    assert ms.metadata.annotations[DISABLE_MACHINE_CREATE_ANNOTATION] == "false"
    assert ms.metadata.labels[DEPLOYMENT_NAME_LABEL] == "workers"
    assert ms.metadata.labels[CLUSTER_NAME_LABEL] == CLUSTER
    assert ms.spec.selector.match_labels[TEMPLATE_HASH_LABEL] == digest
    assert [(r.kind, r.name, r.controller) for r in ms.metadata.owner_references] == [
        ("MachineDeployment", "workers", True)
    ]
    assert MACHINE_SET_FINALIZER in ms.metadata.finalizers
    assert ms.metadata.annotations[REVISION_ANNOTATION] == "1"

    machines = world.live_machines()
    assert len(machines) == 2
    for machine in machines:
        assert machine.name.startswith(f"{ms.name}-")
        assert machine.metadata.labels == {
            "pool": "workers",
            CLUSTER_NAME_LABEL: CLUSTER,
            DEPLOYMENT_NAME_LABEL: "workers",
            SET_NAME_LABEL: ms.name,
            TEMPLATE_HASH_LABEL: digest,
        }
        assert machine.metadata.annotations == {"team": "infra"}
        # Controlled by its set; not owned by the Cluster directly (a stand-alone Machine is).
        assert [(r.kind, r.controller) for r in machine.metadata.owner_references] == [("MachineSet", True)]
        assert machine.spec.version == "v1.30.1"
        assert machine.spec.bootstrap.data_secret_name == "workers-bootstrap"
        assert machine.spec.infrastructure_ref.kind == "TinkerbellMachine"
        assert machine.spec.infrastructure_ref.name == machine.name
        assert machine.status.phase == "Provisioned"

    clones = world.infra()
    assert [c.name for c in clones] == [m.name for m in machines]
    for clone in clones:
        assert clone.metadata.annotations[CLONED_FROM_NAME_ANNOTATION] == "workers-a"
        assert (
            clone.metadata.annotations[CLONED_FROM_GROUPKIND_ANNOTATION]
            == "TinkerbellMachineTemplate.infrastructure.cluster.x-k8s.io"
        )
        assert clone.metadata.labels[CLUSTER_NAME_LABEL] == CLUSTER
        affinity = clone.spec.hardware_affinity
        assert affinity is not None
        assert affinity.required[0].label_selector.match_labels == {"rack": "a"}
        # The Machine took the clone over from the set that created it.
        assert [(r.kind, r.name, r.controller) for r in clone.metadata.owner_references] == [
            ("Machine", clone.name, True)
        ]

    # The template belongs to the Cluster, as Cluster API core makes it.
    used = world.store.get(TinkerbellMachineTemplate, "workers-a", NS)
    assert [(r.kind, r.name, r.controller) for r in used.metadata.owner_references] == [
        ("Cluster", CLUSTER, None)
    ]

    md = world.md()
    assert MACHINE_DEPLOYMENT_FINALIZER in md.metadata.finalizers
    assert [(r.kind, r.name, r.controller) for r in md.metadata.owner_references] == [
        ("Cluster", CLUSTER, None)
    ]
    status = md.status
    assert (status.replicas, status.ready_replicas, status.updated_replicas, status.available_replicas) == (
        2,
        2,
        2,
        2,
    )
    assert status.unavailable_replicas == 0
    assert status.phase == "Running"
    assert status.observed_generation == md.metadata.generation
    assert status.selector == f"{CLUSTER_NAME_LABEL}={CLUSTER},{DEPLOYMENT_NAME_LABEL}=workers"
    assert md.settled()


def test_the_deployment_reports_scaling_up_until_its_machines_are_ready(world: World) -> None:
    world.store.create(deployment(replicas=2))
    world.settle(provide=False)
    status = world.md().status
    assert (status.replicas, status.ready_replicas, status.unavailable_replicas, status.phase) == (
        2,
        0,
        2,
        "ScalingUp",
    )
    assert not world.md().settled()
    world.provide(limit=1)
    world.settle(provide=False)
    assert (world.md().status.ready_replicas, world.md().status.phase) == (1, "ScalingUp")
    world.settle()
    assert world.md().status.phase == "Running"


def test_scaling_up_then_down_removes_the_machine_marked_for_deletion_first(world: World) -> None:
    world.store.create(deployment(replicas=2))
    world.settle()
    before = {m.name for m in world.live_machines()}

    def three(d: MachineDeployment) -> None:
        d.spec.replicas = 3

    _edit(world, three)
    world.settle()
    machines = world.live_machines()
    assert len(machines) == 3
    assert before < {m.name for m in machines}
    assert len(world.infra()) == 3
    assert world.md().status.replicas == 3

    marked = sorted(before)[1]

    def mark(m: Machine) -> None:
        m.metadata.annotations[DELETE_MACHINE_ANNOTATION] = "yes"

    retry_on_conflict(world.store, world.store.get(Machine, marked, NS), mark)

    def one(d: MachineDeployment) -> None:
        d.spec.replicas = 1

    _edit(world, one)
    world.settle()
    (left,) = world.all_machines()
    assert left.name != marked
    # The marked machine went first, then (Random: by name among equals) the first of the others by name.
    unmarked = sorted({m.name for m in machines} - {marked})
    assert left.name == unmarked[-1]
    assert [c.name for c in world.infra()] == [left.name], "the infrastructure of removed machines is gone"
    status = world.md().status
    assert (status.replicas, status.ready_replicas, status.phase) == (1, 1, "Running")


def test_scaling_down_removes_a_machine_that_is_not_ready_before_ready_ones(world: World) -> None:
    world.store.create(deployment(replicas=2, strategy={"rollingUpdate": {"deletePolicy": "Oldest"}}))
    world.settle()
    ready = {m.name for m in world.live_machines()}

    def three(d: MachineDeployment) -> None:
        d.spec.replicas = 3

    _edit(world, three)
    world.settle(provide=False)  # the third machine is not ready
    (unready,) = [m.name for m in world.live_machines() if m.name not in ready]

    def two(d: MachineDeployment) -> None:
        d.spec.replicas = 2

    _edit(world, two)
    world.settle(provide=False)
    assert {m.name for m in world.all_machines()} == ready
    assert unready not in {c.name for c in world.infra()}


def test_a_template_change_rolls_out_within_max_surge_and_max_unavailable(world: World) -> None:
    replicas, surge, unavailable = 3, 1, 0
    world.store.create(
        deployment(
            replicas=replicas,
            strategy={
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
            },
        )
    )
    world.settle()
    old_names = {m.name for m in world.live_machines()}
    (old_set,) = world.machine_sets()

    seen_totals: list[int] = []
    seen_available: list[int] = []

    def bounds(w: World) -> None:
        machines = w.live_machines()
        available = [m for m in machines if machine_ready(m)]
        seen_totals.append(len(machines))
        seen_available.append(len(available))
        assert len(machines) <= replicas + surge, [m.name for m in machines]
        assert len(available) >= replicas - unavailable, [m.name for m in available]

    def to_b(d: MachineDeployment) -> None:
        d.spec.template.spec.infrastructure_ref.name = "workers-b"

    _edit(world, to_b)
    world.settle(check=bounds)

    machines = world.live_machines()
    assert len(machines) == replicas
    assert not old_names & {m.name for m in machines}, "every machine was replaced"
    assert max(seen_totals) == replicas + surge, "the rollout used its surge"
    assert min(seen_available) == replicas - unavailable
    for clone in world.infra():
        assert clone.metadata.annotations[CLONED_FROM_NAME_ANNOTATION] == "workers-b"
    sets = world.machine_sets()
    new_set = next(s for s in sets if s.name != old_set.name)
    assert new_set.metadata.annotations[REVISION_ANNOTATION] == "2"
    assert world.md().metadata.annotations[REVISION_ANNOTATION] == "2"
    # revisionHistoryLimit 1: the old, empty set is kept for a rollback.
    assert {s.name: s.spec.replicas for s in sets} == {old_set.name: 0, new_set.name: replicas}
    status = world.md().status
    assert (status.replicas, status.updated_replicas, status.ready_replicas, status.phase) == (
        3,
        3,
        3,
        "Running",
    )


def test_a_rollout_with_max_unavailable_replaces_machines_without_surging(world: World) -> None:
    replicas, surge, unavailable = 4, 0, 2
    world.store.create(
        deployment(
            replicas=replicas, strategy={"rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}
        )
    )
    world.settle()
    seen_available: list[int] = []

    def bounds(w: World) -> None:
        machines = w.live_machines()
        available = [m for m in machines if machine_ready(m)]
        seen_available.append(len(available))
        assert len(machines) <= replicas + surge
        assert len(available) >= replicas - unavailable

    def upgrade(d: MachineDeployment) -> None:
        d.spec.template.spec.version = "v1.31.0"

    _edit(world, upgrade)
    world.settle(check=bounds)
    assert [m.spec.version for m in world.live_machines()] == ["v1.31.0"] * replicas
    assert min(seen_available) == replicas - unavailable


def test_a_label_change_in_the_template_replaces_no_machine(world: World) -> None:
    world.store.create(deployment(replicas=2))
    world.settle()
    names = {m.name for m in world.live_machines()}

    def relabel(d: MachineDeployment) -> None:
        d.spec.template.metadata.labels["tier"] = "batch"

    _edit(world, relabel)
    world.settle()
    assert {m.name for m in world.live_machines()} == names
    (ms,) = world.machine_sets()
    assert ms.spec.template.metadata.labels["tier"] == "batch"


def test_on_delete_replaces_a_machine_only_when_it_is_deleted(world: World) -> None:
    world.store.create(deployment(replicas=2, strategy={"type": "OnDelete"}))
    world.settle()
    old_names = sorted(m.name for m in world.live_machines())

    def to_b(d: MachineDeployment) -> None:
        d.spec.template.spec.infrastructure_ref.name = "workers-b"

    _edit(world, to_b)
    world.settle()
    assert sorted(m.name for m in world.live_machines()) == old_names, "nothing replaced before a deletion"
    assert world.md().status.updated_replicas == 0

    world.store.delete(Machine, old_names[0], NS)
    world.settle()
    machines = world.live_machines()
    assert len(machines) == 2
    assert old_names[1] in {m.name for m in machines}
    (new,) = [m for m in machines if m.name != old_names[1]]
    assert (
        new.metadata.labels[TEMPLATE_HASH_LABEL]
        != world.store.get(Machine, old_names[1], NS).metadata.labels[TEMPLATE_HASH_LABEL]
    )
    assert world.md().status.updated_replicas == 1


def test_a_paused_deployment_changes_no_machine_set(world: World) -> None:
    world.store.create(deployment(replicas=2))
    world.settle()
    names = {m.name for m in world.live_machines()}

    def pause_and_scale(d: MachineDeployment) -> None:
        d.spec.paused = True
        d.spec.replicas = 3
        d.spec.template.spec.version = "v1.31.0"

    _edit(world, pause_and_scale)
    world.settle()
    assert {m.name for m in world.live_machines()} == names
    assert len(world.machine_sets()) == 1
    assert world.md().status.phase == "ScalingUp"

    def resume(d: MachineDeployment) -> None:
        d.spec.paused = False

    _edit(world, resume)
    world.settle()
    assert len(world.live_machines()) == 3
    assert {m.spec.version for m in world.live_machines()} == {"v1.31.0"}


def test_a_paused_cluster_stops_every_change(world: World) -> None:
    world.store.create(deployment(replicas=1))
    world.settle()

    def pause(c: Cluster) -> None:
        c.metadata.annotations[PAUSED_ANNOTATION] = "true"

    retry_on_conflict(world.store, world.store.get(Cluster, CLUSTER, NS), pause)

    def three(d: MachineDeployment) -> None:
        d.spec.replicas = 3

    _edit(world, three)
    world.settle()
    assert len(world.live_machines()) == 1
    assert world.machine_sets()[0].spec.replicas == 1

    def unpause(c: Cluster) -> None:
        c.metadata.annotations.pop(PAUSED_ANNOTATION)

    retry_on_conflict(world.store, world.store.get(Cluster, CLUSTER, NS), unpause)
    world.settle()
    assert len(world.live_machines()) == 3


def test_deleting_the_deployment_deletes_its_sets_machines_and_their_infrastructure(world: World) -> None:
    world.store.create(deployment(replicas=2))
    world.settle()
    world.store.delete(MachineDeployment, "workers", NS)
    world.settle()
    assert list(world.store.list(MachineDeployment, namespace=NS)) == []
    assert world.machine_sets() == []
    assert world.all_machines() == []
    assert world.infra() == []


def test_deleting_the_cluster_deletes_its_deployments_first(world: World) -> None:
    world.store.create(deployment(replicas=2))
    world.settle()
    clusters = ClusterController(world.store)
    world.store.delete(Cluster, CLUSTER, NS)
    for _ in range(20):
        clusters.reconcile(ObjectKey("Cluster", NS, CLUSTER))
        world.settle()
        if not list(world.store.list(Cluster, namespace=NS)):
            break
    assert list(world.store.list(Cluster, namespace=NS)) == []
    assert list(world.store.list(MachineDeployment, namespace=NS)) == []
    assert world.machine_sets() == []
    assert world.all_machines() == []
    assert world.infra() == []


def test_a_missing_infrastructure_template_is_reported_on_the_machine_set(world: World) -> None:
    world.store.create(deployment(replicas=1, template_name="nowhere"))
    world.settle()
    (ms,) = world.machine_sets()
    condition = next(c for c in ms.status.conditions if c.type == "MachinesCreated")
    assert condition.status == "False"
    assert condition.reason == "InfrastructureTemplateCloningFailed"
    assert "TinkerbellMachineTemplate default/nowhere not found" in (condition.message or "")
    assert world.all_machines() == []
    assert list(world.store.list(TinkerbellMachine, namespace=NS)) == []


def test_a_stand_alone_machine_set_keeps_its_replicas(world: World) -> None:
    ms = MachineSet.from_dict(
        {
            "metadata": {"name": "extra", "namespace": NS},
            "spec": {
                "clusterName": CLUSTER,
                "replicas": 2,
                "template": deployment().to_dict()["spec"]["template"],
            },
        }
    )
    ms = world.store.create(ms)
    # Defaulted as Cluster API's webhook does: its own name selects its Machines.
    assert ms.spec.selector.match_labels == {SET_NAME_LABEL: "extra", CLUSTER_NAME_LABEL: CLUSTER}
    assert ms.spec.delete_policy == "Random"
    world.settle()
    machines = world.live_machines()
    assert len(machines) == 2
    stored = world.store.get(MachineSet, "extra", NS)
    # Not owned by a MachineDeployment: owned by its Cluster.
    assert [(r.kind, r.name) for r in stored.metadata.owner_references] == [("Cluster", CLUSTER)]
    world.store.delete(Machine, machines[0].name, NS)
    world.settle()
    assert len(world.live_machines()) == 2, "a deleted machine is replaced"


def test_the_cluster_role_grants_what_the_machine_deployment_controllers_request(world: World) -> None:
    """Recorded over a create, scale, rollout and delete (plus the watches the manager opens for each
    controller's kinds): every request is granted, and every grant of MACHINE_SET_ACCESS is used."""
    world.store.create(deployment(replicas=2))
    world.settle()

    def change(d: MachineDeployment) -> None:
        d.spec.replicas = 1
        d.spec.template.spec.infrastructure_ref.name = "workers-b"

    _edit(world, change)
    world.settle()
    world.store.delete(MachineDeployment, "workers", NS)
    world.settle()
    watched = {
        (kind.API_VERSION.rpartition("/")[0], kind.PLURAL, verb)
        for controller in (world.deployments, world.sets)
        for kind in (controller.kind, *controller.watched_kinds)
        for verb in ("list", "watch")
    }
    used = world.recording.requests | watched
    granted = {
        (group, resource, verb)
        for rule in cluster_role()["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert used - granted == set()
    listed = {
        (model.API_VERSION.rpartition("/")[0], model.PLURAL + (f"/{sub}" if sub else ""), verb)
        for model, sub, verbs in MACHINE_SET_ACCESS
        for verb in verbs
    }
    # AWSMachine clones are made from AWSMachineTemplates the same way as the Tinkerbell ones recorded here.
    assert listed - used == {
        ("infrastructure.cluster.x-k8s.io", "awsmachines", "create"),
        *(
            ("infrastructure.cluster.x-k8s.io", "awsmachinetemplates", verb)
            for verb in ("get", "update", "delete")
        ),
    }


def test_a_wait_on_a_deployment_reconciles_what_it_creates_until_it_is_ready(world: World) -> None:
    """``capa apply --wait`` computes its scope before the MachineSet and Machines exist; they are in it
    all the same (failed before the scope held the names a deployment generates: the wait timed out)."""
    md = world.store.create(deployment(replicas=2))
    controllers = [
        MachineDeploymentController(world.store),
        MachineSetController(world.store),
        MachineController(world.store, infrastructure_kinds=(TinkerbellMachine,)),
        Provider(world.store),
    ]
    result = converge(world.store, controllers, [md], timeout=60)  # type: ignore[arg-type]
    assert result.converged, result.states
    assert len(world.live_machines()) == 2
    assert {key.kind for key in result.reconciled_keys} >= {"MachineSet", "Machine", "TinkerbellMachine"}

    world.store.delete(MachineDeployment, "workers", NS)
    gone = converge(world.store, controllers, [md], goal="gone", timeout=60)  # type: ignore[arg-type]
    assert gone.converged, gone.states
    assert world.all_machines() == []
    assert world.infra() == []
