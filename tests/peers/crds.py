"""capa-py's CRDs on a real API server, installed once per control plane for every suite that shares it."""

from __future__ import annotations

import json
import urllib.error

from capa_py.manifests.crds import crds
from tests.peers.cluster import PeerCluster
from tests.support.eventually import eventually

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_INSTALLED: set[str] = set()


def _established(cluster: PeerCluster, name: str) -> bool:
    conditions = (cluster.request(f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _published(cluster: PeerCluster) -> bool:
    """Whether the API server's OpenAPI v2 document has the CRDs' kinds yet (kubectl 1.27/1.28 read it)."""
    document = cluster.request("/openapi/v2")
    return "io.x-k8s.cluster.infrastructure.v1beta2.AWSCluster" in json.dumps(document.get("definitions", {}))


def install_capa_crds(cluster: PeerCluster, timeout: float = 60.0) -> None:
    """Every CRD ``capa manifests crds`` prints, Established and published in ``/openapi/v2``; a CRD that
    exists already is kept. Once per cluster: later calls return at once (a suite must not delete them)."""
    if cluster.url in _INSTALLED:
        return
    documents = crds()
    for document in documents:
        try:
            cluster.request(CRD_PATH, "POST", document)
        except urllib.error.HTTPError as exc:
            with exc:
                if exc.code != 409:
                    raise RuntimeError(f"creating {document['metadata']['name']}: {exc.read()!r}") from exc
    names = [document["metadata"]["name"] for document in documents]
    eventually(
        lambda: all(_established(cluster, name) for name in names),
        "capa-py's CRDs Established",
        timeout=timeout,
        interval=0.1,
    )
    eventually(lambda: _published(cluster), "capa-py's CRDs in /openapi/v2", timeout=timeout, interval=0.5)
    _INSTALLED.add(cluster.url)
