"""capa-py as the infrastructure provider under upstream Cluster API core (v1.13.6, built from Go modules).

The management cluster is the session's ``capi_cluster``: a real kube-apiserver with Cluster API's CRDs,
webhooks and manager. capa-py's infrastructure CRDs go beside them (never its own Cluster/Machine CRDs) and
``capa controller --core-controllers off`` reconciles on the local AWS endpoint (moto over HTTP). The user's
manifests are Cluster API's: a Cluster, an AWSCluster, an AWSMachineTemplate and a MachineDeployment whose
machines take their bootstrap data from a Secret (``bootstrap.dataSecretName``: no bootstrap provider runs).

A second real kube-apiserver stands in for the workload cluster: its kubeconfig is the
``<cluster>-kubeconfig`` Secret Cluster API core connects with, and a kubelet stand-in in the test registers a
Node for each launched instance with its provider ID, as a kubelet with the AWS cloud provider does, so that
core sets each Machine's ``nodeRef`` and phase ``Running``. Nothing else is faked: core makes the MachineSets,
Machines and AWSMachine clones; capa-py makes the AWS resources.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from capa_py.manifests.crds import custom_kinds, is_infrastructure_kind
from tests.clusterapi.clusterctl_support import (
    UnderCore,
    apply_cluster,
    install_crds,
    object_states,
    register_node,
)
from tests.e2e.e2e_support import MotoInspector
from tests.peers.cluster import running
from tests.peers.clusterapi import CapiCore
from tests.realkube.realkube_support import Kubectl, capa, kubectl_binary, running_controller
from tests.support.eventually import eventually

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster.yaml"
NAMESPACE = "capi-e2e"
CLUSTER = "demo-md"  # the example's names, demo renamed (example_text)
DEPLOYMENT = "demo-md-workers"
CONTROL_PLANE = "demo-md-control-plane-0"
CLUSTER_TAG = f"sigs.k8s.io/cluster-api-provider-aws/cluster/{CLUSTER}"
T = TypeVar("T")
RESOURCES = (
    ("clusters", "cluster.x-k8s.io/v1beta2"),
    ("machinedeployments", "cluster.x-k8s.io/v1beta2"),
    ("machinesets", "cluster.x-k8s.io/v1beta2"),
    ("machines", "cluster.x-k8s.io/v1beta2"),
    ("awsclusters", "infrastructure.cluster.x-k8s.io/v1beta2"),
    ("awsmachines", "infrastructure.cluster.x-k8s.io/v1beta2"),
)
"""What a failure's message shows of the management cluster."""
CONVERGE = 240.0  # seconds: creating a whole network and instances at moto's ~95 calls/s on a shared machine


def template(name: str, instance_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSMachineTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": {"spec": {"instanceType": instance_type, "ami": {"id": "ami-785db401"}}}},
    }


def example_text() -> str:
    """The README's quick start, its cluster ``demo`` renamed ``demo-md`` (every name derived from it too),
    so that this module's AWS resources are told apart by their cluster tag on the shared endpoint."""
    return re.sub(r"\bdemo\b", CLUSTER, EXAMPLE.read_text())


def manifests() -> list[dict[str, Any]]:
    """What a Cluster API user writes, the example as it is (Cluster API's kinds at v1beta1, still served and
    converted by core's webhook; capa-py's at v1beta2), in the test's own namespace."""
    documents = [d for d in yaml.safe_load_all(example_text()) if d]
    for document in documents:
        document["metadata"]["namespace"] = NAMESPACE
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, *documents]


