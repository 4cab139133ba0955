"""The Tinkerbell management cluster's whole life through the lifecycle workflows, with real agents:
``examples/clusters/lab.yaml`` created (bootstrap cluster, machines provisioned by ``capa tink agent``
processes on the process runtime, pivot onto a ``capa serve`` standing in for the cluster's API server),
taken over by the management cluster's own controllers without being provisioned again, then deleted
(pivot back to a bootstrap cluster, machines de-provisioned, Hardware released)."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_app.providers import CoreComponents, TinkerbellProvider
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.clusterconfig import ClusterConfig, TinkerbellComponentsSpec
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware, Template
from capa_py.api.tinkerbell import Workflow as TinkWorkflow
from capa_py.api.tinkerbell_capi import HARDWARE_OWNER_NAME_LABEL, TinkerbellCluster, TinkerbellMachine
from capa_py.runtime.metrics import RESULTS
from capa_py.store.kube import KubeStore
from capa_py.store.protocol import ObjectStore
from capa_py.workflow import management
from capa_py.workflow.cluster_files import ClusterFiles
from capa_py.workflow.clusters import ClusterAccess, InProcessHost
from capa_py.workflow.config import ClusterFile, load_cluster_file
from capa_py.workflow.hook import Binder, NoopHookRegistrar
from capa_py.workflow.runner import WorkflowResult, run_workflow
from capa_py.workflow.steps import cluster_directory, cluster_kubeconfig_path
from tests.cli.served import capa_serve
from tests.cli.test_tink_agent import running_agents
from tests.cli.test_tink_hegel import _free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "clusters" / "lab.yaml"
MACHINES = ("lab-cp-0", "lab-worker-0", "lab-worker-1")
HARDWARE = tuple(f"lab-{i}" for i in range(1, 6))
TIMEOUT = 60.0
ADOPTION_WINDOW = 3.0
"""How long the management cluster's controllers are watched for re-provisioning, at least (longer until
each has reconciled every machine)."""


@dataclasses.dataclass
class Lab:
    cluster_file: Path
    stand_in: Path
    """The kubeconfig of the ``capa serve`` standing in for the management cluster's API server."""
    state: Path
    agents: list[subprocess.Popen[str]]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    """The example with free ports for the bootstrap cluster's workflow service and Hegel, a ``capa serve``
    stand-in and one agent per Hardware, pointed at the bootstrap cluster's workflow service."""
    server_port, hegel_port = _free_port(), _free_port()
    text = EXAMPLE.read_text(encoding="utf-8")
    replacements = {
        "serverPort: 42113": f"serverPort: {server_port}",
        "hegelPort: 50061": f"hegelPort: {hegel_port}",
        "cniManifest: ../cni/demo-cni.yaml": f"cniManifest: {ROOT / 'examples' / 'cni' / 'demo-cni.yaml'}",
        "kubeconfigFile: stand-in/lab.kubeconfig": "kubeconfigFile: stand-in/kubeconfig",
    }
    for old, new in replacements.items():
        assert old in text, f"{EXAMPLE} no longer says {old!r}"
        text = text.replace(old, new)
    cluster_file = tmp_path / "lab.yaml"
    cluster_file.write_text(text, encoding="utf-8")
    (tmp_path / "stand-in").mkdir()
    address = f"127.0.0.1:{server_port}"
    with (
        capa_serve(tmp_path / "stand-in") as stand_in,
        running_agents(tmp_path, address, HARDWARE, "--runtime", "process") as agents,
    ):
        yield Lab(cluster_file, stand_in, tmp_path / "state", agents)


class BootstrapWitness(NoopHookRegistrar):
    """Reads the bootstrap cluster once Delete Cluster is done, before the bootstrap cluster is deleted
    with everything it holds: the Hardware as the de-provisioning left them, and what else is left."""

    def __init__(self) -> None:
        self.hardware: list[Hardware] = []
        self.left: list[KubeObject] = []

    def bind_delete_hooks(self, binder: Binder[Any]) -> None:
        binder.after(management.delete.DELETE_CLUSTER, self.read)

    def read(self, ctx: management.DeleteContext) -> None:
        """Runs after Delete Cluster, with the bootstrap cluster still serving."""
        store = ctx.bootstrap().store()
        try:
            self.hardware = store.list(Hardware, namespace="default")
            for kind in (Cluster, Machine, TinkerbellCluster, TinkerbellMachine, TinkWorkflow, Template):
                self.left += store.list(kind, namespace="default")
        finally:
            store.close()


def _run(result: WorkflowResult, names: list[str]) -> None:
    assert result.succeeded, f"{result.failure} (bundle: {result.bundle})"
    assert list(result.ran) == names, result.ran


def _owned_by(obj: KubeObject, machine: TinkerbellMachine) -> bool:
    return any(r.kind == "TinkerbellMachine" and r.uid == machine.uid for r in obj.metadata.owner_references)


def _provisioned(store: ObjectStore) -> dict[str, tuple[str, str, str]]:
    """Each machine: its Hardware, its Workflow's uid and its Template's uid, checked on the way."""
    found: dict[str, tuple[str, str, str]] = {}
    hardware = {h.name: h for h in store.list(Hardware, namespace="default")}
    for name in MACHINES:
        machine = store.get(Machine, name, "default")
        tink = store.get(TinkerbellMachine, name, "default")
        workflow = store.get(TinkWorkflow, name, "default")
        template = store.get(Template, name, "default")
        hw = tink.spec.hardware_name
        assert hw is not None, f"TinkerbellMachine {name} claimed no Hardware"
        assert machine.status.phase == "Provisioned", (name, machine.status.phase)
        assert machine.spec.provider_id == f"tinkerbell://default/{hw}"
        assert hardware[hw].metadata.labels.get(HARDWARE_OWNER_NAME_LABEL) == name
        assert workflow.status.state == "Succeeded", (name, workflow.status)
        assert {a.state for a in workflow.status.actions.values()} == {"Succeeded"}
        assert _owned_by(workflow, tink), f"Workflow {name} is not owned by its TinkerbellMachine"
        assert _owned_by(template, tink), f"Template {name} is not owned by its TinkerbellMachine"
        found[name] = (hw, str(workflow.uid), str(template.uid))
    return found


