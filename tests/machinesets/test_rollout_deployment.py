"""Upgrade Cluster (capa_app.rollout) on a cluster whose workers are a MachineDeployment: the rollout
changes the MachineDeployment's template and waits while the MachineDeployment controller replaces the
Machines, instead of replacing Machines itself.

The controllers run in-process during each wait (``controllers.run.converge``): the embedded core's
Cluster, Machine, MachineDeployment and MachineSet controllers, the bare-metal provider's TinkerbellCluster
controller, and a stand-in that makes each TinkerbellMachine ready.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import pytest

from capa_app.rollout import label_machines, plan_rollout, roll_out
from capa_py.api.cluster import APIEndpoint, Cluster, ClusterSpec, Machine
from capa_py.api.machinesets import TEMPLATE_HASH_LABEL, MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject, ObjectMeta, ObjectReference
from capa_py.api.tinkerbell_capi import (
    CAPT_API_VERSION,
    TinkerbellCluster,
    TinkerbellClusterSpec,
    TinkerbellMachine,
)
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore
from capa_py.workflow.provider import RolloutStep
from controllers.core import ClusterController, MachineController
from controllers.machinesets import MachineDeploymentController, MachineSetController
from controllers.run import ConvergeResult, converge
from controllers.tinkerbell_capi import TinkerbellClusterController
from tests.machinesets.world import CLUSTER, NS, Provider, deployment, template

Goal = Literal["ready", "gone"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


def _wait(store: SQLiteStore):  # type: ignore[no-untyped-def]
    controllers = [
        ClusterController(store, infrastructure_kinds=(TinkerbellCluster,)),
        TinkerbellClusterController(store),
        MachineController(store, infrastructure_kinds=(TinkerbellMachine,)),
        MachineDeploymentController(store),
        MachineSetController(store),
        Provider(store),
    ]

    def wait(targets: Sequence[KubeObject], goal: Goal, timeout: float) -> ConvergeResult:
        return converge(store, controllers, targets, goal=goal, timeout=min(timeout, 60.0))  # type: ignore[arg-type]

    return wait


def _config(template_name: str, version: str) -> list[KubeObject]:
    return [
        Cluster(
            metadata=ObjectMeta(name=CLUSTER, namespace=NS),
            spec=ClusterSpec(
                infrastructure_ref=ObjectReference(
                    api_version=CAPT_API_VERSION, kind="TinkerbellCluster", name=CLUSTER
                )
            ),
        ),
        TinkerbellCluster(
            metadata=ObjectMeta(name=CLUSTER, namespace=NS),
            spec=TinkerbellClusterSpec(control_plane_endpoint=APIEndpoint(host="192.168.2.100", port=6443)),
        ),
        template("workers-a", {"rack": "a"}),
        template("workers-b", {"rack": "b"}),
        deployment(replicas=2, template_name=template_name, version=version),
    ]


def test_an_upgrade_rolls_the_workers_through_their_machine_deployment(store: SQLiteStore) -> None:
    wait = _wait(store)
    # Create Cluster stores the config and waits for it.
    stored = [a.object for a in apply_objects(store, label_machines(_config("workers-a", "v1.30.1")))]
    created = wait(stored, "ready", 60.0)
    assert created.converged, created.states
    old_machines = {m.name for m in store.list(Machine, namespace=NS)}
    assert len(old_machines) == 2
    (old_set,) = store.list(MachineSet, namespace=NS)

    desired = _config("workers-b", "v1.31.0")
    (planned,) = plan_rollout(store, desired)
    assert (planned.action, planned.machine, planned.old, planned.new) == (
        "replace",
        "workers",
        old_set.name,
        None,
    )
    events: list[tuple[RolloutStep, str]] = []
    steps = roll_out(store, desired, timeout=120, wait=wait, on_step=lambda s, p: events.append((s, p)))
    assert [(s.action, s.old) for s in steps] == [("replace", old_set.name)]
    assert [p for _, p in events] == ["started", "finished"]
    (finished,) = steps
    assert finished.new is not None
    assert finished.new != old_set.name

    machines = list(store.list(Machine, namespace=NS))
    assert len(machines) == 2
    assert not old_machines & {m.name for m in machines}, "the MachineDeployment replaced every worker"
    assert {m.spec.version for m in machines} == {"v1.31.0"}
    new_set = store.get(MachineSet, finished.new, NS)
    assert {m.metadata.labels[TEMPLATE_HASH_LABEL] for m in machines} == {
        new_set.metadata.labels[TEMPLATE_HASH_LABEL]
    }
    clones = list(store.list(TinkerbellMachine, namespace=NS))
    assert sorted(c.name for c in clones) == sorted(m.name for m in machines)
    for clone in clones:
        affinity = clone.spec.hardware_affinity
        assert affinity is not None
        assert affinity.required[0].label_selector.match_labels == {"rack": "b"}
    assert store.get(MachineDeployment, "workers", NS).settled()

    again = roll_out(store, desired, timeout=120, wait=wait)
    assert [(s.action, s.machine) for s in again] == [("unchanged", "workers")]
