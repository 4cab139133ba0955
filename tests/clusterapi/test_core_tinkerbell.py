"""capa-py's bare-metal (Tinkerbell) provider under upstream Cluster API core (v1.13.6, built from Go
modules), with real agents running the provisioning workflows.

The management cluster is the session's ``capi_cluster`` (a real kube-apiserver with Cluster API's CRDs,
webhooks and manager). capa-py's infrastructure CRDs and the Tinkerbell CRDs (Hardware, Template, Workflow,
...) go beside them, and ``capa controller --core-controllers off --providers tinkerbell`` runs against it
with the workflow server and Hegel on loopback ports; one ``capa tink agent`` per Hardware (the process
runtime) runs what the server dispatches to it. The user's manifests are ``examples/tinkerbell-cluster.yaml``
(its workers a MachineDeployment of a TinkerbellMachineTemplate), applied with kubectl in a namespace of
this module's own.

As in ``test_core_e2e``, a second control plane stands in for the workload cluster, where the test registers
a Node with each TinkerbellMachine's provider ID as the machine's kubelet would, so that core sets each
Machine's ``nodeRef`` and phase ``Running``. Nothing else is faked: core makes the MachineSet, the Machines
and the TinkerbellMachine clones; capa-py claims Hardware, writes user-data and Workflows; the agents run
every action; Hegel serves the user-data.
"""

from __future__ import annotations

import json
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from capa_py.api.tinkerbell_capi import HARDWARE_OWNER_NAME_LABEL, HARDWARE_OWNER_NAMESPACE_LABEL
from capa_py.manifests.repository import infrastructure_kinds
from tests.cli.test_tink_agent import issue_tokens, running_agents
from tests.clusterapi.clusterctl_support import (
    UnderCore,
    apply_cluster,
    install_crds,
    object_states,
    register_node,
    wait_for,
    workload_cluster,
)
from tests.peers.cluster import free_port
from tests.peers.clusterapi import CapiCore
from tests.realkube.realkube_support import Kubectl, kubectl_binary, running_controller
from tests.tinkerbell.capt_world import DEPLOYMENT, machine_deployment_manifests, workers_bootstrap
from tests.tinkerbell.test_capt_agents_e2e import _user_data

pytestmark = pytest.mark.slow

NAMESPACE = "capt-core"
CLUSTER = "lab"  # the example's names
CONTROL_PLANE = "lab-cp-0"
HARDWARE = tuple(f"lab-{i}" for i in range(1, 6))
CAPI = f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}"
INFRA = f"/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/{NAMESPACE}"
TINK = f"/apis/tinkerbell.org/v1alpha2/namespaces/{NAMESPACE}"
RESOURCES = (
    ("clusters", "cluster.x-k8s.io/v1beta2"),
    ("machinedeployments", "cluster.x-k8s.io/v1beta2"),
    ("machinesets", "cluster.x-k8s.io/v1beta2"),
    ("machines", "cluster.x-k8s.io/v1beta2"),
    ("tinkerbellclusters", "infrastructure.cluster.x-k8s.io/v1beta1"),
    ("tinkerbellmachines", "infrastructure.cluster.x-k8s.io/v1beta1"),
    ("workflows", "tinkerbell.org/v1alpha2"),
)
"""What a failure's message shows of the management cluster."""
CONVERGE = 120.0  # seconds: a bound on each wait, so that a broken run fails instead of hanging
T = TypeVar("T")


