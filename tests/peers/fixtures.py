"""pytest fixtures for the upstream peers. A test that needs the real API server asks for ``peer_cluster``;
it is skipped, saying why, only where no Go toolchain exists to build the peers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.peers import clusterapi
from tests.peers.build import GoMissing, find_go
from tests.peers.cluster import PeerCluster, start


def require_go() -> None:
    try:
        find_go()
    except GoMissing as exc:
        pytest.skip(f"the upstream peers cannot be built: {exc}")


@pytest.fixture(scope="session")
def peer_cluster() -> Iterator[PeerCluster]:
    """etcd, kube-apiserver and kube-controller-manager for the whole session (built on first use)."""
    require_go()
    cluster = start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def capi_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusterapi.CapiCore]:
    """Upstream Cluster API core (its manager, CRDs and webhooks) on a control plane of its own, never
    ``peer_cluster``'s: capa-py's own Cluster and Machine CRDs, installed there, have the same names.
    ``.cluster`` is that control plane, ``.log`` the manager's log, ``.clusterctl(...)`` runs clusterctl."""
    require_go()
    with clusterapi.running(tmp_path_factory.mktemp("capi")) as core:
        yield core
