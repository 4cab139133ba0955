"""A capa-py cluster converged on real Cluster API core (v1.13.6), described and moved by clusterctl.

Two management clusters of their own (``clusterctl_support.management_cluster``: a control plane, core's
manager, capa-py's infrastructure CRDs and clusterctl's inventory written by hand) and a bare control plane
standing in for the workload cluster: core reads the Machines' Nodes there through the Cluster's
``<name>-kubeconfig`` Secret (``clusterctl move`` wants every Machine to have a ``nodeRef`` and the Cluster's
``ControlPlaneInitialized`` condition true, which core sets once a control-plane Machine has a Node; there
is no kubelet, so the Node is registered through the API with the AWSMachine's ``spec.providerID``).

capa-py's controller (``capa controller --core-controllers off``) converges the cluster on a moto server; the
scenario runs in order: describe and ``upgrade plan`` on the source, move to the target with the source's
controller still running (it makes no mutating AWS call meanwhile: its own ``aws_api_requests_total``
metrics, and AWS unchanged), adoption by a controller started on the target (no mutating call either), then
deletion on the target, after which nothing tagged for the cluster is left in AWS.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.aws.accounting import is_mutating
from capa_py.manifests.rbac import NAMESPACE as CAPA_NAMESPACE
from capa_py.manifests.repository import write_repository
from tests.clusterapi.clusterctl_support import (
    AWS_CLUSTER_SPEC,
    CAPA_PROVIDER,
    CORE_NAMESPACE,
    CORE_PROVIDER,
    Clusterctl,
    absent,
    clusterctl,
    management_cluster,
    register_node,
    wait_for,
    with_local_core,
    workload_cluster,
)
from tests.e2e.e2e_support import MotoInspector, capa_env
from tests.e2e.test_controller_mode import Background, scrape
from tests.peers.cluster import PeerCluster
from tests.peers.clusterapi import CapiCore
from tests.peers.fixtures import require_go

NAMESPACE = "default"
NAME = "moved"
MACHINE = f"{NAME}-control-plane-0"
WORKER = f"{NAME}-worker-0"
MACHINES = (MACHINE, WORKER)
BOOTSTRAP = f"{NAME}-bootstrap"
CORE_GROUP = "cluster.x-k8s.io"
INFRA_GROUP = "infrastructure.cluster.x-k8s.io"
CORE = f"/apis/{CORE_GROUP}/v1beta2/namespaces/{NAMESPACE}"
INFRA = f"/apis/{INFRA_GROUP}/v1beta2/namespaces/{NAMESPACE}"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
CLUSTER_TAG = f"sigs.k8s.io/cluster-api-provider-aws/cluster/{NAME}"
TIMEOUT = 240.0


@dataclass
class Scenario:
    workdir: Path
    aws: str
    source: CapiCore
    target: CapiCore
    workload: PeerCluster
    tool: Clusterctl
    controllers: dict[str, Background] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def report(self) -> str:
        parts = [c.report() for c in self.controllers.values() if c.process.poll() is None]
        for name, core in (("source", self.source), ("target", self.target)):
            parts.append(f"--- {name} cluster-api-manager ---\n{core.log_tail(30)}")
        return "\n".join(parts)


def aws_calls(samples: dict[str, float]) -> dict[str, float]:
    """``{"ec2:CreateVpc": n, ...}`` from a controller's ``aws_api_requests_total`` samples."""
    calls: dict[str, float] = {}
    for key, value in samples.items():
        if key.startswith("aws_api_requests_total{"):
            service = re.search(r"service=([^,}]+)", key)
            operation = re.search(r"operation=([^,}]+)", key)
            assert service is not None
            assert operation is not None
            name = f"{service.group(1)}:{operation.group(1)}"
            calls[name] = calls.get(name, 0.0) + value
    return calls


def mutating(calls: dict[str, float]) -> dict[str, float]:
    return {name: n for name, n in calls.items() if is_mutating(name.split(":", 1)[1])}


def start(scenario: Scenario, name: str, core: CapiCore) -> Background:
    """capa-py's controller beside real core on ``core``'s control plane (admin kubeconfig), as
    ``start_controller`` runs it; registered before it is waited for, so the scenario always stops it."""
    controller = Background(
        name,
        [
            "--kubeconfig", str(core.cluster.admin_kubeconfig), "controller", "--aws-endpoint", scenario.aws,
            "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0",
            "--core-controllers", "off",
        ],
        capa_env(scenario.workdir / f"{name}-home"),
        scenario.workdir,
    )  # fmt: skip
    scenario.controllers[name] = controller
    controller.wait_for_line(r"controllers running:", timeout=90)
    return controller


def metrics_url(controller: Background) -> str:
    return controller.wait_for_line(r"metrics: (http://\S+/metrics)").group(1)