@dataclass
class BareMetal(UnderCore):
    hegel_port: int
    agent_logs: Path
    nodes: set[str] = field(default_factory=set)

    def by_name(self, path: str) -> dict[str, dict[str, Any]]:
        return {item["metadata"]["name"]: item for item in self.list(path)}

    def machines(self) -> list[dict[str, Any]]:
        return self.list(f"{CAPI}/machines")

    def register_nodes(self) -> None:
        """The kubelet stand-in: one Node per provisioned TinkerbellMachine that is not being deleted,
        registered once (Cluster API deletes it when the Machine goes)."""
        for machine in self.list(f"{INFRA}/tinkerbellmachines"):
            provider_id = machine["spec"].get("providerID")
            if not provider_id or machine["metadata"].get("deletionTimestamp") or provider_id in self.nodes:
                continue
            register_node(self.workload, provider_id)
            self.nodes.add(provider_id)

    def running_workers(self, replicas: int) -> list[dict[str, Any]] | None:
        """The MachineDeployment's Machines once exactly ``replicas`` exist beside the control plane's, none
        deleting, each ``Running`` with a provider ID; None before. One read, so the Machines returned are
        the ones judged."""
        self.register_nodes()
        machines = self.machines()
        workers = [m for m in machines if m["metadata"]["name"] != CONTROL_PLANE]
        settled = len(machines) == replicas + 1 and all(
            m.get("status", {}).get("phase") == "Running"
            and m["spec"].get("providerID")
            and not m["metadata"].get("deletionTimestamp")
            for m in machines
        )
        return workers if settled else None

    def claimed(self) -> dict[str, str]:
        """``{hardware: the TinkerbellMachine owning it}`` of every claimed Hardware."""
        return {
            name: labels[HARDWARE_OWNER_NAME_LABEL]
            for name, hardware in self.by_name(f"{TINK}/hardware").items()
            if HARDWARE_OWNER_NAME_LABEL in (labels := hardware["metadata"].get("labels", {}))
        }

    def actions_run(self, hardware: str, workflow: str) -> dict[str, str]:
        """``{action: outcome}`` of what the agent of ``hardware`` reports it ran of ``workflow``, from its
        log."""
        lines = (self.agent_logs / f"{hardware}.log").read_text().splitlines()
        records = [json.loads(line) for line in lines if line.startswith("{")]
        return {
            r["action"]: r["outcome"]
            for r in records
            if r.get("event") == "action ended" and r.get("workflow_id") == f"{NAMESPACE}/{workflow}"
        }

    def report(self) -> str:
        return (
            f"{object_states(self.cluster, NAMESPACE, RESOURCES)}\nclaimed: {self.claimed()}\n--- capa-py\n"
            f"{self.controller.report()}\n--- Cluster API core\n{self.core.log_tail(40)}"
        )

    def wait(self, condition: Callable[[], T | None], what: str) -> T:
        """``condition()``'s first truthy value; on timeout fails with the cluster's state and both
        controllers' logs."""
        return wait_for(what, condition, timeout=CONVERGE, report=self.report)


@pytest.fixture(scope="module")
def bare_metal(capi_cluster: CapiCore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BareMetal]:
    kubectl_binary()
    workdir = tmp_path_factory.mktemp("capt-core")
    cluster = capi_cluster.cluster
    kubectl = Kubectl(cluster.admin_kubeconfig, workdir / "kubectl-home")
    # capa-py's infrastructure CRDs and Tinkerbell's, never its own Cluster/Machine CRDs: core serves those.
    install_crds(cluster, infrastructure_kinds())
    hegel_port, server_port = free_port(), free_port()
    with workload_cluster(workdir / "workload") as workload:
        flags = (
            *("--core-controllers", "off", "--providers", "tinkerbell"),
            *("--tink-server-port", str(server_port), "--hegel-port", str(hegel_port)),
        )
        with running_controller("controller", cluster.admin_kubeconfig, None, workdir, *flags) as controller:
            address = controller.wait_for_line(r"tink server: (\S+)").group(1)
            agents, logs = workdir / "agents", workdir / "agent-logs"
            agents.mkdir()
            logs.mkdir()
            try:
                cluster.request(
                    "/api/v1/namespaces",
                    "POST",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                )
            except urllib.error.HTTPError as exc:
                if exc.code != 409:  # 409: there already
                    raise
            # A token per Hardware, in the Secrets the example's Hardware reference.
            store_flags = ("--kubeconfig", str(cluster.admin_kubeconfig))
            tokens = issue_tokens(store_flags, HARDWARE, workdir / "tokens", NAMESPACE)
            with running_agents(agents, address, HARDWARE, logs=logs, tokens=tokens):
                yield BareMetal(capi_cluster, workload, kubectl, workdir, controller, hegel_port, logs)


