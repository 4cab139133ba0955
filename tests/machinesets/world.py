"""A store with the embedded Cluster API core's controllers, driven one reconcile at a time.

No manager and no threads: each round reconciles every MachineDeployment, then every MachineSet, then every
Machine (in name order), and after each reconcile an optional check looks at the store. A stand-in for the
infrastructure provider makes TinkerbellMachines ready (``providerID`` and ``status.ready``) when told to, so
a test decides when new Machines become available.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from capa_py.api.cluster import Cluster, Machine
from capa_py.api.machinesets import MachineDeployment, MachineSet
from capa_py.api.meta import KubeObject
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.api.tinkerbell_capi import TinkerbellMachine, TinkerbellMachineTemplate
from capa_py.ctrlkit.result import Result, no_requeue
from capa_py.runtime.queue import ObjectKey
from capa_py.store.protocol import WatchEvent
from capa_py.store.sqlite import SQLiteStore
from controllers.core import MachineController
from controllers.machinesets import MachineDeploymentController, MachineSetController
from tests.manifests.recording_store import RecordingStore

NS = "default"
CLUSTER = "c1"
INFRA_API = "infrastructure.cluster.x-k8s.io/v1beta1"

Check = Callable[["World"], None]


def template(name: str, selector: dict[str, str] | None = None) -> TinkerbellMachineTemplate:
    spec: dict[str, Any] = {"template": {"spec": {}}}
    if selector is not None:
        spec["template"]["spec"] = {
            "hardwareAffinity": {"required": [{"labelSelector": {"matchLabels": selector}}]}
        }
    return TinkerbellMachineTemplate.from_dict({"metadata": {"name": name, "namespace": NS}, "spec": spec})


def deployment(
    name: str = "workers",
    replicas: int | None = 2,
    template_name: str = "workers-a",
    version: str = "v1.30.1",
    **spec: Any,
) -> MachineDeployment:
    body: dict[str, Any] = {
        "clusterName": CLUSTER,
        "template": {
            "metadata": {"labels": {"pool": "workers"}, "annotations": {"team": "infra"}},
            "spec": {
                "clusterName": CLUSTER,
                "version": version,
                "bootstrap": {"dataSecretName": "workers-bootstrap"},
                "infrastructureRef": {
                    "apiVersion": INFRA_API,
                    "kind": "TinkerbellMachineTemplate",
                    "name": template_name,
                },
            },
        },
        **spec,
    }
    if replicas is not None:
        body["replicas"] = replicas
    return MachineDeployment.from_dict({"metadata": {"name": name, "namespace": NS}, "spec": body})


class World:
    def __init__(self, path: Path, registry: KindRegistry = REGISTRY) -> None:
        self.store = SQLiteStore(path, registry=registry)
        # What the controllers request, as RBAC sees it (the test's own reads and writes are not recorded).
        self.recording = RecordingStore(self.store)
        controllers_store: Any = self.recording
        self.deployments = MachineDeploymentController(controllers_store)
        self.sets = MachineSetController(controllers_store, registry)
        self.machines = MachineController(controllers_store, infrastructure_kinds=(TinkerbellMachine,))
        self.reconciles = 0

    def close(self) -> None:
        self.store.close()

    def cluster(self, **spec: Any) -> Cluster:
        return self.store.create(
            Cluster.from_dict({"metadata": {"name": CLUSTER, "namespace": NS}, "spec": spec})
        )

    # -- reading -------------------------------------------------------------------------------------
    def md(self, name: str = "workers") -> MachineDeployment:
        return self.store.get(MachineDeployment, name, NS)

    def machine_sets(self) -> list[MachineSet]:
        return sorted(self.store.list(MachineSet, namespace=NS), key=lambda s: s.name)

    def all_machines(self) -> list[Machine]:
        return sorted(self.store.list(Machine, namespace=NS), key=lambda m: m.name)

    def live_machines(self) -> list[Machine]:
        return [m for m in self.all_machines() if not m.being_deleted]

    def infra(self) -> list[TinkerbellMachine]:
        return sorted(self.store.list(TinkerbellMachine, namespace=NS), key=lambda m: m.name)

    def snapshot(self) -> frozenset[tuple[str, str, str | None]]:
        kinds: tuple[type[KubeObject], ...] = (
            MachineDeployment,
            MachineSet,
            Machine,
            TinkerbellMachine,
            Cluster,
        )
        return frozenset(
            (o.KIND, o.name, o.metadata.resource_version)
            for k in kinds
            for o in self.store.list(k, namespace=NS)
        )

    # -- the infrastructure provider's part -------------------------------------------------------------
    def provide(self, limit: int | None = None) -> int:
        """Make up to ``limit`` (all when None) not-ready TinkerbellMachines ready, oldest name first."""
        made = 0
        for infra in self.infra():
            if infra.status.ready or infra.being_deleted or (limit is not None and made >= limit):
                continue

            infra.spec.provider_id = f"tinkerbell://{NS}/{infra.name}"
            booted = self.store.update(infra)
            booted.status.ready = True
            self.store.update_status(booted)
            made += 1
        return made

    # -- driving -------------------------------------------------------------------------------------
    def round(self, check: Check | None = None) -> None:
        for md in sorted(self.store.list(MachineDeployment, namespace=NS), key=lambda d: d.name):
            self.deployments.reconcile(ObjectKey("MachineDeployment", NS, md.name))
            self._after(check)
        for ms in self.machine_sets():
            self.sets.reconcile(ObjectKey("MachineSet", NS, ms.name))
            self._after(check)
        for machine in self.all_machines():
            self.machines.reconcile(ObjectKey("Machine", NS, machine.name))
            self._after(check)

    def _after(self, check: Check | None) -> None:
        self.reconciles += 1
        if check is not None:
            check(self)

    def settle(self, provide: bool = True, check: Check | None = None, rounds: int = 60) -> int:
        """Rounds (providing infrastructure between them when ``provide``) until one changes nothing;
        returns how many ran. Fails when ``rounds`` are not enough."""
        for count in range(1, rounds + 1):
            before = self.snapshot()
            self.round(check)
            if provide:
                self.provide()
            if self.snapshot() == before:
                return count
        raise AssertionError(f"the controllers did not settle in {rounds} rounds")


class Provider:
    """Stands in for the bare-metal provider: a TinkerbellMachine is ready as soon as it is reconciled."""

    name = "provider"
    kind = TinkerbellMachine
    watched_kinds: tuple[type[KubeObject], ...] = ()

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    def map_event(self, event: WatchEvent[KubeObject]) -> list[ObjectKey]:
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        infra = self.store.get(TinkerbellMachine, key.name, key.namespace)
        if infra.being_deleted or infra.status.ready:
            return no_requeue()
        infra.spec.provider_id = f"tinkerbell://{key.namespace}/{key.name}"
        booted = self.store.update(infra)
        booted.status.ready = True
        self.store.update_status(booted)
        return no_requeue()
