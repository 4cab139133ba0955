"""``capa manifests deployment|all``: the validating webhooks' registration, Service and certificate.

What the API server is told (the ValidatingWebhookConfiguration) must match what the controller serves
(:func:`capa_py.webhooks.build_app`), and the certificate cert-manager makes must reach the directory the
controller is told to read.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.admission_kinds import Certificate, Issuer
from capa_py.manifests import documents
from capa_py.manifests.crds import crds, custom_kinds
from capa_py.runtime.endpoints import parse_bind_address
from capa_py.webhooks import DEFAULT_CERT_DIR, build_app, validate_path, validated_kinds
from tests.cli.cli_support import Cli
from tests.webhooks.certificates import write_certificate


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


@pytest.fixture(params=["deployment", "all"])
def docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return documents(request.param)


def _flag(args: list[str], name: str) -> str:
    [value] = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return value


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [container] = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def test_every_registered_webhook_path_is_served_and_every_provider_kind_has_one(
    docs: list[dict[str, Any]],
) -> None:
    configuration = _one(docs, "ValidatingWebhookConfiguration")
    served = {
        (route.method, route.resource.canonical) for route in build_app().router.routes() if route.resource
    }
    webhooks = configuration["webhooks"]
    for webhook in webhooks:
        path = webhook["clientConfig"]["service"]["path"]
        assert ("POST", path) in served, (
            f"{webhook['name']} calls {path}, which the controller does not serve"
        )

    kinds = custom_kinds()
    assert {k.KIND for k in kinds} == {
        "Cluster",
        "Machine",
        "MachineDeployment",
        "MachineSet",
        "MachinePool",
        "AWSCluster",
        "AWSMachine",
        "AWSMachinePool",
        "AWSClusterTemplate",
        "AWSMachineTemplate",
        "AWSClusterControllerIdentity",
        "AWSClusterStaticIdentity",
        "AWSClusterRoleIdentity",
        "Hardware",
        "OSIE",
        "Template",
        "Workflow",
        "TinkerbellCluster",
        "TinkerbellMachine",
        "TinkerbellMachineTemplate",
        "ClusterConfig",
    }
    expected = {}
    # Cluster API core's kinds are left to Cluster API's own webhooks where it is installed.
    for model in [
        k
        for k in kinds
        if k.KIND not in ("Cluster", "Machine", "MachineDeployment", "MachineSet", "MachinePool")
    ]:
        group, version = model.API_VERSION.rsplit("/", 1)
        expected[f"validation.{model.KIND.lower()}.{group}"] = (
            group,
            version,
            model.PLURAL,
            validate_path(model),
        )
    registered = {}
    for webhook in webhooks:
        [rule] = webhook["rules"]
        [group], [version], [plural] = rule["apiGroups"], rule["apiVersions"], rule["resources"]
        registered[webhook["name"]] = (group, version, plural, webhook["clientConfig"]["service"]["path"])
        assert rule["operations"] == ["CREATE", "UPDATE"]
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["sideEffects"] == "None"
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["matchPolicy"] == "Equivalent"
    assert registered == expected
    assert registered["validation.awscluster.infrastructure.cluster.x-k8s.io"][3] == (
        "/validate-infrastructure-cluster-x-k8s-io-v1beta2-awscluster"
    )


def test_webhooks_reach_the_controller_pods_through_the_service(docs: list[dict[str, Any]]) -> None:
    configuration = _one(docs, "ValidatingWebhookConfiguration")
    service = _one(docs, "Service", "capa-py-webhook-service")
    deployment = _one(docs, "Deployment")
    for webhook in configuration["webhooks"]:
        target = webhook["clientConfig"]["service"]
        assert (target["name"], target["namespace"]) == (
            service["metadata"]["name"],
            service["metadata"]["namespace"],
        )
        assert target["port"] == 443
    [port] = service["spec"]["ports"]
    assert port["port"] == 443
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    container = _container(docs)
    [container_port] = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    bind = parse_bind_address(_flag(container["args"], "--webhook-bind-address"))
    assert bind is not None
    assert bind.host == "0.0.0.0", "every interface: the Service reaches the pod's IP"
    assert container_port["containerPort"] == bind.port == 9443


def test_cert_managers_certificate_is_the_secret_the_controller_reads(docs: list[dict[str, Any]]) -> None:
    issuer = _one(docs, "Issuer")
    certificate = _one(docs, "Certificate")
    configuration = _one(docs, "ValidatingWebhookConfiguration")
    service = _one(docs, "Service", "capa-py-webhook-service")
    assert issuer["apiVersion"] == certificate["apiVersion"] == "cert-manager.io/v1"
    assert issuer["metadata"]["name"] == "capa-py-selfsigned-issuer"
    assert issuer["spec"] == {"selfSigned": {}}
    namespace = service["metadata"]["namespace"]
    assert issuer["metadata"]["namespace"] == certificate["metadata"]["namespace"] == namespace
    spec = certificate["spec"]
    assert spec["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
    assert spec["dnsNames"] == [
        "capa-py-webhook-service.capa-py-system.svc",
        "capa-py-webhook-service.capa-py-system.svc.cluster.local",
    ]
    assert spec["secretName"] == "capa-py-webhook-service-cert"
    # cert-manager's CA injector fills every webhook's caBundle from this Certificate.
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{namespace}/{certificate['metadata']['name']}"
    }

    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    container = _container(docs)
    cert_dir = _flag(container["args"], "--webhook-cert-dir")
    assert cert_dir == str(DEFAULT_CERT_DIR)
    [volume] = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == spec["secretName"]]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": cert_dir, "readOnly": True}
    # It sits inside the writable /tmp emptyDir, listed after it so it is mounted on top of it.
    names = [m["mountPath"] for m in container["volumeMounts"]]
    assert names.index("/tmp") < names.index(cert_dir)


def test_cert_manager_kinds_get_no_crd_and_no_webhook_of_capa_py() -> None:
    """cert-manager installs its own CRDs; capa serve stores its kinds only to take the components file."""
    names = [crd["metadata"]["name"] for crd in crds()]
    assert "issuers.cert-manager.io" not in names
    assert "certificates.cert-manager.io" not in names
    assert Issuer not in validated_kinds()
    assert Certificate not in validated_kinds()


def test_crds_alone_carry_no_webhook_documents() -> None:
    kinds = {doc["kind"] for doc in documents("crds")} | {doc["kind"] for doc in documents("rbac")}
    assert not kinds & {"ValidatingWebhookConfiguration", "Issuer", "Certificate"}


def test_without_core_leaves_cluster_api_cores_crds_out_and_keeps_the_providers(cli: Cli) -> None:
    printed = cli("manifests", "all", "--without-core", "-o", "json")
    assert printed.exit_code == 0, printed
    kinds = [d for d in json.loads(printed.stdout)["items"] if d["kind"] == "CustomResourceDefinition"]
    assert sorted(d["metadata"]["name"] for d in kinds) == [
        "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
        "awsclusterroleidentities.infrastructure.cluster.x-k8s.io",
        "awsclusters.infrastructure.cluster.x-k8s.io",
        "awsclusterstaticidentities.infrastructure.cluster.x-k8s.io",
        "awsclustertemplates.infrastructure.cluster.x-k8s.io",
        "awsmachinepools.infrastructure.cluster.x-k8s.io",
        "awsmachines.infrastructure.cluster.x-k8s.io",
        "awsmachinetemplates.infrastructure.cluster.x-k8s.io",
        "clusterconfigs.capa-py.io",
        "hardware.tinkerbell.org",
        "osies.tinkerbell.org",
        "templates.tinkerbell.org",
        "tinkerbellclusters.infrastructure.cluster.x-k8s.io",
        "tinkerbellmachines.infrastructure.cluster.x-k8s.io",
        "tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io",
        "workflows.tinkerbell.org",
    ]
    full = cli("manifests", "crds", "-o", "json")
    names = sorted(d["metadata"]["name"] for d in json.loads(full.stdout)["items"])
    assert "clusters.cluster.x-k8s.io" in names
    assert "machines.cluster.x-k8s.io" in names


# -- webhooks served outside the cluster ----------------------------------------------------------------


@pytest.mark.parametrize("what", ["deployment", "webhooks", "all"])
def test_a_webhook_url_registers_the_webhooks_there_with_the_ca_and_needs_no_cert_manager(
    cli: Cli, tmp_path: Path, what: str
) -> None:
    ca = write_certificate(tmp_path / "certs")
    printed = cli(
        "manifests", what, "-o", "json",
        "--webhook-url", "https://127.0.0.1:9443", "--webhook-ca-file", str(tmp_path / "certs" / "tls.crt"),
    )  # fmt: skip
    assert printed.exit_code == 0, printed
    docs = json.loads(printed.stdout)["items"]
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"Issuer", "Certificate"}, "nothing for cert-manager to issue"
    assert "capa-py-webhook-service" not in {d["metadata"]["name"] for d in docs if d["kind"] == "Service"}
    configuration = _one(docs, "ValidatingWebhookConfiguration")
    assert "annotations" not in configuration["metadata"], "no CA for cert-manager to inject"
    served = {route.resource.canonical for route in build_app().router.routes() if route.resource}
    for webhook in configuration["webhooks"]:
        config = webhook["clientConfig"]
        assert set(config) == {"url", "caBundle"}
        assert config["url"].startswith("https://127.0.0.1:9443/validate-")
        assert config["url"].removeprefix("https://127.0.0.1:9443") in served
        assert base64.b64decode(config["caBundle"]) == ca
    if what != "webhooks":
        container = _container(docs)
        assert not [a for a in container["args"] if "webhook" in a], "the pods serve none: the URL does"
        assert "webhook-server" not in {p["name"] for p in container["ports"]}


def test_every_rule_writes_the_scope_the_api_server_would_default() -> None:
    """``rules`` is replaced whole by ``kubectl apply``: without the API server's default (``scope: "*"``)
    every re-apply of the components on a real API server said ``configured`` (tests/realkube applies
    twice)."""
    for webhook in _one(documents("all"), "ValidatingWebhookConfiguration")["webhooks"]:
        assert [rule["scope"] for rule in webhook["rules"]] == ["*"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["all", "--webhook-url", "https://127.0.0.1:9443"], "go together"),
        (["crds", "--webhook-url", "https://h:1", "--webhook-ca-file", "CA"], "does not apply to crds"),
        (["all", "--webhook-url", "http://h:1", "--webhook-ca-file", "CA"], "https://"),
        (["all", "--webhook-url", "https://h:1", "--webhook-ca-file", "missing"], "No such file"),
        (["all", "--webhook-url", "https://h:1", "--webhook-ca-file", "NOT_PEM"], "PEM certificate"),
    ],
)
def test_webhook_url_flags_are_checked(cli: Cli, tmp_path: Path, args: list[str], message: str) -> None:
    write_certificate(tmp_path)
    (tmp_path / "not-pem").write_text("hello")
    files = {
        "CA": str(tmp_path / "tls.crt"),
        "missing": str(tmp_path / "nope"),
        "NOT_PEM": str(tmp_path / "not-pem"),
    }
    result = cli("manifests", *[files.get(a, a) for a in args])
    assert result.exit_code == 2, result
    assert message in result.stderr, result
