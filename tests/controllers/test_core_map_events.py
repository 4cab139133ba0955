"""The core controllers hear of an infrastructure object that appears after its Cluster or Machine.

A long-running controller may reconcile a Cluster before its AWSCluster exists (they are stored one after
the other); the AWSCluster carries no owner reference or cluster label yet, so only the Cluster's
``spec.infrastructureRef`` links them, and its arrival must wake the Cluster (and an AWSMachine its Machine).
"""

from __future__ import annotations

from pathlib import Path

from capa_py.api import AWSCluster, AWSMachine
from capa_py.api.loader import load_manifests
from capa_py.runtime.queue import ObjectKey
from capa_py.store import SQLiteStore, WatchEvent
from controllers.core import ClusterController, MachineController

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machines.yaml"


def stored_example(store: SQLiteStore) -> None:
    for obj in load_manifests([EXAMPLE]):
        store.create(obj)


def test_an_unowned_awscluster_wakes_the_cluster_that_names_it(store: SQLiteStore) -> None:
    stored_example(store)
    infra = store.get(AWSCluster, "demo", "default")
    assert not infra.metadata.owner_references
    controller = ClusterController(store, infrastructure_kinds=(AWSCluster,))
    woken = list(controller.map_event(WatchEvent("ADDED", infra, "1")))
    assert woken == [ObjectKey("Cluster", "default", "demo")]


def test_an_unowned_awsmachine_wakes_the_machine_that_names_it(store: SQLiteStore) -> None:
    stored_example(store)
    infra = store.get(AWSMachine, "demo-worker-0", "default")
    assert not infra.metadata.owner_references
    controller = MachineController(store, infrastructure_kinds=(AWSMachine,))
    woken = list(controller.map_event(WatchEvent("ADDED", infra, "1")))
    assert woken == [ObjectKey("Machine", "default", "demo-worker-0")]
