"""The store contract: every test here that asks for ``store`` runs against each store — the SQLite file,
the kube store talking over HTTP to ``capa serve`` (serving a SQLite file of its own), and the kube store on
the real kube-apiserver (the session's ``peer_cluster``, with capa-py's CRDs installed; what the previous
test left there is deleted first) — except in the modules that test SQLite's own machinery (WAL, several
processes on one file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.apiserver import start_in_thread
from capa_py.store import SQLiteStore
from capa_py.store.kube import KubeStore
from capa_py.store.protocol import ObjectStore
from tests.peers.cluster import PeerCluster
from tests.store.kube_support import api_client_for, install_crds, purge

BACKENDS = ("sqlite", "kube", "realkube")
SQLITE_ONLY = {"test_store_multiprocess", "test_store_apply_race"}
BOOKMARK_INTERVAL = 0.2
CASCADE = (
    "the real API server's garbage collector (kube-controller-manager) deletes dependents after their "
    "owner is gone, asynchronously; the SQLite store and capa serve cascade within the delete"
)
DELETION_VERSION = (
    "a kube-apiserver answers the delete of an object gone at once with a Status: the deletion's own "
    "resourceVersion reaches watchers only (the store returns the last state read before it)"
)
REAL_SERVER_DIFFERS = {
    "test_delete_without_finalizers_removes_the_object_and_returns_its_last_state": DELETION_VERSION,
    "test_watch_from_a_resource_version_streams_added_modified_deleted_in_order": DELETION_VERSION,
    "test_a_no_op_update_keeps_the_resource_version_and_emits_no_event": (
        "a field manager's first status write records it in managedFields, so the server writes even "
        "when the status is unchanged"
    ),
    "test_deleting_an_owner_deletes_its_dependents": CASCADE,
    "test_cascading_deletion_is_visible_to_watchers": CASCADE,
    "test_cascading_deletion_goes_down_every_level": CASCADE,
    "test_dependents_wait_for_the_owner_to_really_go": CASCADE,
    "test_a_dependent_with_finalizers_is_marked_not_removed": CASCADE,
    "test_a_dependent_with_another_live_owner_is_kept_without_the_dead_reference": CASCADE,
    "test_cascading_deletion_crosses_kinds": CASCADE,
    "test_orphan_propagation_keeps_dependents_and_strips_the_reference": CASCADE,
    "test_orphan_propagation_waits_for_the_owners_finalizers": CASCADE,
}
"""Contract tests whose SQLite-store guarantee a real kube-apiserver does not give, with the difference."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_backend" in metafunc.fixturenames:
        module = metafunc.module.__name__.rpartition(".")[2]
        backends = ["sqlite"] if module in SQLITE_ONLY else list(BACKENDS)
        metafunc.parametrize("store_backend", backends)


@pytest.fixture(scope="session")
def real_api_server(peer_cluster: PeerCluster) -> PeerCluster:
    """The session's kube-apiserver with capa-py's CRDs installed and the namespaces the tests use."""
    install_crds(peer_cluster)
    return peer_cluster


@pytest.fixture
def store(store_backend: str, store_path: Path, request: pytest.FixtureRequest) -> Iterator[ObjectStore]:
    """A fresh, empty store of each kind, closed after the test."""
    if store_backend == "realkube":
        differs = REAL_SERVER_DIFFERS.get(request.node.originalname)
        if differs is not None:
            pytest.skip(f"not on a real API server: {differs}")
        server: PeerCluster = request.getfixturevalue("real_api_server")
        purge(server)
        with KubeStore.from_kubeconfig(server.admin_kubeconfig) as real:
            yield real
        purge(server)
        return
    if store_backend == "sqlite":
        with SQLiteStore(store_path) as opened:
            yield opened
        return
    served = SQLiteStore(store_path, poll_interval=0.02)
    running = start_in_thread(served, bookmark_interval=BOOKMARK_INTERVAL)
    kube = KubeStore(api_client_for(running))
    try:
        yield kube
    finally:
        kube.close()
        running.stop()
        served.close()
