"""``kubectl apply --server-side`` against ``capa serve`` and against the real kube-apiserver, with every
kubectl version at hand: the same commands must print the same and leave the same managedFields — apply,
re-apply, change, a conflict and ``--force-conflicts``, and the move from client-side apply (the
last-applied annotation and the ``kubectl-client-side-apply`` manager)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver.apiserver_support import Server
from tests.apiserver.twin import Twin, managed_fields, twin_namespace
from tests.peers.cluster import PeerCluster
from tests.peers.kubectl import kubectl_binaries

BINARIES = kubectl_binaries()
NEEDS_OPENAPI_V2 = ("1.27", "1.28")
"""kubectl versions that read the OpenAPI v2 document before any apply."""


def _serves_openapi_v2(server: Server) -> bool:
    try:
        with urllib.request.urlopen(
            server.url + "/openapi/v2", context=server.context, timeout=10
        ) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as exc:
        exc.close()
        return False


class Side:
    """kubectl against one server, in one namespace, with its own HOME (its own discovery cache)."""

    def __init__(self, binary: Path, kubeconfig: Path, home: Path, namespace: str, workdir: Path) -> None:
        self.binary = binary
        self.env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "KUBECONFIG": str(kubeconfig)}
        self.namespace = namespace
        self.workdir = workdir

    def run(self, *args: str) -> tuple[int, str]:
        done = subprocess.run(
            [str(self.binary), "-n", self.namespace, *args],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return done.returncode, done.stdout + done.stderr

    def managed(self, name: str) -> tuple[Any, ...]:
        code, out = self.run("get", "configmap", name, "-o", "json", "--show-managed-fields")
        assert code == 0, out
        obj = json.loads(out)
        meta = obj["metadata"]
        return obj.get("data"), meta.get("labels"), meta.get("annotations"), managed_fields(obj)


def _manifest(path: Path, name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> str:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}))
    return str(path)


@pytest.fixture
def twin(server: Server, peer_cluster: PeerCluster) -> Iterator[Twin]:
    with twin_namespace(server, peer_cluster, f"kssa-{os.urandom(4).hex()}") as pair:
        yield pair


_NONE = pytest.param(
    "none", Path(), marks=pytest.mark.skip(reason="no kubectl on PATH or in the usual places")
)


@pytest.mark.parametrize(
    ("label", "binary"), BINARIES or [_NONE], ids=[b[0] for b in BINARIES] or ["no-kubectl"]
)
def test_kubectl_server_side_apply_matches_the_real_server(
    label: str, binary: Path, twin: Twin, peer_cluster: PeerCluster, tmp_path: Path
) -> None:
    if label in NEEDS_OPENAPI_V2 and not _serves_openapi_v2(twin.capa_server):
        pytest.skip(f"kubectl {label} reads /openapi/v2 before applying, which capa serve does not serve yet")
    capa_config = twin.capa_server.running.write_kubeconfig(tmp_path / "capa.kubeconfig")
    sides = []
    for name, kubeconfig in (("real", peer_cluster.admin_kubeconfig), ("capa", capa_config)):
        (tmp_path / name).mkdir()
        sides.append(Side(binary, kubeconfig, tmp_path / name, twin.namespace, tmp_path))
    real, capa = sides

    def both(step: str, *args: str) -> tuple[int, str]:
        answers = [side.run(*args) for side in (real, capa)]
        assert answers[1] == answers[0], f"kubectl {label}: {step}"
        return answers[0]

    def same_fields(step: str, name: str) -> tuple[Any, ...]:
        seen = real.managed(name)
        assert capa.managed(name) == seen, f"kubectl {label}: {step}"
        return seen

    manifest = _manifest(tmp_path / "ssa.yaml", "ssa", {"a": "1", "b": "2"})
    assert both("create", "apply", "--server-side", "-f", manifest) == (
        0,
        "configmap/ssa serverside-applied\n",
    )
    both("re-apply unchanged", "apply", "--server-side", "-f", manifest)
    manifest = _manifest(tmp_path / "ssa.yaml", "ssa", {"a": "3", "b": "2"})
    both("apply a change", "apply", "--server-side", "-f", manifest)
    other = _manifest(tmp_path / "other.yaml", "ssa", {"a": "4", "b": "2"})
    code, out = both("a conflict", "apply", "--server-side", "--field-manager=other", "-f", other)
    assert code == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.a' in out
    both("forced", "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", other)
    data, *_, managers = same_fields("after force", "ssa")
    assert data == {"a": "4", "b": "2"}
    assert sorted(m["manager"] for m in managers) == ["kubectl", "other"]

    labels = {"l": "1"}
    client_side = _manifest(tmp_path / "csa.yaml", "csa", {"x": "1", "z": "2"}, labels)
    both("client-side apply", "apply", "-f", client_side)
    same_fields("after client-side apply", "csa")
    client_side = _manifest(tmp_path / "csa.yaml", "csa", {"x": "5", "z": "2"}, labels)
    both("server-side apply over client-side apply", "apply", "--server-side", "-f", client_side)
    data, _, annotations, managers = same_fields("after moving to server-side apply", "csa")
    assert data == {"x": "5", "z": "2"}
    assert json.loads(annotations["kubectl.kubernetes.io/last-applied-configuration"])["data"] == data
    assert "kubectl-client-side-apply" not in [m["manager"] for m in managers]
    client_side = _manifest(tmp_path / "csa.yaml", "csa", {"x": "5"}, labels)
    both("dropping a key", "apply", "--server-side", "-f", client_side)
    data, *_ = same_fields("after dropping a key", "csa")
    assert data == {"x": "5"}
    both("client-side apply again", "apply", "-f", client_side)
    same_fields("after client-side apply again", "csa")
