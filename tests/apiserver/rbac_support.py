"""An RBAC-enforcing ``capa serve`` for the authorization tests, and the same callers on kube-apiserver.

On both servers each caller presents a client certificate of the server's CA (user = common name, groups =
organizations), as a Kubernetes API server authenticates it.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capa_py.apiserver.rbac import default_authorizer
from capa_py.apiserver.server import start_in_thread
from capa_py.store import SQLiteStore
from tests.peers.cluster import PeerCluster

MASTERS = ("system:masters", "system:authenticated")


@dataclass(frozen=True)
class Caller:
    """Who sends a request: a user and its groups (what authentication would find)."""

    user: str
    groups: tuple[str, ...] = ("system:authenticated",)


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


@dataclass
class Side:
    """One API server as the tests' callers reach it."""

    name: str
    url: str
    send_as: Callable[[Caller, str, str, Any], Answer]
    stop: Callable[[], None] = field(default=lambda: None)

    def send(self, caller: Caller, method: str, path: str, body: Any = None) -> Answer:
        return self.send_as(caller, method, path, body)


def _send(
    url: str, context: ssl.SSLContext | None, headers: dict[str, str], method: str, body: Any
) -> Answer:
    """One request; a watch that is answered 200 is closed at once (its status is what is compared)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Accept", "application/json")
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    if data is not None:
        request.add_header("Content-Type", content_type)
    for key, value in headers.items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            if "watch=" in url:
                return Answer(response.status, None)
            return Answer(response.status, _decode(response.read()))
    except urllib.error.HTTPError as exc:
        with exc:
            return Answer(exc.code, _decode(exc.read()))


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw.decode(errors="replace")


@contextmanager
def enforcing_server(path: Path) -> Iterator[Side]:
    """``capa serve`` over a new store at ``path``, enforcing RBAC (system:masters, then the stored RBAC),
    with the system namespaces and bootstrap policy created as ``serve`` creates them."""
    store = SQLiteStore(path, poll_interval=0.02)
    server = start_in_thread(store, bookmark_interval=0.3, authorizer=default_authorizer(store))
    contexts: dict[Caller, ssl.SSLContext] = {}

    def context(caller: Caller) -> ssl.SSLContext:
        if not caller.user:
            return ssl.create_default_context(cadata=server.ca_pem.decode())  # the anonymous caller
        if caller not in contexts:
            groups = tuple(g for g in caller.groups if g != "system:authenticated")
            contexts[caller] = server.client_context(caller.user, groups)
        return contexts[caller]

    def send(caller: Caller, method: str, path_: str, body: Any) -> Answer:
        return _send(server.url + path_, context(caller), {}, method, body)

    try:
        yield Side("capa serve", server.url, send)
    finally:
        server.stop()
        store.close()


def peer_side(cluster: PeerCluster, directory: Path) -> Side:
    """kube-apiserver, each caller with a client certificate of its own."""
    directory.mkdir(parents=True, exist_ok=True)
    contexts: dict[Caller, ssl.SSLContext] = {}

    def context(caller: Caller) -> ssl.SSLContext:
        if not caller.user:
            return cluster.ssl_context()  # no client certificate: the anonymous caller
        if caller not in contexts:
            # The API server adds system:authenticated itself; a certificate carries the other groups.
            groups = tuple(g for g in caller.groups if g != "system:authenticated")
            cert, key = cluster.authority.issue(caller.user, groups, client=True)
            stem = directory / f"caller-{len(contexts)}"
            stem.with_suffix(".crt").write_bytes(cert)
            stem.with_suffix(".key").write_bytes(key)
            contexts[caller] = cluster.ssl_context(stem.with_suffix(".crt"), stem.with_suffix(".key"))
        return contexts[caller]

    def send(caller: Caller, method: str, path_: str, body: Any) -> Answer:
        return _send(cluster.url + path_, context(caller), {}, method, body)

    return Side("kube-apiserver", cluster.url, send)


ADMIN = Caller("admin", MASTERS)
ANONYMOUS = Caller("", ())
"""No credentials: ``system:anonymous`` on both servers."""


def apply_all(side: Side, documents: list[dict[str, Any]]) -> None:
    """Create each document as the admin (its collection path from apiVersion, kind and namespace)."""
    for doc in documents:
        answer = side.send(ADMIN, "POST", collection_path(doc), doc)
        assert answer.status in (201, 409), (side.name, doc["metadata"]["name"], answer)


_PLURALS = {
    "Role": "roles",
    "ClusterRole": "clusterroles",
    "RoleBinding": "rolebindings",
    "ClusterRoleBinding": "clusterrolebindings",
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
}


def collection_path(doc: dict[str, Any]) -> str:
    api_version = doc["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    namespace = doc["metadata"].get("namespace")
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{scope}/{_PLURALS[doc['kind']]}"
