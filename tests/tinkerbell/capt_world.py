"""Helpers of the bare-metal provider's tests: objects, a store with every embedded controller running,
and what the gRPC server does to a Workflow, done by hand through capa_py.tinkerbell.states."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from capa_py.api.cluster import (
    APIEndpoint,
    Bootstrap,
    Cluster,
    ClusterSpec,
    Machine,
    MachineSpec,
)
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject, ObjectMeta, ObjectReference, utcnow
from capa_py.api.tinkerbell import DHCP, Hardware, HardwareSpec, NetworkInterface, Workflow
from capa_py.api.tinkerbell_capi import (
    CAPT_API_VERSION,
    HARDWARE_OWNER_NAME_LABEL,
    HardwareAffinity,
    TinkerbellCluster,
    TinkerbellClusterSpec,
    TinkerbellMachine,
    TinkerbellMachineSpec,
)
from capa_py.runtime.manager import Manager
from capa_py.store.helpers import get_or_none, retry_on_conflict
from capa_py.store.protocol import ObjectStore
from capa_py.tinkerbell import states
from controllers import embedded_controllers
from tests.support.eventually import eventually

NS = "default"
CLUSTER = "bm"
WAIT = 60.0
"""A bound on every wait below, so a broken controller fails the test instead of hanging it; no assertion
depends on how long anything takes."""

TEMPLATE_OVERRIDE = """\
actions:
  - name: stream
    image: quay.io/tinkerbell/actions/image2disk:latest
    command: /bin/sh
    args: ["-c", "echo streaming to {{ index .Hardware.Disks 0 }}"]
  - name: reboot
    image: quay.io/tinkerbell/actions/reboot:latest
    command: /bin/true
"""


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell-cluster.yaml"
"""The bare-metal example: its workers a MachineDeployment of a TinkerbellMachineTemplate."""
DEPLOYMENT = "lab-workers"
"""The example's MachineDeployment (and its TinkerbellMachineTemplate)."""


def machine_deployment_manifests(replicas: int, namespace: str = NS) -> list[dict[str, Any]]:
    """The example's documents, in ``namespace``, its MachineDeployment at ``replicas``."""
    documents = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for document in documents:
        document["metadata"]["namespace"] = namespace
        if document["kind"] == "MachineDeployment":
            document["spec"]["replicas"] = replicas
    return documents


def workers_bootstrap() -> str:
    """The bootstrap data of every worker the example's MachineDeployment makes (from its Secret)."""
    documents = machine_deployment_manifests(1)
    [deployment] = [d for d in documents if d["kind"] == "MachineDeployment"]
    name = deployment["spec"]["template"]["spec"]["bootstrap"]["dataSecretName"]
    [secret] = [d for d in documents if d["kind"] == "Secret" and d["metadata"]["name"] == name]
    return str(secret["stringData"]["value"])


def cluster_objects(host: str = "192.168.2.100", port: int = 6443) -> list[KubeObject]:
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
            spec=TinkerbellClusterSpec(control_plane_endpoint=APIEndpoint(host=host, port=port)),
        ),
    ]


def bootstrap_data(name: str) -> str:
    return f"#cloud-config\nhostname: {name}\n"


def machine_objects(
    name: str, affinity: HardwareAffinity | None = None, override: str | None = TEMPLATE_OVERRIDE
) -> list[KubeObject]:
    """A bootstrap Secret, a Machine and its TinkerbellMachine."""
    return [
        Secret(
            metadata=ObjectMeta(name=f"{name}-bootstrap", namespace=NS),
            string_data={"value": bootstrap_data(name)},
        ),
        Machine(
            metadata=ObjectMeta(name=name, namespace=NS),
            spec=MachineSpec(
                cluster_name=CLUSTER,
                bootstrap=Bootstrap(data_secret_name=f"{name}-bootstrap"),
                infrastructure_ref=ObjectReference(
                    api_version=CAPT_API_VERSION, kind="TinkerbellMachine", name=name
                ),
            ),
        ),
        TinkerbellMachine(
            metadata=ObjectMeta(name=name, namespace=NS),
            spec=TinkerbellMachineSpec(hardware_affinity=affinity, template_override=override),
        ),
    ]


