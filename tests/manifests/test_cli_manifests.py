"""``capa manifests``: the documents it prints, their formats, and kubectl reading them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.manifests.crds import crds
from capa_py.manifests.rbac import CLUSTER_ROLE, NAMESPACE, SERVICE_ACCOUNT
from tests.cli.cli_support import Cli
from tests.manifests.discovery_stub import CERT_MANAGER_CRDS, discovery_stub

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def _kinds(docs: list[dict[str, Any]]) -> list[str]:
    return [f"{d['kind']}/{d['metadata']['name']}" for d in docs]


def test_all_is_every_document_namespace_and_crds_first(cli: Cli) -> None:
    result = cli("manifests", "all")
    assert result.exit_code == 0, result
    kinds = _kinds(_docs(result.stdout))
    assert kinds == [
        "Namespace/capa-py-system",
        "CustomResourceDefinition/clusterconfigs.capa-py.io",
        "CustomResourceDefinition/clusters.cluster.x-k8s.io",
        "CustomResourceDefinition/machinedeployments.cluster.x-k8s.io",
        "CustomResourceDefinition/machinepools.cluster.x-k8s.io",
        "CustomResourceDefinition/machines.cluster.x-k8s.io",
        "CustomResourceDefinition/machinesets.cluster.x-k8s.io",
        "CustomResourceDefinition/awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/awsclusterroleidentities.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/awsclusters.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/awsclusterstaticidentities.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/awsclustertemplates.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/awsmachinepools.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/awsmachines.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/awsmachinetemplates.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/tinkerbellclusters.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/tinkerbellmachines.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io",
        "CustomResourceDefinition/hardware.tinkerbell.org",
        "CustomResourceDefinition/osies.tinkerbell.org",
        "CustomResourceDefinition/templates.tinkerbell.org",
        "CustomResourceDefinition/workflows.tinkerbell.org",
        "ServiceAccount/capa-py-controller-manager",
        f"ClusterRole/{CLUSTER_ROLE}",
        "ClusterRoleBinding/capa-py-manager-rolebinding",
        "Deployment/capa-py-controller-manager",
        "Service/capa-py-controller-manager-metrics",
        "Issuer/capa-py-selfsigned-issuer",
        "Certificate/capa-py-serving-cert",
        "Service/capa-py-webhook-service",
        "ValidatingWebhookConfiguration/capa-py-validating-webhook-configuration",
    ]
    parts = {what: _kinds(_docs(cli("manifests", what).stdout)) for what in ("crds", "rbac", "deployment")}
    assert sorted(set(kinds)) == sorted(set(parts["crds"] + parts["rbac"] + parts["deployment"]))


def test_json_output_is_a_list_of_the_same_documents(cli: Cli) -> None:
    as_yaml = _docs(cli("manifests", "rbac").stdout)
    result = cli("manifests", "rbac", "-o", "json")
    assert result.exit_code == 0, result
    listed = json.loads(result.stdout)
    assert listed["kind"] == "List"
    assert listed["items"] == as_yaml


@pytest.mark.parametrize("args", [("bogus",), ("crds", "-o", "table"), ("deployment", "--image", "")])
def test_bad_selection_or_format_is_invalid_input(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli("manifests", *args)
    assert result.exit_code == 2, result
    assert result.stdout == ""


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_apply_client_dry_run_accepts_all(cli: Cli, tmp_path: Path) -> None:
    """kubectl's client dry run still needs discovery (a server), so it talks to a stub with no objects;
    ``--validate=false`` because the stub serves no OpenAPI document for kubectl's schema check."""
    stream = cli("manifests", "all").stdout
    (tmp_path / "no-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    # cert-manager is installed before capa-py's components (clusterctl does it), so its kinds are served.
    with discovery_stub(CERT_MANAGER_CRDS) as (url, requests):
        run = subprocess.run(
            [
                "kubectl",
                "apply",
                "--dry-run=client",
                "--validate=false",
                "-f",
                "-",
                "--server",
                url,
                "--cache-dir",
                str(tmp_path / "cache"),
                "--kubeconfig",
                str(tmp_path / "no-kubeconfig"),
            ],
            input=stream,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert run.returncode == 0, run.stderr
    created = run.stdout.splitlines()
    assert len(created) == len(_docs(stream)), run.stdout
    assert all(line.endswith("created (dry run)") for line in created), run.stdout
    crd = "customresourcedefinition.apiextensions.k8s.io/awsclusters.infrastructure.cluster.x-k8s.io"
    assert f"{crd} created (dry run)" in created
    assert f"GET /api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}" in requests


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_kubectl_maps_every_example_through_the_generated_crds(tmp_path: Path, example: Path) -> None:
    """With the CRDs installed (their names served by discovery), kubectl resolves every document of the
    examples: group, version, kind, plural and scope of the CRDs are what the manifests use."""
    (tmp_path / "no-kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    with discovery_stub(crds()) as (url, requests):
        run = subprocess.run(
            [
                *("kubectl", "apply", "--dry-run=client", "--validate=false", "-f", str(example)),
                *("--server", url, "--cache-dir", str(tmp_path / "cache")),
                *("--kubeconfig", str(tmp_path / "no-kubeconfig")),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert run.returncode == 0, run.stderr
    docs = _docs(example.read_text())
    assert len(run.stdout.splitlines()) == len(docs), run.stdout
    awsclusters = [d for d in docs if d["kind"] == "AWSCluster"]
    for doc in awsclusters:
        path = f"/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{doc['metadata']['namespace']}"
        assert f"GET {path}/awsclusters/{doc['metadata']['name']}" in requests