def the_objects(workload: PeerCluster, owner_uid: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The scenario's objects as ``(collection path, name, body)``, in the order they are created."""
    kubeconfig = workload.admin_kubeconfig.read_text()
    return [
        (
            SECRETS,
            f"{NAME}-kubeconfig",
            {
                "metadata": {"name": f"{NAME}-kubeconfig", "labels": {f"{CORE_GROUP}/cluster-name": NAME}},
                "type": "cluster.x-k8s.io/secret",
                "stringData": {"value": kubeconfig},
            },
        ),
        (
            f"{INFRA}/awsclusters",
            NAME,
            {
                "apiVersion": f"{INFRA_GROUP}/v1beta2",
                "kind": "AWSCluster",
                "metadata": {"name": NAME},
                "spec": AWS_CLUSTER_SPEC,
            },
        ),
        (
            f"{CORE}/clusters",
            NAME,
            {
                "apiVersion": f"{CORE_GROUP}/v1beta2",
                "kind": "Cluster",
                "metadata": {"name": NAME},
                "spec": {
                    "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                    "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "AWSCluster", "name": NAME},
                },
            },
        ),
        *(obj for machine in MACHINES for obj in machine_objects(machine)),
    ]


def machine_objects(name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """An AWSMachine and its Machine (a control-plane one for :data:`MACHINE`)."""
    labels = {f"{CORE_GROUP}/cluster-name": NAME}
    if name == MACHINE:
        labels[f"{CORE_GROUP}/control-plane"] = ""
    return [
        (
            f"{INFRA}/awsmachines",
            name,
            {
                "apiVersion": f"{INFRA_GROUP}/v1beta2",
                "kind": "AWSMachine",
                "metadata": {"name": name},
                "spec": {"instanceType": "t3.medium", "ami": {"id": "ami-785db401"}},
            },
        ),
        (
            f"{CORE}/machines",
            name,
            {
                "apiVersion": f"{CORE_GROUP}/v1beta2",
                "kind": "Machine",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "clusterName": NAME,
                    "version": "v1.31.0",
                    "bootstrap": {"dataSecretName": BOOTSTRAP},
                    "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "AWSMachine", "name": name},
                },
            },
        ),
    ]


def bootstrap_secret(machine: dict[str, Any]) -> dict[str, Any]:
    """The Machine's bootstrap data, owned by the Machine as a bootstrap provider's Secret is owned by its
    config (so clusterctl moves it with the Machine)."""
    owner = {
        "apiVersion": f"{CORE_GROUP}/v1beta2",
        "kind": "Machine",
        "name": machine["metadata"]["name"],
        "uid": machine["metadata"]["uid"],
    }
    return {
        "metadata": {"name": BOOTSTRAP, "ownerReferences": [owner]},
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": "#cloud-config\n"},
    }


def get(core: CapiCore, path: str) -> dict[str, Any]:
    found: dict[str, Any] = core.cluster.request(path)
    return found


def conditions_of(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}


def converged(core: CapiCore) -> dict[str, Any] | None:
    """Every object as core and capa-py leave a converged cluster, or None while they are not."""
    cluster = get(core, f"{CORE}/clusters/{NAME}")
    awscluster = get(core, f"{INFRA}/awsclusters/{NAME}")
    conditions = {c["type"]: c["status"] for c in cluster.get("status", {}).get("conditions", [])}
    found = {"Cluster": cluster, "AWSCluster": awscluster}
    done = bool(
        cluster.get("status", {}).get("initialization", {}).get("infrastructureProvisioned")
        and conditions.get("ControlPlaneInitialized") == "True"
        and awscluster.get("status", {}).get("ready")
    )
    for name in MACHINES:
        machine = get(core, f"{CORE}/machines/{name}")
        awsmachine = get(core, f"{INFRA}/awsmachines/{name}")
        found[f"Machine/{name}"] = machine
        found[f"AWSMachine/{name}"] = awsmachine
        done = done and bool(
            awsmachine.get("status", {}).get("initialization", {}).get("provisioned")
            and machine.get("status", {}).get("nodeRef")
            and machine.get("status", {}).get("phase") == "Running"
            and {c["type"]: c["status"] for c in machine["status"].get("conditions", [])}.get("Ready")
            == "True"
        )
    return found if done else None