@dataclass
class Management(UnderCore):
    inspector: MotoInspector
    aws_url: str
    nodes: set[str] = field(default_factory=set)
    most_machines: int = 0
    outcome: dict[str, Any] = field(default_factory=dict)

    def machines(self) -> list[dict[str, Any]]:
        machines = self.list(f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/machines")
        self.most_machines = max(self.most_machines, len(machines) - 1)  # the MachineDeployment's
        return machines

    def aws_machines(self) -> list[dict[str, Any]]:
        return self.list(f"/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/awsmachines")

    def register_nodes(self) -> None:
        """The kubelet stand-in: one Node per launched instance that is not being deleted, registered once
        (a kubelet registers its Node once; Cluster API deletes it when the Machine goes)."""
        for machine in self.aws_machines():
            provider_id = machine["spec"].get("providerID")
            if not provider_id or machine["metadata"].get("deletionTimestamp") or provider_id in self.nodes:
                continue
            register_node(self.workload, provider_id)
            self.nodes.add(provider_id)

    def workers(self, machines: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The MachineDeployment's Machines (of ``machines`` when given, else as now stored)."""
        return [
            m
            for m in (self.machines() if machines is None else machines)
            if m["metadata"].get("labels", {}).get("cluster.x-k8s.io/deployment-name") == DEPLOYMENT
        ]

    def running_machines(self, replicas: int) -> list[dict[str, Any]] | None:
        """The MachineDeployment's Machines once exactly ``replicas`` exist, none deleting, each ``Running``
        with the provider ID core copied (and the control-plane Machine too); None before. One read, so the
        Machines returned are the ones judged."""
        self.register_nodes()
        machines = self.machines()
        workers = self.workers(machines)
        settled = len(machines) == replicas + 1 and all(
            m.get("status", {}).get("phase") == "Running"
            and m["spec"].get("providerID")
            and not m["metadata"].get("deletionTimestamp")
            for m in machines
        )
        return workers if settled and len(workers) == replicas else None

    def instances(self) -> dict[str, str]:
        """``{instance id: instance type}`` of the cluster's live worker instances in AWS."""
        control_plane = self.cluster.request(
            f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/machines/{CONTROL_PLANE}"
        )
        ids = [
            i
            for i in self.inspector.inventory(tag_key=CLUSTER_TAG).tagged["instance"]
            if i != instance_id(control_plane)
        ]
        if not ids:
            return {}
        reservations = self.inspector.ec2.describe_instances(InstanceIds=ids)["Reservations"]
        return {i["InstanceId"]: i["InstanceType"] for r in reservations for i in r["Instances"]}

    def summary(self) -> dict[str, Any]:
        return outcome(self.machines(), self.inspector)

    def scale(self, replicas: int) -> None:
        self.kubectl.run(
            "scale", "-n", NAMESPACE, f"machinedeployment/{DEPLOYMENT}", f"--replicas={replicas}"
        )

    def state(self) -> str:
        """What the management cluster holds, for a failure's message."""
        return object_states(self.cluster, NAMESPACE, RESOURCES)

    def wait(self, condition: Callable[[], T | None], what: str, timeout: float = CONVERGE) -> T:
        """``condition()``'s first truthy value; on timeout fails with the cluster's state and both
        controllers' logs."""
        return eventually(
            condition,
            what,
            timeout=timeout,
            interval=0.5,
            detail=lambda: (
                f"{self.state()}\n--- capa-py\n{self.controller.report()}\n"
                f"--- Cluster API core\n{self.core.log_tail(40)}"
            ),
        )


def outcome(machines: list[dict[str, Any]], inspector: MotoInspector) -> dict[str, Any]:
    """What the example came to, comparable between stores: Machines by role, each one's instance type in
    AWS, and the cluster's AWS resources by type."""
    ids = [instance_id(m) for m in machines]
    reservations = inspector.ec2.describe_instances(InstanceIds=ids)["Reservations"] if ids else []
    types = {i["InstanceId"]: i["InstanceType"] for r in reservations for i in r["Instances"]}
    labels = [m["metadata"].get("labels", {}) for m in machines]
    return {
        "control-plane machines": sum("cluster.x-k8s.io/control-plane" in label for label in labels),
        "machine deployment's machines": sum(
            label.get("cluster.x-k8s.io/deployment-name") == DEPLOYMENT for label in labels
        ),
        "instance types": sorted(types[i] for i in ids),
        "aws resources": inspector.inventory(tag_key=CLUSTER_TAG).counts(),
    }


def instance_id(machine: dict[str, Any]) -> str:
    return str(machine["spec"]["providerID"]).rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def management(
    capi_cluster: CapiCore, aws: str, inspector: MotoInspector, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Management]:
    kubectl_binary()
    workdir = tmp_path_factory.mktemp("capi-e2e")
    cluster = capi_cluster.cluster
    install_crds(cluster, [model for model in custom_kinds() if is_infrastructure_kind(model)])
    kubectl = Kubectl(cluster.admin_kubeconfig, workdir / "kubectl-home")
    with running(directory=workdir / "workload", controller_manager=False) as workload:
        flags = ("--core-controllers", "off", "--providers", "aws")
        with running_controller("controller", cluster.admin_kubeconfig, aws, workdir, *flags) as controller:
            yield Management(capi_cluster, workload, kubectl, workdir, controller, inspector, aws)


@pytest.fixture(scope="module")
def converged(management: Management) -> list[dict[str, Any]]:
    """The user's manifests applied with kubectl, the workload kubeconfig Secret beside them, and the
    MachineDeployment's two Machines Running."""
    apply_cluster(
        management.kubectl,
        management.cluster,
        management.workload,
        management.workdir / "cluster.yaml",
        manifests(),
    )
    machines = management.wait(lambda: management.running_machines(2), "two Running Machines")
    management.outcome = management.summary()
    return list(machines)


def test_a_machine_deployment_of_aws_machine_templates_converges_under_cluster_api_core(
    management: Management, converged: list[dict[str, Any]]
) -> None:
    def initialized() -> dict[str, Any] | None:
        path = f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/clusters/{CLUSTER}"
        cluster: dict[str, Any] = management.cluster.request(path)
        conditions = {c["type"]: c["status"] for c in cluster["status"].get("conditions", [])}
        return cluster if conditions.get("ControlPlaneInitialized") == "True" else None

    # The control-plane Machine's Node registered: core reads the workload cluster (the kubeconfig Secret). A
    # Cluster without a control-plane provider gets the condition only, not status.initialization's field.
    cluster = management.wait(initialized, "the control plane initialized")
    assert cluster["status"]["initialization"]["infrastructureProvisioned"] is True
    assert cluster["spec"]["controlPlaneEndpoint"]["host"], "core copied the load balancer's address"
    # Each Machine's AWSMachine is core's clone of the template, and capa-py launched it.
    clones = {m["metadata"]["name"]: m for m in management.aws_machines()}
    for machine in converged:
        clone = clones[machine["spec"]["infrastructureRef"]["name"]]
        annotations = clone["metadata"]["annotations"]
        assert annotations["cluster.x-k8s.io/cloned-from-name"] == f"{DEPLOYMENT}-a"
        assert (
            annotations["cluster.x-k8s.io/cloned-from-groupkind"]
            == "AWSMachineTemplate.infrastructure.cluster.x-k8s.io"
        )
        assert [o["kind"] for o in clone["metadata"]["ownerReferences"]] == ["Machine"]
        assert clone["status"]["initialization"]["provisioned"] is True
        assert machine["spec"]["providerID"] == clone["spec"]["providerID"]
        assert machine["status"]["nodeRef"]["name"] == f"node-{instance_id(machine)}"
    assert management.instances() == {instance_id(m): "t3.medium" for m in converged}
    # kubectl prints the MachineDeployment with Cluster API's columns, and capa-py's kinds with CAPA's.
    printed = management.kubectl.run("get", "machinedeployments", "-n", NAMESPACE).stdout
    print(printed)
    printed = management.kubectl.run("get", "awsm", "-n", NAMESPACE).stdout.splitlines()
    assert printed[0].split()[:4] == ["NAME", "CLUSTER", "STATE", "READY"], printed
    assert len(printed) == 4, printed  # the control plane's and two workers'
    assert all("running" in line and "true" in line for line in printed[1:]), printed


def test_scaling_the_machine_deployment_launches_and_terminates_instances(
    management: Management, converged: list[dict[str, Any]]
) -> None:
    management.scale(3)
    three = management.wait(lambda: management.running_machines(3), "three Running Machines")
    assert management.instances() == {instance_id(m): "t3.medium" for m in three}
    management.scale(1)
    one = management.wait(lambda: management.running_machines(1), "one Running Machine")
    management.wait(lambda: set(management.instances()) == {instance_id(one[0])}, "two instances terminated")


def test_a_new_template_rolls_the_machines_within_max_surge(
    management: Management, converged: list[dict[str, Any]]
) -> None:
    before = management.wait(lambda: management.running_machines(1), "one Running Machine")
    path = management.workdir / "template-b.yaml"
    path.write_text(yaml.safe_dump(template(f"{DEPLOYMENT}-b", "t3.large")))
    management.kubectl.run("apply", "-f", str(path))
    management.most_machines = 0
    patch = {"spec": {"template": {"spec": {"infrastructureRef": {"name": f"{DEPLOYMENT}-b"}}}}}
    management.kubectl.run(
        "patch", "-n", NAMESPACE, f"machinedeployment.v1beta1.cluster.x-k8s.io/{DEPLOYMENT}", "--type=merge",
        "-p", json.dumps(patch),
    )  # fmt: skip

    def rolled() -> list[dict[str, Any]] | None:
        machines = management.running_machines(1)
        if machines and machines[0]["metadata"]["name"] != before[0]["metadata"]["name"]:
            return machines
        return None

    after = management.wait(rolled, "the Machine replaced from the new template")
    # RollingUpdate with Cluster API's defaults (maxSurge 1, maxUnavailable 0): a new Machine first, at most
    # replicas + 1 at any time.
    assert management.most_machines <= 2
    clone = next(
        m
        for m in management.aws_machines()
        if m["metadata"]["name"] == after[0]["spec"]["infrastructureRef"]["name"]
    )
    assert clone["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == f"{DEPLOYMENT}-b"
    management.wait(
        lambda: management.instances() == {instance_id(after[0]): "t3.large"}, "the old instance terminated"
    )


def _paused(obj: dict[str, Any]) -> tuple[str, int | None] | None:
    """``(status, observedGeneration)`` of an object's v1beta2 ``Paused`` condition (core's kinds at v1beta2
    keep it in ``status.conditions``, capa-py's in ``status.v1beta2.conditions``); None without one."""
    status = obj.get("status", {})
    conditions = (status.get("v1beta2") or {}).get("conditions") or status.get("conditions") or []
    found = next((c for c in conditions if c["type"] == "Paused"), None)
    return (found["status"], found.get("observedGeneration")) if found else None


def test_a_paused_cluster_is_left_alone_by_core_and_by_capa_py(
    management: Management, converged: list[dict[str, Any]]
) -> None:
    """``spec.paused`` on the Cluster: core stops acting on the MachineDeployment (a scale to 2 makes no
    Machine) and capa-py on the AWSCluster (new additionalTags reach no VPC) — each reports the edit it saw
    through its ``Paused`` condition's observedGeneration, which is what makes the absence of a change an
    observation. Unpaused, both catch up."""
    [worker] = management.wait(lambda: management.running_machines(1), "one Running Machine")
    instances = management.instances()
    base = f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}"
    infra = f"/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}"

    def cluster_paused(paused: bool) -> None:
        management.kubectl.run(
            "patch", "-n", NAMESPACE, f"cluster.v1beta1.cluster.x-k8s.io/{CLUSTER}", "--type=merge",
            "-p", json.dumps({"spec": {"paused": paused}}),
        )  # fmt: skip

    def reported(path: str, status: str) -> dict[str, Any] | None:
        """The object once its Paused condition has ``status`` for its current generation."""
        obj: dict[str, Any] = management.cluster.request(path)
        return obj if _paused(obj) == (status, obj["metadata"]["generation"]) else None

    cluster_paused(True)
    try:
        management.wait(
            lambda: reported(f"{base}/clusters/{CLUSTER}", "True"), "core reporting the Cluster paused"
        )
        management.scale(2)
        tags = {"spec": {"additionalTags": {"paused-edit": "applied"}}}
        management.kubectl.run(
            "patch", "-n", NAMESPACE, f"awscluster/{CLUSTER}", "--type=merge", "-p", json.dumps(tags)
        )
        deployment = management.wait(
            lambda: reported(f"{base}/machinedeployments/{DEPLOYMENT}", "True"),
            "core reporting the scale paused",
        )
        aws_cluster = management.wait(
            lambda: reported(f"{infra}/awsclusters/{CLUSTER}", "True"), "capa-py reporting the edit paused"
        )
        assert deployment["spec"]["replicas"] == 2
        assert [m["metadata"]["name"] for m in management.workers()] == [worker["metadata"]["name"]]
        assert management.instances() == instances
        vpc = aws_cluster["status"]["network"]["vpcId"]

        def vpc_tags() -> dict[str, str]:
            [found] = management.inspector.ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"]
            return {t["Key"]: t["Value"] for t in found.get("Tags", [])}

        assert "paused-edit" not in vpc_tags()
        for machine in management.aws_machines():
            paused = _paused(machine)
            assert paused is not None, machine["metadata"]["name"]
            assert paused[0] == "True", machine["metadata"]["name"]

    finally:
        cluster_paused(False)
    management.wait(lambda: management.running_machines(2), "two Running Machines after the unpause")
    management.wait(lambda: vpc_tags().get("paused-edit") == "applied", "the new tag on the VPC")
    management.wait(lambda: reported(f"{infra}/awsclusters/{CLUSTER}", "False"), "the AWSCluster unpaused")
    management.scale(1)
    management.wait(lambda: management.running_machines(1), "one Running Machine")


def test_deleting_the_cluster_removes_every_machine_and_aws_resource(
    management: Management, converged: list[dict[str, Any]]
) -> None:
    management.kubectl.run(
        "delete", "cluster.v1beta1.cluster.x-k8s.io", CLUSTER, "-n", NAMESPACE, "--wait=false"
    )
    management.wait(
        lambda: not management.list(f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/clusters"),
        "the Cluster gone",
    )
    assert management.machines() == []
    assert management.aws_machines() == []
    left = {
        kind: ids for kind, ids in management.inspector.inventory(tag_key=CLUSTER_TAG).tagged.items() if ids
    }
    assert left == {}
    report = capa(
        "--kubeconfig", str(management.cluster.admin_kubeconfig),
        "audit", "--aws-endpoint", management.aws_url, home=management.workdir / "audit-home",
    )  # fmt: skip
    assert "No leaks found" in report, report


def test_the_same_example_on_the_embedded_store_comes_to_what_cluster_api_core_made(
    management: Management, converged: list[dict[str, Any]]
) -> None:
    """The example applied with ``capa apply`` (capa-py's embedded core: its MachineDeployment and MachineSet
    controllers clone the template) makes the same Machines, instances and AWS resources as under upstream
    Cluster API core. Runs after the cluster under core is deleted (same names, same AWS account). The
    phases differ by design: the embedded core has no workload cluster whose Nodes would make a Machine
    ``Running``, so its Machines stay ``Provisioned``, as core's do until their Nodes register."""
    assert management.list(f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/clusters") == []
    home = management.workdir / "embedded-home"
    state = ["--state", str(management.workdir / "embedded.db")]
    example = management.workdir / "embedded.yaml"
    example.write_text(example_text())
    capa(*state, "apply", "-f", str(example), "--aws-endpoint", management.aws_url, home=home)
    listed = json.loads(capa(*state, "get", "machines", "-o", "json", home=home))
    machines = listed["items"]
    assert {m["status"]["phase"] for m in machines} == {"Provisioned"}
    assert outcome(machines, management.inspector) == management.outcome
    capa(*state, "delete", "-f", str(example), "--aws-endpoint", management.aws_url, "--wait", home=home)
    left = {
        kind: ids for kind, ids in management.inspector.inventory(tag_key=CLUSTER_TAG).tagged.items() if ids
    }
    assert left == {}