def _reconciles(host: InProcessHost, component: str, controller: str) -> float:
    """How many reconciles ``controller`` of an in-process component has finished, whatever their result."""
    registry = host._components[component].process.metrics.registry
    return sum(
        registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": controller, "result": r}
        )
        or 0.0
        for r in RESULTS
    )


def _elsewhere(spec: ClusterFile) -> ClusterFile:
    """``spec`` with other ports for the workflow service and Hegel: the management cluster's components run
    on this host too, and must leave the config's ports to the delete's bootstrap cluster, as they would on
    a management cluster of its own."""
    config: ClusterConfig = spec.config.model_copy(deep=True)
    config.spec.tinkerbell = TinkerbellComponentsSpec(server_port=_free_port(), hegel_port=_free_port())
    return dataclasses.replace(spec, config=config)


def test_a_tinkerbell_management_cluster_is_created_adopted_and_deleted_with_real_agents(lab: Lab) -> None:
    spec = load_cluster_file(lab.cluster_file)
    provider, core = TinkerbellProvider(), CoreComponents()

    create = management.CreateContext(spec, provider, core, lab.state, TIMEOUT)
    workflow = management.new_create_workflow(spec, provider, hooks=[ClusterFiles(lab.state)])
    try:
        result = run_workflow(workflow, create, workflow_id="management-create-lab", state_dir=lab.state)
    finally:
        create.close()
    _run(result, workflow.task_names)

    bootstrap = lab.state / "bootstrap" / "lab" / "bootstrap.db"
    assert not bootstrap.exists(), "the bootstrap cluster's store outlived the create"
    assert (cluster_directory(lab.state, "lab") / "cluster.yaml").is_file()
    mgmt_kubeconfig = cluster_kubeconfig_path(lab.state, "lab")
    with KubeStore.from_kubeconfig(lab.stand_in) as store:
        assert store.get(Cluster, "lab", "default").status.phase == "Provisioned"
        assert store.get(TinkerbellCluster, "lab", "default").status.ready
        assert store.get(ClusterConfig, "lab", "default").spec.provider == "tinkerbell"
        secrets = {s.name for s in store.list(Secret, namespace="default")}
        assert {"lab-kubeconfig", *(f"{m}-bootstrap" for m in MACHINES)} <= secrets, secrets
        # The Hardware no machine claimed moved along with the claimed ones: the inventory is whole.
        assert sorted(h.name for h in store.list(Hardware, namespace="default")) == list(HARDWARE)
        provisioned = _provisioned(store)
        assert len({hw for hw, _, _ in provisioned.values()}) == len(MACHINES), provisioned
        assert provisioned["lab-cp-0"][0] == "lab-1", "the control plane must land on role=control-plane"

    # The management cluster's controllers, in this process as a Deployment would run them there.
    host = InProcessHost(mgmt_kubeconfig)
    try:
        managed = ClusterAccess("lab", mgmt_kubeconfig, host=host)
        elsewhere = _elsewhere(spec)
        CoreComponents().install(managed, elsewhere)
        TinkerbellProvider().install_components(managed, elsewhere)
        assert host.running == ["core", "tinkerbell"]
        watched = {("core", "machine"), ("tinkerbell", "tinkerbellmachine"), ("tinkerbell", "workflow")}
        started = time.monotonic()
        with KubeStore.from_kubeconfig(lab.stand_in) as store:
            while True:
                assert _provisioned(store) == provisioned, "the management cluster provisioned again"
                assert len(store.list(TinkWorkflow, namespace="default")) == len(MACHINES)
                behind = {w for w in watched if _reconciles(host, *w) < len(MACHINES)}
                if not behind and time.monotonic() - started > ADOPTION_WINDOW:
                    break
                assert time.monotonic() - started < TIMEOUT, f"never reconciled every machine: {behind}"
                time.sleep(0.3)

        delete = management.DeleteContext(spec, provider, core, lab.state, TIMEOUT)
        witness = BootstrapWitness()
        hooks = [ClusterFiles(lab.state), witness]
        workflow_d = management.new_delete_workflow(spec, provider, hooks=hooks)
        try:
            result = run_workflow(
                workflow_d, delete, workflow_id="management-delete-lab", state_dir=lab.state
            )
        finally:
            delete.close()
        _run(result, workflow_d.task_names)
    finally:
        host.stop()

    assert sorted(h.name for h in witness.hardware) == list(HARDWARE)
    for hw in witness.hardware:
        assert HARDWARE_OWNER_NAME_LABEL not in hw.metadata.labels, f"Hardware {hw.name} still claimed"
        assert hw.spec.instance is None or hw.spec.instance.userdata is None, f"{hw.name} kept user-data"
    assert witness.left == [], [f"{o.KIND} {o.name}" for o in witness.left]
    with KubeStore.from_kubeconfig(lab.stand_in) as store:
        for kind in (Cluster, Machine, TinkerbellMachine, TinkWorkflow, Hardware):
            assert store.list(kind, namespace="default") == [], f"{kind.KIND} left on the management cluster"
    assert not bootstrap.exists()
    assert not cluster_directory(lab.state, "lab").exists()
