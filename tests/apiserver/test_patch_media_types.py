"""Which patch media types each kind takes, judged by the real API server: a custom resource refuses a
strategic merge patch with 415 (``capa serve`` used to take it as a merge patch), a built-in kind takes
it, and a media type nobody takes is a 415 worded as the API server words it. kubectl then behaves alike
on both servers: ``apply``, ``label`` and ``patch --type merge`` of a custom resource work (kubectl sends
a merge patch itself), ``patch`` with its default strategic type fails with the same error."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver.apiserver_support import Server, aws_cluster
from tests.apiserver.peer_support import (
    Endpoint,
    capa_endpoint,
    peer_endpoint,
    scratch_namespace,
)
from tests.peers.cluster import PeerCluster
from tests.peers.crds import install_capa_crds

STRATEGIC = "application/strategic-merge-patch+json"
AWSCLUSTERS = "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{ns}/awsclusters"


@pytest.fixture
def both(server: Server, peer_cluster: PeerCluster, tmp_path: Path) -> list[Endpoint]:
    install_capa_crds(peer_cluster)
    return [capa_endpoint(server, tmp_path / "capa"), peer_endpoint(peer_cluster)]


@pytest.fixture
def namespace(both: list[Endpoint]) -> Iterator[str]:
    with scratch_namespace(*both, prefix="patch-types") as name:
        yield name


def _refusal(reply: Any) -> tuple[int, str, str]:
    status = reply.json()
    return reply.status, status["reason"], status["message"]


@pytest.mark.parametrize("subresource", ["", "/status"])
def test_a_custom_resource_refuses_a_strategic_merge_patch(
    both: list[Endpoint], namespace: str, subresource: str
) -> None:
    answers = []
    for endpoint in both:
        path = AWSCLUSTERS.format(ns=namespace)
        created = endpoint.send("POST", path, aws_cluster("demo") | {"metadata": {"name": "demo"}})
        assert created.status == 201, (endpoint.name, created.body)
        patch = {"metadata": {"labels": {"team": "red"}}}
        answers.append(_refusal(endpoint.send("PATCH", f"{path}/demo{subresource}", patch, STRATEGIC)))
        assert "labels" not in endpoint.send("GET", f"{path}/demo").json()["metadata"]
    capa, real = answers
    assert capa[:2] == real[:2] == (415, "UnsupportedMediaType")
    assert capa[2] == real[2]
    assert "strategic" not in capa[2]


def test_a_media_type_no_kind_takes_is_refused_in_the_api_servers_words(
    both: list[Endpoint], namespace: str
) -> None:
    answers = []
    for endpoint in both:
        secret = {"metadata": {"name": "s"}, "stringData": {"a": "b"}}
        assert endpoint.send("POST", f"/api/v1/namespaces/{namespace}/secrets", secret).status == 201
        answers.append(
            _refusal(endpoint.send("PATCH", f"/api/v1/namespaces/{namespace}/secrets/s", {}, "text/plain"))
        )
        path = AWSCLUSTERS.format(ns=namespace) + "/missing"
        answers.append(_refusal(endpoint.send("PATCH", path, {}, "text/plain")))
    capa_secret, capa_custom, real_secret, real_custom = answers
    assert capa_secret == real_secret == (415, "UnsupportedMediaType", "415: Unsupported Media Type")
    assert capa_custom[:2] == real_custom[:2]
    assert capa_custom[2] == real_custom[2]


def test_a_built_in_kind_takes_a_strategic_merge_patch(both: list[Endpoint], namespace: str) -> None:
    results = []
    for endpoint in both:
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        config_map = {"metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"x": "1"}}
        assert endpoint.send("POST", path, config_map).status == 201
        patch = {"metadata": {"labels": {"b": "2"}}, "data": {"y": "2"}}
        reply = endpoint.send("PATCH", f"{path}/c", patch, STRATEGIC)
        assert reply.status == 200, (endpoint.name, reply.body)
        results.append((reply.json()["metadata"]["labels"], reply.json()["data"]))
    assert results[0] == results[1] == ({"a": "1", "b": "2"}, {"x": "1", "y": "2"})


def test_kubectl_apply_label_and_patch_of_a_custom_resource_behave_as_on_the_api_server(
    both: list[Endpoint], namespace: str, tmp_path: Path
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    outcomes = {}
    for endpoint in both:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(endpoint.kubeconfig),
        }

        def run(*args: str, env: dict[str, str] = env) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [kubectl, "-n", namespace, *args],
                check=False,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        manifest = tmp_path / "awscluster.yaml"
        cluster = aws_cluster("demo")
        cluster["metadata"] = {"name": "demo"}
        manifest.write_text(yaml.safe_dump(cluster))
        first = run("apply", "-f", str(manifest))
        cluster["spec"]["additionalTags"] = {"team": "applied"}
        manifest.write_text(yaml.safe_dump(cluster))
        second = run("apply", "-f", str(manifest))
        labelled = run("label", "awscluster", "demo", "tier=gold")
        merged = run("patch", "awscluster", "demo", "--type", "merge", "-p", '{"spec":{"sshKeyName":"k"}}')
        strategic = run("patch", "awscluster", "demo", "-p", '{"spec":{"sshKeyName":"other"}}')
        stored = yaml.safe_load(run("get", "awscluster", "demo", "-o", "yaml").stdout)
        outcomes[endpoint.name] = {
            "apply": (first.returncode, first.stdout, second.returncode, second.stdout),
            "label": (labelled.returncode, labelled.stdout),
            "merge": (merged.returncode, merged.stdout),
            "strategic": (strategic.returncode, strategic.stderr),
            "stored": (
                stored["spec"]["additionalTags"],
                stored["spec"]["sshKeyName"],
                stored["metadata"]["labels"],
            ),
        }
    capa, real = outcomes["capa serve"], outcomes["kube-apiserver"]
    assert capa == real
    assert capa["strategic"][0] == 1
    assert "application/strategic-merge-patch+json is not supported" in capa["strategic"][1]
    assert capa["stored"] == ({"team": "applied"}, "k", {"tier": "gold"})
