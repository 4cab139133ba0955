"""``capa manifests repository``: capa-py as a clusterctl infrastructure provider repository, and its
components installed on a real kube-apiserver that has no capa-py core CRDs (Cluster API core owns those)."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py import __version__
from capa_py.manifests.crds import crd_for, custom_kinds, is_infrastructure_kind
from capa_py.manifests.deployment import CREDENTIALS_SECRET
from capa_py.manifests.repository import AGGREGATED_ROLE, VARIABLES, write_repository
from tests.cli.cli_support import Cli
from tests.manifests.test_beside_capa import CAPA_NAMES
from tests.peers.cluster import running
from tests.peers.kubectl import kubectl_binary

VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::=([^}]*))?\}")
"""clusterctl's variable forms: ``${NAME}`` and ``${NAME:=default}``."""

CORE_CRDS = {
    "clusters.cluster.x-k8s.io",
    "machines.cluster.x-k8s.io",
    "machinedeployments.cluster.x-k8s.io",
    "machinesets.cluster.x-k8s.io",
    "machinepools.cluster.x-k8s.io",
    "clusterconfigs.capa-py.io",
}


def substitute(text: str, values: dict[str, str]) -> str:
    """What clusterctl does to a components file: each variable replaced by its value, else its default;
    a variable with neither is an error."""

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in values:
            return values[name]
        if default is not None:
            return default
        raise KeyError(f"variable {name} has no value and no default")

    return VARIABLE.sub(one, text)


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


@pytest.fixture
def repository(cli: Cli, tmp_path: Path) -> Path:
    result = cli("manifests", "repository", "--output", str(tmp_path / "repo"), "--version", "v0.1.0")
    assert result.exit_code == 0, result
    return tmp_path / "repo"


def test_the_layout_is_what_a_clusterctl_local_repository_reads(repository: Path) -> None:
    """``<root>/infrastructure-<name>/<version>/``, the components file and metadata.yaml side by side."""
    version = repository / "infrastructure-capa-py" / "v0.1.0"
    assert sorted(p.name for p in version.iterdir()) == ["infrastructure-components.yaml", "metadata.yaml"]
    assert [p.relative_to(repository).parts[:2] for p in repository.rglob("*") if p.is_file()] == [
        ("infrastructure-capa-py", "v0.1.0")
    ] * 2
    metadata = yaml.safe_load((version / "metadata.yaml").read_text())
    assert metadata == {
        "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
        "kind": "Metadata",
        "releaseSeries": [{"major": 0, "minor": 1, "contract": "v1beta2"}],
    }


def test_the_version_defaults_to_capa_py_s_and_must_be_a_release(cli: Cli, tmp_path: Path) -> None:
    result = cli("manifests", "repository", "--output", str(tmp_path))
    assert result.exit_code == 0, result
    metadata = yaml.safe_load(
        (tmp_path / "infrastructure-capa-py" / f"v{__version__}" / "metadata.yaml").read_text()
    )
    major, minor, _ = __version__.split(".")
    assert metadata["releaseSeries"] == [{"major": int(major), "minor": int(minor), "contract": "v1beta2"}]
    released = cli("manifests", "repository", "--output", str(tmp_path / "next"), "--version", "v0.2.3")
    assert released.exit_code == 0, released
    text = (
        tmp_path / "next" / "infrastructure-capa-py" / "v0.2.3" / "infrastructure-components.yaml"
    ).read_text()
    [deployment] = [d for d in _docs(text) if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/capa-py/capa-py:0.2.3", "a release runs its own image"
    for bad in (["--version", "latest"], ["--version", "v1.2"]):
        refused = cli("manifests", "repository", "--output", str(tmp_path / "other"), *bad)
        assert refused.exit_code == 2, refused
    assert cli("manifests", "repository").exit_code == 2, "no directory given"


def _components(repository: Path) -> str:
    return (repository / "infrastructure-capa-py" / "v0.1.0" / "infrastructure-components.yaml").read_text()


def test_the_components_are_an_infrastructure_provider_s(repository: Path) -> None:
    text = _components(repository)
    assert {m.group(1) for m in VARIABLE.finditer(text)} == set(VARIABLES)
    docs = _docs(substitute(text, {"AWS_B64ENCODED_CREDENTIALS": "e30="}))
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    expected = {crd_for(k)["metadata"]["name"] for k in custom_kinds()} - CORE_CRDS
    assert crds == expected
    assert not crds & CORE_CRDS
    for crd in docs:
        if crd["kind"] == "CustomResourceDefinition" and crd["spec"]["group"].startswith("infrastructure."):
            assert crd["metadata"]["labels"]["cluster.x-k8s.io/provider"] == "infrastructure-capa-py"

    [namespace] = [d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"]
    assert {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]} == {namespace}
    clashes = [
        d["metadata"]["name"] for d in docs if d["metadata"]["name"] in CAPA_NAMES.get(d["kind"], set())
    ]
    assert clashes == []

    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert "--core-controllers=off" in container["args"]
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    named = {v["secret"]["secretName"] for v in volumes if "secret" in v} | {
        e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"] if "valueFrom" in e
    }
    # Every Secret the pods read is in the components, but the webhook certificate cert-manager writes.
    assert named - {"capa-py-webhook-service-cert"} == {CREDENTIALS_SECRET} == set(secrets)
    assert secrets[CREDENTIALS_SECRET]["data"] == {"credentials": "e30="}

    [aggregated] = [d for d in docs if d["metadata"]["name"] == AGGREGATED_ROLE]
    assert aggregated["kind"] == "ClusterRole"
    assert aggregated["metadata"]["labels"]["cluster.x-k8s.io/aggregate-to-manager"] == "true"
    granted = {(g, r) for rule in aggregated["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    for kind in custom_kinds():
        if is_infrastructure_kind(kind):
            assert ("infrastructure.cluster.x-k8s.io", kind.PLURAL) in granted
    for rule in aggregated["rules"]:
        assert set(rule["verbs"]) >= {"get", "list", "watch", "update", "patch", "delete"}


CERT_MANAGER_STAND_IN = [
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.cert-manager.io"},
        "spec": {
            "group": "cert-manager.io",
            "names": {"plural": plural, "kind": kind, "listKind": f"{kind}List", "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }
    for plural, kind in (("issuers", "Issuer"), ("certificates", "Certificate"))
]
"""cert-manager's Issuer and Certificate kinds, which ``clusterctl init`` installs before any provider."""

CLUSTER_API_MANAGER = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capi-system"}},
    {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "capi-manager", "namespace": "capi-system"},
    },
    # Cluster API binds its manager to a role aggregating every ClusterRole labelled
    # cluster.x-k8s.io/aggregate-to-manager; this control plane runs no aggregation controller, so the
    # manager is bound to capa-py's labelled role directly (the label is checked above).
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "capi-manager-capa-py"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGGREGATED_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "capi-manager", "namespace": "capi-system"}],
    },
]
"""Cluster API core's manager identity and its aggregated role (its names, as Cluster API ships them)."""


