"""A served store has the Namespaces the API server makes for itself (before, it had none, and a client
waiting for ``default`` waited forever), made once however many processes serve the store."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from capa_py.api.core import Namespace
from capa_py.apiserver import start_in_thread
from capa_py.apiserver.namespaces import ensure_system_namespaces
from capa_py.store import SQLiteStore
from tests.apiserver.apiserver_support import Server
from tests.apiserver.peer_support import capa_endpoint, peer_endpoint
from tests.peers.cluster import PeerCluster


def _system(items: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client sees of the namespaces nobody created through the API."""
    return {
        n["metadata"]["name"]: (n["metadata"].get("labels"), n.get("spec"), n.get("status"))
        for n in items
        if n["metadata"]["name"] == "default" or n["metadata"]["name"].startswith("kube-")
    }


def test_a_fresh_served_store_has_the_api_servers_own_namespaces(
    server: Server, peer_cluster: PeerCluster, tmp_path: Path
) -> None:
    seen = {}
    for endpoint in (capa_endpoint(server, tmp_path), peer_endpoint(peer_cluster)):
        reply = endpoint.send("GET", "/api/v1/namespaces")
        assert reply.status == 200, reply.body
        seen[endpoint.name] = _system(reply.json()["items"])
    assert seen["capa serve"] == seen["kube-apiserver"]
    assert {"default", "kube-system", "kube-public"} <= set(seen["capa serve"])
    assert {status["phase"] for _, _, status in seen["capa serve"].values()} == {"Active"}


def test_several_processes_serving_one_store_make_each_namespace_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    stores = [SQLiteStore(path, poll_interval=0.02) for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(stores))

    def ensure(store: SQLiteStore) -> None:
        start.wait()
        try:
            ensure_system_namespaces(store)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ensure, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        listed = stores[0].list(Namespace)
        assert sorted(n.metadata.name for n in listed) == [
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
        ]
        assert {n.status.phase for n in listed} == {"Active"}
        # A server started on the store afterwards finds them and changes nothing.
        before = {n.metadata.name: n.metadata.resource_version for n in listed}
        start_in_thread(stores[1]).stop()
        after = {n.metadata.name: n.metadata.resource_version for n in stores[0].list(Namespace)}
        assert after == before
    finally:
        for store in stores:
            store.close()
