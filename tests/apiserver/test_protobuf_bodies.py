"""kubectl 1.32 and later send ``create namespace|configmap|secret`` bodies in Kubernetes' protobuf form
only (``Content-Type: application/vnd.kubernetes.protobuf``) and do not retry with JSON on a 415 (checked
with the real binaries), so ``capa serve`` decodes them as the API server does; before, it answered 400
("the request body is not JSON") and the commands failed. The real API server judges the outcome."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.apiserver_support import Server
from tests.apiserver.peer_support import (
    Endpoint,
    capa_endpoint,
    peer_endpoint,
    scratch_namespace,
)
from tests.peers.cluster import PeerCluster
from tests.peers.kubectl import kubectl_binary

PROTOBUF = "application/vnd.kubernetes.protobuf"


@pytest.fixture
def both(server: Server, peer_cluster: PeerCluster, tmp_path: Path) -> list[Endpoint]:
    return [capa_endpoint(server, tmp_path / "capa"), peer_endpoint(peer_cluster)]


@pytest.fixture
def namespace(both: list[Endpoint]) -> Iterator[str]:
    with scratch_namespace(*both, prefix="protobuf") as name:
        yield name


def _kept(doc: dict[str, Any]) -> dict[str, Any]:
    """What a create stored that both servers keep alike."""
    return {k: doc.get(k) for k in ("kind", "data", "binaryData", "type", "immutable")} | {
        "labels": {
            k: v for k, v in doc["metadata"].get("labels", {}).items() if k != "kubernetes.io/metadata.name"
        }
    }


@pytest.mark.parametrize("version", ["1.32", "1.33"])
def test_kubectl_create_namespace_configmap_and_secret(
    version: str, both: list[Endpoint], namespace: str, tmp_path: Path
) -> None:
    binary = kubectl_binary(version)
    if binary is None:
        pytest.skip(f"kubectl.{version} is not installed")
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)))
    outcomes = {}
    for endpoint in both:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(endpoint.kubeconfig),
        }

        def run(*args: str, env: dict[str, str] = env) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [binary, *args], env=env, capture_output=True, text=True, timeout=120, check=False
            )

        created_ns = f"{namespace}-{version.replace('.', '-')}"
        commands = [
            ("create", "namespace", created_ns),
            ("-n", namespace, "create", "configmap", "settings", "--from-literal=a=b", f"--from-file={blob}"),
            ("-n", namespace, "create", "secret", "generic", "token", "--from-literal=a=b"),
            (
                "-n",
                namespace,
                "create",
                "secret",
                "generic",
                "typed",
                "--type=example.com/t",
                "--from-literal=c=d",
            ),
        ]
        results = [run(*args) for args in commands]
        stored = [
            _kept(endpoint.send("GET", path).json())
            for path in (
                f"/api/v1/namespaces/{created_ns}",
                f"/api/v1/namespaces/{namespace}/configmaps/settings",
                f"/api/v1/namespaces/{namespace}/secrets/token",
                f"/api/v1/namespaces/{namespace}/secrets/typed",
            )
        ]
        endpoint.send("DELETE", f"/api/v1/namespaces/{created_ns}")
        outcomes[endpoint.name] = ([(r.returncode, r.stdout, r.stderr) for r in results], stored)
    capa, real = outcomes["capa serve"], outcomes["kube-apiserver"]
    assert capa[0] == real[0]
    for mine, theirs in zip(capa[1], real[1], strict=True):
        assert mine == theirs
    results, stored = capa
    assert [code for code, _, _ in results] == [0, 0, 0, 0], results
    assert stored[1]["data"] == {"a": "b"}
    assert set(stored[1]["binaryData"]) == {"blob.bin"}
    assert (stored[2]["type"], stored[2]["data"]) == ("Opaque", {"a": "Yg=="})
    assert stored[3]["type"] == "example.com/t"


def test_a_body_that_is_not_protobuf_is_refused_in_the_api_servers_words(both: list[Endpoint]) -> None:
    answers = {}
    for endpoint in both:
        reply = endpoint.send("POST", "/api/v1/namespaces", b"garbage", PROTOBUF)
        answers[endpoint.name] = (reply.status, reply.json()["reason"], reply.json()["message"])
    assert answers["capa serve"] == answers["kube-apiserver"]
    assert answers["capa serve"][:2] == (400, "BadRequest")


def test_the_request_kubectl_sends_is_protobuf(server: Server, tmp_path: Path) -> None:
    """The premise, from kubectl's own log of its request: a protobuf body, JSON accepted in reply."""
    binary = kubectl_binary("1.33")
    if binary is None:
        pytest.skip("kubectl.1.33 is not installed")
    capa = capa_endpoint(server, tmp_path)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "KUBECONFIG": str(capa.kubeconfig)}
    done = subprocess.run(
        [binary, "create", "namespace", "logged", "-v=8"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"Content-Type: {PROTOBUF}" in done.stderr
    assert f"Accept: {PROTOBUF},application/json" in done.stderr
    assert json.loads(capa.send("GET", "/api/v1/namespaces/logged").body)["metadata"]["name"] == "logged"
