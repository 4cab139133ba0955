"""``capa move`` of a cluster with a MachineDeployment: its MachineSets, Machines, their infrastructure
clones and the machine templates go with it, owners first; on the target the controllers take the moved
MachineSet over without making a Machine anew."""

from __future__ import annotations

from pathlib import Path

from capa_py.api.cluster import Cluster, Machine
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.tinkerbell_capi import TinkerbellMachine, TinkerbellMachineTemplate
from capa_py.move import discover, move
from tests.machinesets.world import CLUSTER, NS, World, deployment, template


def test_a_moved_machine_deployment_keeps_its_machines(tmp_path: Path) -> None:
    source = World(tmp_path / "source.db")
    target = World(tmp_path / "target.db")
    try:
        source.cluster()
        source.store.create(template("workers-a"))
        source.store.create(template("unrelated"))
        source.store.create(deployment(replicas=2))
        source.settle()
        machines = sorted(m.name for m in source.live_machines())
        (ms,) = source.machine_sets()

        graph = discover(source.store, cluster=CLUSTER)
        kinds = [o.kind for o in graph]
        assert {(o.kind, o.name) for o in graph} == {
            ("Cluster", CLUSTER),
            ("MachineDeployment", "workers"),
            ("MachineSet", ms.name),
            ("TinkerbellMachineTemplate", "workers-a"),
            *(("Machine", name) for name in machines),
            *(("TinkerbellMachine", name) for name in machines),
        }
        assert kinds.index("MachineDeployment") < kinds.index("MachineSet") < kinds.index("Machine")

        move(source.store, target.store, cluster=CLUSTER)
        assert list(source.store.list(MachineDeployment, namespace=NS)) == []
        assert [t.name for t in source.store.list(TinkerbellMachineTemplate, namespace=NS)] == ["unrelated"]
        assert not target.store.get(Cluster, CLUSTER, NS).paused

        target.settle()
        assert sorted(m.name for m in target.live_machines()) == machines, "no machine made anew"
        (moved_set,) = target.machine_sets()
        md = target.md()
        assert [r.uid for r in moved_set.metadata.owner_references] == [md.metadata.uid]
        assert {m.metadata.owner_references[0].uid for m in target.store.list(Machine, namespace=NS)} == {
            moved_set.metadata.uid
        }
        assert len(list(target.store.list(TinkerbellMachine, namespace=NS))) == 2
        assert md.status.phase == "Running"
        assert list(target.store.list(MachineSet, namespace=NS)) == [moved_set]
    finally:
        source.close()
        target.close()