def provider_ids(core: CapiCore) -> dict[str, str] | None:
    """Each AWSMachine's ``spec.providerID``, once every one has it."""
    found = {
        name: get(core, f"{INFRA}/awsmachines/{name}").get("spec", {}).get("providerID") for name in MACHINES
    }
    return found if all(found.values()) else None


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, aws: str) -> Iterator[Scenario]:
    """The converged cluster on the source (``aws``: the real-API-server tests' moto server, reset for this
    module), the target beside it, and clusterctl."""
    require_go()
    workdir = tmp_path_factory.mktemp("clusterctl-move")
    with (
        workload_cluster(workdir / "workload") as workload,
        management_cluster(workdir / "source") as source,
        management_cluster(workdir / "target") as target,
    ):
        scenario = Scenario(workdir, aws, source, target, workload, clusterctl(workdir))
        try:
            start(scenario, "source-controller", source)
            scenario.notes["source-metrics"] = metrics_url(scenario.controllers["source-controller"])
            for path, _, body in the_objects(workload, ""):
                created = source.cluster.request(path, "POST", body)
                if created.get("kind") == "Machine" and created["metadata"]["name"] == MACHINE:
                    source.cluster.request(SECRETS, "POST", bootstrap_secret(created))
            found = wait_for("the providerIDs", lambda: provider_ids(source), TIMEOUT, scenario.report)
            # The kubelet's part: each Node registers itself with its instance's provider ID.
            for name, provider_id in found.items():
                register_node(workload, provider_id, name)
            scenario.notes["converged"] = wait_for(
                "the cluster converged on the source", lambda: converged(source), TIMEOUT, scenario.report
            )
            yield scenario
        finally:
            for controller in scenario.controllers.values():
                controller.stop(signal.SIGTERM, timeout=30)


def test_clusterctl_describe_shows_the_capa_py_cluster_tree_ready(scenario: Scenario) -> None:
    described = scenario.tool.ok(
        "describe", "cluster", NAME, "--namespace", NAMESPACE, "--kubeconfig",
        str(scenario.source.cluster.admin_kubeconfig), "--grouping=false",
    )  # fmt: skip
    rows = {}
    for line in described.splitlines():
        found = re.search(r"((?:Cluster|AWSCluster|Machine)/\S+)[\s\d/]*(True|False|Unknown)\s", line)
        if found:
            rows[found.group(1)] = found.group(2)
    scenario.notes["described"] = described
    # The Cluster is listed (its Available condition stays Unknown without a control plane object: core
    # reports ControlPlaneAvailable Unknown); without a control plane object, the control-plane Machine is
    # listed with the others under Workers / Other.
    assert f"Cluster/{NAME}" in described, described
    assert {k: v for k, v in rows.items() if k != f"Cluster/{NAME}"} == {
        f"AWSCluster/{NAME}": "True",
        f"Machine/{MACHINE}": "True",
        f"Machine/{WORKER}": "True",
    }, described
    assert "Workers" in described


def test_clusterctl_upgrade_plan_reads_the_repositorys_metadata_and_accepts_its_contract(
    scenario: Scenario,
) -> None:
    """clusterctl reads the newest release's ``metadata.yaml`` for the release installed: v0.2.0's must list
    v0.1's series too (before ``write_repository`` kept the earlier series, ``upgrade plan`` failed with
    "version v0.1.0 (the current version) ... does not match any release series")."""
    repository = Path(
        yaml.safe_load(scenario.tool.config.read_text())["providers"][0]["url"][len("file://") :]
    )
    write_repository(repository.parents[2], "v0.2.0")
    tool = with_local_core(scenario.tool, scenario.source, scenario.workdir)
    planned = tool.ok("upgrade", "plan", "--kubeconfig", str(scenario.source.cluster.admin_kubeconfig))
    rows = {
        line.split()[0]: line.split()[1:]
        for line in planned.splitlines()
        if line.startswith(("cluster-api ", "infrastructure-"))
    }
    assert rows[CAPA_PROVIDER] == [CAPA_NAMESPACE, "InfrastructureProvider", "v0.1.0", "v0.2.0"], planned
    current = [CORE_NAMESPACE, "CoreProvider", "v1.13.6", *["Already", "up", "to", "date"]]
    assert rows[CORE_PROVIDER] == current, planned
    assert "clusterctl upgrade apply --contract v1beta2" in planned, planned


def uids(core: CapiCore) -> dict[str, str]:
    """``{"Kind/name": uid}`` of the scenario's objects on ``core``'s control plane."""
    found = {}
    for path, name, _ in the_objects(core.cluster, ""):
        obj = get(core, f"{path}/{name}")
        found[f"{obj.get('kind') or 'Secret'}/{name}"] = obj["metadata"]["uid"]
    secret = get(core, f"{SECRETS}/{BOOTSTRAP}")
    found[f"Secret/{BOOTSTRAP}"] = secret["metadata"]["uid"]
    return found


