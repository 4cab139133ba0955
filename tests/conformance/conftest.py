"""The two servers of the differential suite, each with capa-py's kinds, and the conformance table."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.apiserver import start_in_thread
from capa_py.store import SQLiteStore
from tests.conformance.endpoints import Endpoint
from tests.conformance.kubectl_script import MATRIX
from tests.conformance.support import RESULTS
from tests.peers.cluster import PeerCluster
from tests.peers.crds import install_capa_crds


@pytest.fixture(scope="module")
def capa_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoint]:
    path: Path = tmp_path_factory.mktemp("conformance") / "state.db"
    with SQLiteStore(path, poll_interval=0.02) as store:
        running = start_in_thread(store)
        try:
            kubeconfig = running.write_kubeconfig(path.with_name("capa.kubeconfig"))
            yield Endpoint("capa serve", running.url, running.client_context(), str(kubeconfig))
        finally:
            running.stop()


@pytest.fixture(scope="module")
def kube_apiserver(peer_cluster: PeerCluster) -> Endpoint:
    endpoint = Endpoint(
        "kube-apiserver", peer_cluster.url, peer_cluster.admin_context(), str(peer_cluster.admin_kubeconfig)
    )
    install_capa_crds(peer_cluster)
    return endpoint


@pytest.fixture
def namespace(capa_serve: Endpoint, kube_apiserver: Endpoint) -> Iterator[str]:
    """A namespace of the test's own, created on both servers; on the real one it is deleted afterwards
    (its controller-manager then deletes what is in it), since other suites share that server."""
    name = f"conf-{secrets.token_hex(3)}"
    for endpoint in (capa_serve, kube_apiserver):
        reply = endpoint.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        assert reply.status == 201, f"{endpoint.name}: {reply.body}"
    yield name
    kube_apiserver.call("DELETE", f"/api/v1/namespaces/{name}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if RESULTS.rows:
        terminalreporter.section("capa serve conformance (differential suite)")
        terminalreporter.write_line(RESULTS.table())
    if MATRIX.cells or MATRIX.skipped:
        terminalreporter.section("kubectl on capa serve and kube-apiserver (steps x kubectl versions)")
        terminalreporter.write_line(MATRIX.table())
        target = os.environ.get("CAPA_KUBECTL_MATRIX")
        if target:
            MATRIX.write(Path(target))
            terminalreporter.write_line(f"written as Markdown to {target}")
