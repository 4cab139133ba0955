"""The components the lifecycle workflows apply to a cluster that is not the bootstrap cluster: capa-py's
own (Namespace, its CRDs, RBAC, the controller Deployment without a webhook server, the metrics Service)
and each provider's, checked as documents and applied by an unmodified kubectl to a ``capa serve``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.clusterconfig import TinkerbellComponentsSpec
from capa_py.manifests import render
from capa_py.manifests.components import TINKERBELL_SERVICE, core_components, provider_components
from capa_py.manifests.rbac import NAMESPACE
from tests.cli.served import capa_serve

CORE_CRDS = {
    "clusters.cluster.x-k8s.io",
    "machines.cluster.x-k8s.io",
    "machinedeployments.cluster.x-k8s.io",
    "machinesets.cluster.x-k8s.io",
    "machinepools.cluster.x-k8s.io",
    "clusterconfigs.capa-py.io",
}
AWS_CRDS = {
    "awsclusters.infrastructure.cluster.x-k8s.io",
    "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
    "awsclusterroleidentities.infrastructure.cluster.x-k8s.io",
    "awsclusterstaticidentities.infrastructure.cluster.x-k8s.io",
    "awsclustertemplates.infrastructure.cluster.x-k8s.io",
    "awsmachinepools.infrastructure.cluster.x-k8s.io",
    "awsmachines.infrastructure.cluster.x-k8s.io",
    "awsmachinetemplates.infrastructure.cluster.x-k8s.io",
}
TINKERBELL_CRDS = {
    "tinkerbellclusters.infrastructure.cluster.x-k8s.io",
    "tinkerbellmachines.infrastructure.cluster.x-k8s.io",
    "tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io",
    "hardware.tinkerbell.org",
    "osies.tinkerbell.org",
    "templates.tinkerbell.org",
    "workflows.tinkerbell.org",
}


def of_kind(docs: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def crd_names(docs: Sequence[dict[str, Any]]) -> set[str]:
    return {d["metadata"]["name"] for d in of_kind(docs, "CustomResourceDefinition")}


def container(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = of_kind(docs, "Deployment")
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(only, dict)
    return only


def test_core_components_for_aws() -> None:
    docs = core_components(["aws"])
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": docs[0]["metadata"]}
    assert docs[0]["metadata"]["name"] == NAMESPACE
    assert crd_names(docs) == CORE_CRDS, "core installs only the CRDs no provider owns"
    kinds = [d["kind"] for d in docs]
    assert kinds.index("CustomResourceDefinition") < kinds.index("Deployment"), "CRDs before their users"
    for rbac_kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        assert of_kind(docs, rbac_kind), f"no {rbac_kind} among the core components"
    manager = container(docs)
    assert "--providers=aws" in manager["args"]
    assert not [a for a in manager["args"] if "webhook" in a], "the webhook server needs cert-manager"
    assert not [a for a in manager["args"] if a.startswith(("--tink", "--hegel"))]
    assert {p["name"] for p in manager["ports"]} == {"metrics", "healthz"}
    (deployment,) = of_kind(docs, "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert [v["name"] for v in volumes] == ["tmp", "aws-credentials"], "no webhook certificate volume"
    assert [m["name"] for m in manager["volumeMounts"]] == ["tmp", "aws-credentials"]
    services = of_kind(docs, "Service")
    assert [s["metadata"]["name"] for s in services] == ["capa-py-controller-manager-metrics"]
    assert [p["targetPort"] for p in services[0]["spec"]["ports"]] == ["metrics"]
    assert all(d["metadata"].get("namespace") in (None, NAMESPACE) for d in docs)


def test_core_components_for_tinkerbell_add_the_services_flags_and_ports() -> None:
    manager = container(core_components(["tinkerbell"]))
    assert manager["args"][-5:] == [
        "--providers=tinkerbell",
        "--tink-server-port=42113",
        "--tink-server-bind=0.0.0.0",
        "--hegel-port=50061",
        "--hegel-bind=0.0.0.0",
    ]
    ports = {p["name"]: p["containerPort"] for p in manager["ports"]}
    assert ports == {"metrics": 8080, "healthz": 8081, "tink-server": 42113, "hegel": 50061}

    custom = TinkerbellComponentsSpec(server_port=43000, hegel_port=43001)
    manager = container(core_components(["aws", "tinkerbell"], custom, image="example.test/capa:dev"))
    assert manager["image"] == "example.test/capa:dev"
    assert "--providers=aws,tinkerbell" in manager["args"]
    assert {"--tink-server-port=43000", "--hegel-port=43001"} <= set(manager["args"])
    assert {p["name"]: p["containerPort"] for p in manager["ports"]}["hegel"] == 43001


def test_provider_components_of_aws_are_its_crds() -> None:
    docs = provider_components("aws")
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition"] * len(AWS_CRDS)
    assert crd_names(docs) == AWS_CRDS


@pytest.mark.parametrize(
    ("settings", "server_port", "hegel_port"),
    [(None, 42113, 50061), (TinkerbellComponentsSpec(server_port=43000, hegel_port=43001), 43000, 43001)],
    ids=["default-ports", "custom-ports"],
)
def test_provider_components_of_tinkerbell(
    settings: TinkerbellComponentsSpec | None, server_port: int, hegel_port: int
) -> None:
    docs = provider_components("tinkerbell", settings)
    assert crd_names(docs) == TINKERBELL_CRDS
    (service,) = of_kind(docs, "Service")
    assert service["metadata"]["name"] == TINKERBELL_SERVICE
    assert service["metadata"]["namespace"] == NAMESPACE
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"tink-server": (server_port, "tink-server"), "hegel": (hegel_port, "hegel")}
    # The Service reaches the controller pods on the ports the core Deployment names.
    core = core_components(["tinkerbell"], settings)
    (deployment,) = of_kind(core, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    named = {p["name"]: p["containerPort"] for p in container(core)["ports"]}
    assert named["tink-server"] == server_port
    assert named["hegel"] == hegel_port


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_applies_the_rendered_components(tmp_path: Path) -> None:
    """kubectl's client-side dry run still asks a server for its API groups, so the documents are applied
    for real to a ``capa serve``; a second apply changes nothing."""
    settings = TinkerbellComponentsSpec(server_port=43000, hegel_port=43001)
    docs = [
        *core_components(["aws", "tinkerbell"], settings),
        *provider_components("aws"),
        *provider_components("tinkerbell", settings),
    ]
    manifest = tmp_path / "components.yaml"
    manifest.write_text(render(docs), encoding="utf-8")
    with capa_serve(tmp_path) as kubeconfig:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

        def kubectl(*args: str) -> str:
            done = subprocess.run(
                ["kubectl", *args], env=env, capture_output=True, text=True, timeout=60, check=False
            )
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
            return done.stdout

        first = kubectl("apply", "-f", str(manifest)).splitlines()
        assert len(first) == len(docs)
        assert all(line.endswith(" created") for line in first), first
        again = kubectl("apply", "-f", str(manifest)).splitlines()
        assert all(line.endswith(" unchanged") for line in again), again
        stored = kubectl("get", "crd", "-o", "name").split()
        expected = CORE_CRDS | AWS_CRDS | TINKERBELL_CRDS
        assert expected <= {s.removeprefix("customresourcedefinition.apiextensions.k8s.io/") for s in stored}
        ports = kubectl(
            "get", "service", TINKERBELL_SERVICE, "-n", NAMESPACE, "-o", "jsonpath={.spec.ports[*].port}"
        )
        assert ports.split() == ["43000", "43001"]
