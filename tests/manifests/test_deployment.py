"""`capa manifests deployment`: the controller Deployment, its metrics Service, the image's Dockerfile."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py import __version__
from capa_py.manifests.crds import TINKERBELL_LABELS
from capa_py.manifests.deployment import CREDENTIALS_SECRET, RUN_AS
from capa_py.manifests.rbac import NAMESPACE, SERVICE_ACCOUNT
from tests.cli.cli_support import Cli

ROOT = Path(__file__).resolve().parents[2]
PROVIDER_LABEL = ("cluster.x-k8s.io/provider", "infrastructure-capa-py")


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def _by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each document by kind; of the two Services, the metrics one is ``Service``."""
    return {doc["kind"]: doc for doc in docs if doc["metadata"]["name"] != "capa-py-webhook-service"}


@pytest.fixture
def printed(cli: Cli) -> dict[str, dict[str, Any]]:
    result = cli("manifests", "deployment")
    assert result.exit_code == 0, result
    docs = _docs(result.stdout)
    assert [f"{d['kind']}/{d['metadata']['name']}" for d in docs] == [
        "Namespace/capa-py-system",
        "Deployment/capa-py-controller-manager",
        "Service/capa-py-controller-manager-metrics",
        "Issuer/capa-py-selfsigned-issuer",
        "Certificate/capa-py-serving-cert",
        "Service/capa-py-webhook-service",
        "ValidatingWebhookConfiguration/capa-py-validating-webhook-configuration",
    ]
    return _by_kind(docs)


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_deployment_runs_two_leader_electing_controllers_against_the_cluster(
    printed: dict[str, dict[str, Any]],
) -> None:
    deployment = printed["Deployment"]
    assert deployment["apiVersion"] == "apps/v1"
    assert deployment["metadata"]["name"] == "capa-py-controller-manager"
    assert deployment["metadata"]["namespace"] == NAMESPACE == printed["Namespace"]["metadata"]["name"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    container = _container(deployment)
    assert container["image"] == f"ghcr.io/capa-py/capa-py:{__version__}"
    assert container["args"] == [
        "--store",
        "kube",
        "controller",
        "--leader-elect",
        "--metrics-bind-address=:8080",
        "--health-probe-bind-address=:8081",
        "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
        "--webhook-bind-address=:9443",
    ]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "healthz": 8081, "webhook-server": 9443}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz"}


