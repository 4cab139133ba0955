"""The same requests sent to ``capa serve`` and to the real kube-apiserver (the ``peer_cluster``), and what a
client sees of the answers, for tests that compare the two."""

from __future__ import annotations

import contextlib
import copy
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from capa_py.api.meta import KubeObject
from capa_py.manifests.crds import custom_kinds
from tests.apiserver.apiserver_support import Server
from tests.peers.cluster import PeerCluster
from tests.peers.crds import install_capa_crds

Reply = tuple[int, Any]


def peer_http(
    peer: PeerCluster,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    user_agent: str | None = None,
) -> Reply:
    """One request to the real API server as its admin: (status, JSON body), errors included."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(peer.url + path, data=data, method=method)
    request.add_header("Content-Type", content_type)
    request.add_header("Accept", "application/json")
    if user_agent is not None:
        request.add_header("User-Agent", user_agent)
    try:
        with urllib.request.urlopen(request, context=peer.admin_context(), timeout=30) as response:
            return response.status, _decoded(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, _decoded(exc.read())


def _decoded(raw: bytes) -> Any:
    """JSON, or the text of an answer that is not (``404 page not found`` for a path nothing serves)."""
    try:
        return json.loads(raw or b"null")
    except json.JSONDecodeError:
        return raw.decode(errors="replace")


def managed_fields(body: Any) -> list[dict[str, Any]]:
    """An object's managedFields without their times (which differ between any two servers), in an order
    that does not depend on them either (the servers order entries by time within each operation)."""
    entries: list[dict[str, Any]] = copy.deepcopy((body or {}).get("metadata", {}).get("managedFields") or [])
    for entry in entries:
        entry.pop("time", None)
    return sorted(entries, key=lambda e: json.dumps(e, sort_keys=True))


def status_seen(body: dict[str, Any]) -> dict[str, Any]:
    """A Status as a client reads it; the order of conflict causes is the server's map order, not kept."""
    seen = copy.deepcopy(body)
    details = seen.get("details") or {}
    if "causes" in details:
        details["causes"] = sorted(details["causes"], key=lambda c: json.dumps(c, sort_keys=True))
    return seen


def seen(reply: Reply, *fields: str) -> tuple[int, Any]:
    """What a test compares of an answer: the status code and either the Status or the object's
    managedFields (without times) and the named top-level fields."""
    code, body = reply
    if not isinstance(body, dict):
        return code, body
    if body.get("kind") == "Status":
        return code, status_seen(body)
    return code, {"managedFields": managed_fields(body), **{f: body.get(f) for f in fields}}


class Twin:
    """``capa serve`` and the real API server side by side, each with the namespace ``namespace``."""

    def __init__(self, capa: Server, peer: PeerCluster, namespace: str) -> None:
        self.capa_server = capa
        self.peer = peer
        self.namespace = namespace

    def path(self, template: str) -> str:
        return template.format(ns=self.namespace)

    def real(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        user_agent: str | None = None,
    ) -> Reply:
        return peer_http(self.peer, method, self.path(path), body, content_type, user_agent)

    def capa(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        user_agent: str | None = None,
    ) -> Reply:
        headers = {} if user_agent is None else {"User_Agent": user_agent}
        return self.capa_server.http(method, self.path(path), body, content_type, **headers)

    def both(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        user_agent: str | None = None,
    ) -> tuple[Reply, Reply]:
        """The answers of the real server and of capa serve, in that order."""
        return (
            self.real(method, path, body, content_type, user_agent),
            self.capa(method, path, body, content_type, user_agent),
        )


@contextlib.contextmanager
def twin_namespace(capa: Server, peer: PeerCluster, name: str) -> Iterator[Twin]:
    """A fresh namespace on both servers for one test (deleted from the real one afterwards)."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    code, body = peer_http(peer, "POST", "/api/v1/namespaces", namespace)
    assert code == 201, body
    capa.http("POST", "/api/v1/namespaces", namespace)
    try:
        yield Twin(capa, peer, name)
    finally:
        peer_http(peer, "DELETE", f"/api/v1/namespaces/{name}")


@contextlib.contextmanager
def crd_installed(peer: PeerCluster, model: type[KubeObject]) -> Iterator[None]:
    """The kind's CRD (as ``capa manifests crds`` writes it) served by the real API server, with the rest of
    capa-py's CRDs; they stay (other suites share the server)."""
    assert model in custom_kinds(), f"{model.KIND} has no CRD of capa-py's"
    install_capa_crds(peer)
    yield