@pytest.fixture(scope="module")
def converged(bare_metal: BareMetal) -> list[dict[str, Any]]:
    """The manifests applied with kubectl, the workload kubeconfig Secret beside them, and every Machine
    Running: the MachineDeployment's two (returned) and the control plane's."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    documents = [namespace, *machine_deployment_manifests(2, NAMESPACE)]
    apply_cluster(
        bare_metal.kubectl,
        bare_metal.cluster,
        bare_metal.workload,
        bare_metal.workdir / "cluster.yaml",
        documents,
    )
    return bare_metal.wait(lambda: bare_metal.running_workers(2), "two Running workers")


def test_each_replica_is_a_clone_provisioned_on_hardware_of_its_own_by_its_agent(
    bare_metal: BareMetal, converged: list[dict[str, Any]]
) -> None:
    def initialized() -> dict[str, Any] | None:
        cluster: dict[str, Any] = bare_metal.cluster.request(f"{CAPI}/clusters/{CLUSTER}")
        conditions = {c["type"]: c["status"] for c in cluster["status"].get("conditions", [])}
        return cluster if conditions.get("ControlPlaneInitialized") == "True" else None

    # The control-plane Machine's Node registered: core reads the workload cluster (the kubeconfig Secret).
    cluster = bare_metal.wait(initialized, "the control plane initialized")
    assert cluster["status"]["initialization"]["infrastructureProvisioned"] is True
    assert cluster["spec"]["controlPlaneEndpoint"] == {"host": "127.0.0.100", "port": 6443}
    clones = bare_metal.by_name(f"{INFRA}/tinkerbellmachines")
    hardware = bare_metal.by_name(f"{TINK}/hardware")
    workflows = bare_metal.by_name(f"{TINK}/workflows")
    control_plane = bare_metal.cluster.request(f"{CAPI}/machines/{CONTROL_PLANE}")
    assert control_plane["spec"]["providerID"] == f"tinkerbell://{NAMESPACE}/lab-1", "role=control-plane"
    taken = {"lab-1": CONTROL_PLANE}
    for machine in converged:
        assert machine["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] == DEPLOYMENT
        clone = clones[machine["spec"]["infrastructureRef"]["name"]]
        name = clone["metadata"]["name"]
        annotations = clone["metadata"]["annotations"]
        assert annotations["cluster.x-k8s.io/cloned-from-name"] == DEPLOYMENT
        assert (
            annotations["cluster.x-k8s.io/cloned-from-groupkind"]
            == "TinkerbellMachineTemplate.infrastructure.cluster.x-k8s.io"
        )
        assert [(o["kind"], o["name"]) for o in clone["metadata"]["ownerReferences"]] == [
            ("Machine", machine["metadata"]["name"])
        ]
        assert clone["status"]["initialization"]["provisioned"] is True
        # The clone claimed a Hardware of its own (the workers prefer rack b's) and core copied its ID.
        claimed = clone["spec"]["hardwareName"]
        assert claimed not in taken, f"{claimed} claimed by {name} and {taken.get(claimed)}"
        taken[claimed] = name
        labels = hardware[claimed]["metadata"]["labels"]
        assert (labels[HARDWARE_OWNER_NAME_LABEL], labels[HARDWARE_OWNER_NAMESPACE_LABEL]) == (
            name,
            NAMESPACE,
        )
        assert hardware[claimed]["metadata"]["labels"]["rack"] == "b"
        assert (
            machine["spec"]["providerID"]
            == clone["spec"]["providerID"]
            == f"tinkerbell://{NAMESPACE}/{claimed}"
        )
        assert machine["status"]["nodeRef"]["name"] == f"node-{claimed}"
        ip = hardware[claimed]["spec"]["networkInterfaces"].popitem()[1]["dhcp"]["ip"]
        addresses = [(a["type"], a["address"]) for a in machine["status"]["addresses"]]
        assert addresses == [("InternalIP", ip), ("Hostname", claimed)], "core copied the clone's addresses"
        # Its Workflow ran to Succeeded, every action reported by the agent of that Hardware.
        status = workflows[name]["status"]
        assert status["state"] == "Succeeded"
        assert {a: s["state"] for a, s in status["actions"].items()} == dict.fromkeys(
            ["stream-image", "write-cloud-init", "reboot"], "Succeeded"
        )
        assert bare_metal.actions_run(claimed, name) == dict.fromkeys(status["actions"], "succeeded")
        # Hegel answers the Hardware's address with the MachineDeployment's bootstrap data.
        assert _user_data(bare_metal.hegel_port, ip) == (200, workers_bootstrap())
    assert bare_metal.claimed() == taken

    def available() -> dict[str, Any] | None:
        """The MachineDeployment once core counts both replicas ready and available, and its Machines (its
        own only: not the control plane's) up to date."""
        status: dict[str, Any] = bare_metal.cluster.request(f"{CAPI}/machinedeployments/{DEPLOYMENT}")[
            "status"
        ]
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        judged = (status.get("readyReplicas"), status.get("availableReplicas"))
        judged += (conditions.get("Available"), conditions.get("MachinesUpToDate"))
        return status if judged == (2, 2, "True", "True") else None

    bare_metal.wait(available, "the MachineDeployment available")
    printed = bare_metal.kubectl.run("get", "machinedeployments", "-n", NAMESPACE).stdout.splitlines()
    columns = [DEPLOYMENT, CLUSTER, "True", "2", "2", "2", "2", "2", "Running"]
    assert printed[1].split()[:9] == columns, printed  # NAME CLUSTER AVAILABLE DESIRED ... PHASE


def test_scaling_down_frees_the_removed_replicas_hardware(
    bare_metal: BareMetal, converged: list[dict[str, Any]]
) -> None:
    before = bare_metal.claimed()
    bare_metal.kubectl.run("scale", "-n", NAMESPACE, f"machinedeployment/{DEPLOYMENT}", "--replicas=1")
    [kept] = bare_metal.wait(lambda: bare_metal.running_workers(1), "one Running worker")
    clone = kept["spec"]["infrastructureRef"]["name"]

    def two_claimed() -> dict[str, str] | None:
        claimed = bare_metal.claimed()
        return claimed if len(claimed) == 2 else None

    after = bare_metal.wait(two_claimed, "a Hardware freed")
    assert after == {h: m for h, m in before.items() if m in (CONTROL_PLANE, clone)}
    [freed] = set(before) - set(after)
    hardware = bare_metal.cluster.request(f"{TINK}/hardware/{freed}")
    assert "userdata" not in (hardware["spec"].get("instance") or {})
    removed = before[freed]
    assert removed not in bare_metal.by_name(f"{INFRA}/tinkerbellmachines")
    assert removed not in bare_metal.by_name(f"{TINK}/workflows")
    assert removed not in bare_metal.by_name(f"{TINK}/templates")


def test_deleting_the_cluster_frees_every_hardware(
    bare_metal: BareMetal, converged: list[dict[str, Any]]
) -> None:
    bare_metal.kubectl.run(
        "delete", "cluster.v1beta1.cluster.x-k8s.io", CLUSTER, "-n", NAMESPACE, "--wait=false"
    )
    bare_metal.wait(lambda: not bare_metal.list(f"{CAPI}/clusters"), "the Cluster gone")
    assert bare_metal.machines() == []
    assert bare_metal.list(f"{INFRA}/tinkerbellmachines") == []
    assert bare_metal.list(f"{TINK}/workflows") == []
    assert bare_metal.list(f"{TINK}/templates") == []
    assert bare_metal.claimed() == {}
    assert sorted(bare_metal.by_name(f"{TINK}/hardware")) == list(HARDWARE)