def _kubectl(binary: str, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [binary, "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_components_apply_server_side_to_a_cluster_with_cluster_api_core_s_manager(
    repository: Path, tmp_path: Path
) -> None:
    """The components, their variables substituted as clusterctl does, apply cleanly with ``kubectl apply
    --server-side`` on a control plane of their own (no capa-py core CRDs there); the infrastructure kinds
    are then served under CAPA's short names, and Cluster API core's manager may manage them through the
    aggregated role."""
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("kubectl is not installed")
    credentials = "[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = example\n"
    text = substitute(
        _components(repository),
        {"AWS_B64ENCODED_CREDENTIALS": base64.b64encode(credentials.encode()).decode()},
    )
    with running(directory=tmp_path / "cluster", controller_manager=False) as cluster:
        config = cluster.admin_kubeconfig
        prerequisites = yaml.safe_dump_all(CERT_MANAGER_STAND_IN)
        _kubectl(binary, config, "apply", "--server-side", "-f", "-", stdin=prerequisites)
        _kubectl(binary, config, "wait", "--for=condition=Established", "crd/issuers.cert-manager.io")
        _kubectl(binary, config, "wait", "--for=condition=Established", "crd/certificates.cert-manager.io")

        applied = _kubectl(binary, config, "apply", "--server-side", "-f", "-", stdin=text)
        assert "serverside-applied" in applied
        again = _kubectl(binary, config, "apply", "--server-side", "-f", "-", stdin=text)
        assert "serverside-applied" in again

        _kubectl(binary, config, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        listed = _kubectl(binary, config, "get", "awsc,awsm", "-A")
        assert "error" not in listed.lower()
        crds = _kubectl(binary, config, "get", "crds", "-o", "name").split()
        assert "customresourcedefinition.apiextensions.k8s.io/clusters.cluster.x-k8s.io" not in crds
        secret = yaml.safe_load(
            _kubectl(
                binary, config, "get", "secret", "-n", "capa-py-system", CREDENTIALS_SECRET, "-o", "yaml"
            )
        )
        assert base64.b64decode(secret["data"]["credentials"]).decode() == credentials

        core = yaml.safe_dump_all(CLUSTER_API_MANAGER)
        _kubectl(binary, config, "apply", "--server-side", "-f", "-", stdin=core)
        manager = "system:serviceaccount:capi-system:capi-manager"
        for resource in ("awsclusters", "awsmachines", "tinkerbellclusters", "tinkerbellmachines"):
            for verb in ("get", "list", "watch", "update", "patch", "delete"):
                qualified = f"{resource}.infrastructure.cluster.x-k8s.io"
                answer = _kubectl(binary, config, "auth", "can-i", verb, qualified, "--as", manager, "-A")
                assert answer.strip() == "yes", f"{verb} {qualified}"


def test_a_new_release_s_metadata_keeps_the_release_series_of_the_releases_already_there(
    tmp_path: Path,
) -> None:
    """clusterctl reads the newest release's metadata for every installed release (``upgrade plan`` failed
    with "does not match any release series" when v0.2.0's metadata named only 0.2)."""
    write_repository(tmp_path, "v0.1.0")
    newest = write_repository(tmp_path, "v0.2.0")
    series = yaml.safe_load((newest / "metadata.yaml").read_text())["releaseSeries"]
    assert series == [
        {"major": 0, "minor": 2, "contract": "v1beta2"},
        {"major": 0, "minor": 1, "contract": "v1beta2"},
    ]
    again = write_repository(tmp_path, "v0.2.1")  # a patch release: the same series, listed once
    assert yaml.safe_load((again / "metadata.yaml").read_text())["releaseSeries"] == series