def owners(obj: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    return [
        (ref["kind"], ref["name"], ref["uid"], bool(ref.get("controller")))
        for ref in obj["metadata"].get("ownerReferences", [])
    ]


def test_clusterctl_move_moves_the_converged_cluster_and_a_target_controller_adopts_it_without_mutating_aws(
    scenario: Scenario,
) -> None:
    source, target = scenario.source, scenario.target
    before = uids(source)
    # The source controller keeps running through the move: clusterctl pauses the Cluster, then deletes each
    # object (annotated delete-for-move) and removes its finalizers; none of that may reach AWS.
    source_metrics = scenario.notes["source-metrics"]
    source_before = aws_calls(scrape(source_metrics))
    inspector = MotoInspector(scenario.aws)
    try:
        in_aws = inspector.inventory(CLUSTER_TAG).tagged
    finally:
        inspector.close()

    moved = scenario.tool.run(
        "move", "--kubeconfig", str(source.cluster.admin_kubeconfig),
        "--to-kubeconfig", str(target.cluster.admin_kubeconfig), "--namespace", NAMESPACE, "-v", "5",
    )  # fmt: skip
    (scenario.workdir / "clusterctl-move.log").write_text(moved.stdout + moved.stderr)
    assert moved.returncode == 0, f"{moved.stdout}\n{moved.stderr}\n{scenario.report()}"
    during = {k: n - source_before.get(k, 0.0) for k, n in aws_calls(scrape(source_metrics)).items()}
    source_controller = scenario.controllers["source-controller"]
    assert source_controller.stop(signal.SIGTERM, timeout=30) == 0, source_controller.report()
    assert mutating({k: n for k, n in during.items() if n}) == {}, during
    inspector = MotoInspector(scenario.aws)
    try:  # after the controller's graceful stop: whatever it still had in hand is done
        assert inspector.inventory(CLUSTER_TAG).tagged == in_aws
    finally:
        inspector.close()

    # Nothing of the cluster is left on the source; the target has every object, created anew.
    for path, name, _ in the_objects(source.cluster, ""):
        assert absent(source.cluster, f"{path}/{name}"), f"{path}/{name} left on the source"
    assert absent(source.cluster, f"{SECRETS}/{BOOTSTRAP}")
    after = uids(target)
    assert sorted(after) == sorted(before)
    assert not set(after.values()) & set(before.values())

    # Owner references point at the target's objects (new uids); the Cluster is no longer paused.
    cluster = get(target, f"{CORE}/clusters/{NAME}")
    assert not cluster["spec"].get("paused"), cluster["spec"]
    awscluster = get(target, f"{INFRA}/awsclusters/{NAME}")
    assert owners(awscluster) == [("Cluster", NAME, after[f"Cluster/{NAME}"], False)]
    for name in MACHINES:
        awsmachine = get(target, f"{INFRA}/awsmachines/{name}")
        assert owners(awsmachine) == [("Machine", name, after[f"Machine/{name}"], True)]
        converged_before = scenario.notes["converged"][f"AWSMachine/{name}"]
        assert awsmachine["spec"]["providerID"] == converged_before["spec"]["providerID"]
    bootstrap = get(target, f"{SECRETS}/{BOOTSTRAP}")
    assert owners(bootstrap) == [("Machine", MACHINE, after[f"Machine/{MACHINE}"], False)]

    # A controller on the target adopts the moved cluster: everything ready again, no mutating AWS call.
    controller = start(scenario, "target-controller", target)
    metrics = metrics_url(controller)
    wait_for("the moved cluster converged on the target", lambda: converged(target), TIMEOUT, scenario.report)
    calls = aws_calls(scrape(metrics))
    scenario.notes["adoption-calls"] = calls
    assert calls, "the target's controller never asked AWS"
    assert mutating(calls) == {}, calls
    awscluster = get(target, f"{INFRA}/awsclusters/{NAME}")
    before_status = scenario.notes["converged"]["AWSCluster"]["status"]
    assert awscluster["status"]["network"] == before_status["network"]


def test_deleting_the_moved_cluster_on_the_target_removes_every_aws_resource(scenario: Scenario) -> None:
    target = scenario.target
    inspector = MotoInspector(scenario.aws)
    try:
        assert any(inspector.inventory(CLUSTER_TAG).counts("tagged").values())
        target.cluster.request(f"{CORE}/clusters/{NAME}", "DELETE")
        wait_for(
            "the Cluster gone from the target",
            lambda: absent(target.cluster, f"{CORE}/clusters/{NAME}"),
            TIMEOUT,
            scenario.report,
        )
        for path, name, _ in the_objects(target.cluster, "")[1:]:
            assert absent(target.cluster, f"{path}/{name}"), f"{path}/{name} left on the target"
        left = inspector.inventory(CLUSTER_TAG).counts("tagged")
        assert not any(left.values()), left
    finally:
        inspector.close()