def hardware(
    name: str, ip: str, labels: dict[str, str] | None = None, hostname: str | None = None
) -> Hardware:
    mac = "02:00:00:00:00:" + format(int(ip.rsplit(".", 1)[1]), "02x")
    return Hardware(
        metadata=ObjectMeta(name=name, namespace=NS, labels=dict(labels or {})),
        spec=HardwareSpec(
            network_interfaces={
                mac: NetworkInterface(dhcp=DHCP(ip=ip, netmask="255.0.0.0", hostname=hostname))
            },
            storage_devices=["/dev/sda"],
        ),
    )


# -- what the gRPC server does ---------------------------------------------------------------------------
def _server_write(store: ObjectStore, name: str, change: Callable[[Workflow], None]) -> Workflow:
    return retry_on_conflict(store, store.get(Workflow, name, NS), change, status=True)


def run_workflow(store: ObjectStore, name: str, fail_at: str | None = None) -> Workflow:
    """Schedule the prepared workflow ``name`` and run its actions as an agent's events would: each
    started then succeeded, or failed at action ``fail_at``."""
    _server_write(store, name, lambda w: states.scheduled(w, utcnow()))
    workflow = store.get(Workflow, name, NS)
    for action, _ in workflow.ordered_actions():
        workflow = _server_write(store, name, lambda w, a=action: states.action_started(w, a, utcnow()))
        if action == fail_at:
            return _server_write(
                store,
                name,
                lambda w, a=action: states.action_failed(w, a, utcnow(), "ExitCode", "exit status 1"),
            )
        workflow = _server_write(store, name, lambda w, a=action: states.action_succeeded(w, a, utcnow()))
    return workflow


def start_workflow(store: ObjectStore, name: str) -> Workflow:
    """Schedule ``name`` and start its first action (an agent is running it)."""
    _server_write(store, name, lambda w: states.scheduled(w, utcnow()))
    first = store.get(Workflow, name, NS).ordered_actions()[0][0]
    return _server_write(store, name, lambda w: states.action_started(w, first, utcnow()))


def prepared(store: ObjectStore, name: str) -> bool:
    workflow = get_or_none(store, Workflow, name, NS)
    return workflow is not None and workflow.status.state == "Pending" and bool(workflow.status.actions)


def owner_of(hw: Hardware) -> str | None:
    return hw.metadata.labels.get(HARDWARE_OWNER_NAME_LABEL)


# -- running the controllers -----------------------------------------------------------------------------
class Running:
    """Every embedded controller (no AWS) running over one store in the background, as ``capa
    controller`` runs them."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.manager = Manager(store, embedded_controllers(store, None, None), workers=2, base_backoff=0.05)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: self.manager.run(stop=self.stop), daemon=True)

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        eventually(
            condition,
            f"not reached: {what}",
            timeout=WAIT,
            interval=0.02,
            detail=lambda: f"errors: {list(self.manager.errors)[-5:]}",
        )


@contextmanager
def running(store: ObjectStore) -> Iterator[Running]:
    handle = Running(store)
    handle.thread.start()
    try:
        yield handle
    finally:
        handle.stop.set()
        handle.thread.join(timeout=WAIT)


def store_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


def reconcile_machine(path: Path, name: str, start: Any, passes: int = 3) -> None:
    """A TinkerbellMachine controller of its own (its own connection to the store at ``path``) reconciling
    machine ``name`` ``passes`` times once ``start`` (a barrier) lets every racer go. A pass that lost a
    race for a Hardware asks to be requeued: the next one selects again."""
    from capa_py.runtime.queue import ObjectKey
    from capa_py.store.sqlite import SQLiteStore
    from controllers.tinkerbell_capi import TinkerbellMachineController

    store = SQLiteStore(path)
    try:
        controller = TinkerbellMachineController(store)
        start.wait(WAIT)
        for _ in range(passes):
            controller.reconcile(ObjectKey("TinkerbellMachine", NS, name))
    finally:
        store.close()