def test_pod_is_locked_down_with_a_writable_tmp(printed: dict[str, dict[str, Any]]) -> None:
    pod = printed["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == RUN_AS != 0
    container = _container(printed["Deployment"])
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    mount, certificate_mount, credentials_mount = container["volumeMounts"]
    assert mount["mountPath"] == "/tmp"
    volume, certificate_volume, credentials_volume = pod["volumes"]
    assert volume == {"name": mount["name"], "emptyDir": {}}
    # The other mounts are read-only: the AWS credentials, and the webhook certificate inside /tmp.
    assert credentials_mount["readOnly"] is True
    assert credentials_volume["name"] == credentials_mount["name"]
    assert certificate_mount["readOnly"] is True
    assert certificate_mount["mountPath"].startswith("/tmp/")
    assert certificate_volume["name"] == certificate_mount["name"]
    assert set(certificate_volume) == {"name", "secret"}


def test_aws_credentials_come_from_the_bootstrap_secret_only(printed: dict[str, dict[str, Any]]) -> None:
    """The Secret is not printed (it holds credentials), so every reference to it is optional: before, the
    Deployment named a Secret nothing created, and its pods could not start until someone did."""
    container = _container(printed["Deployment"])
    assert CREDENTIALS_SECRET == "capa-py-manager-bootstrap-credentials"
    assert "Secret" not in printed
    from_secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert set(from_secret) == {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
    }
    for name, ref in from_secret.items():
        assert ref == {"name": CREDENTIALS_SECRET, "key": name, "optional": True}
    assert "envFrom" not in container
    pod = printed["Deployment"]["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == CREDENTIALS_SECRET]
    assert volume["secret"]["optional"] is True
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    files = {e["name"]: e.get("value") for e in container["env"] if "value" in e}
    assert (
        files["AWS_SHARED_CREDENTIALS_FILE"]
        == files["AWS_CONFIG_FILE"]
        == f"{mount['mountPath']}/credentials"
    )
    # No credential is written into the manifest itself.
    assert "aws_secret_access_key" not in json.dumps(printed)


def test_metrics_service_selects_the_controller_pods(printed: dict[str, dict[str, Any]]) -> None:
    service, deployment = printed["Service"], printed["Deployment"]
    assert service["metadata"]["namespace"] == NAMESPACE
    selector = service["spec"]["selector"]
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    [port] = service["spec"]["ports"]
    assert port["port"] == 8080
    assert port["targetPort"] == "metrics"


def test_image_is_overridable(cli: Cli) -> None:
    result = cli("manifests", "all", "--image", "registry.example.com/capa-py:dev")
    assert result.exit_code == 0, result
    [deployment] = [d for d in _docs(result.stdout) if d["kind"] == "Deployment"]
    assert _container(deployment)["image"] == "registry.example.com/capa-py:dev"
    bad = cli("manifests", "deployment", "--image", "not an image")
    assert bad.exit_code == 2, bad
    assert bad.stdout == ""


def test_every_document_of_all_carries_the_provider_label(cli: Cli) -> None:
    """clusterctl finds a provider's components by ``cluster.x-k8s.io/provider``; the Tinkerbell CRDs are
    not Cluster API's and carry capa-py's own labels instead, and the CRDs of the kinds no infrastructure
    provider owns (Cluster API core's Cluster, Machine, MachineDeployment, MachineSet and MachinePool,
    capa-py's ClusterConfig) carry none."""
    docs = _docs(cli("manifests", "all").stdout)
    key, value = PROVIDER_LABEL
    tinkerbell = [d for d in docs if d["metadata"]["name"].endswith(".tinkerbell.org")]
    assert len(tinkerbell) == 4
    for crd in tinkerbell:
        assert crd["metadata"]["labels"] == TINKERBELL_LABELS
    unlabelled = [
        f"{d['kind']}/{d['metadata']['name']}"
        for d in docs
        if d["metadata"]["labels"].get(key) != value and d not in tinkerbell
    ]
    unlabelled = [
        name
        for name in unlabelled
        if name
        not in (
            "CustomResourceDefinition/clusterconfigs.capa-py.io",
            "CustomResourceDefinition/clusters.cluster.x-k8s.io",
            "CustomResourceDefinition/machines.cluster.x-k8s.io",
            "CustomResourceDefinition/machinedeployments.cluster.x-k8s.io",
            "CustomResourceDefinition/machinesets.cluster.x-k8s.io",
            "CustomResourceDefinition/machinepools.cluster.x-k8s.io",
        )
    ]
    assert unlabelled == []
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["metadata"]["labels"][key] == value


def test_deployment_args_are_a_command_line_capa_accepts(
    cli: Cli, printed: dict[str, dict[str, Any]]
) -> None:
    """The container's exact arguments parse: global options before ``controller``, its flags after."""
    args = _container(printed["Deployment"])["args"]
    result = cli(*args, "--help")
    assert result.exit_code == 0, f"capa {' '.join(args)} does not parse:\n{result}"
    assert "Run every controller against the store" in result.stdout


def test_dockerfile_builds_a_non_root_capa_image() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    [base] = [line for line in lines if line.startswith("FROM ")]
    assert re.fullmatch(r"FROM python:3\.1[12]-slim", base), base
    assert any(re.search(r"\bpip install \.(\s|$)", line) for line in lines), "the image installs the project"
    [user] = [line for line in lines if line.startswith("USER ")]
    assert user == f"USER {RUN_AS}:{RUN_AS}", "a numeric non-root user, so runAsNonRoot can verify it"
    assert 'ENTRYPOINT ["capa"]' in lines
    # Every package the distribution ships is copied into the build.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert f"COPY {package} ./{package}" in lines, f"the Dockerfile does not copy {package}"
