"""Helpers of the tests that ask ``capa serve`` and the real API server the same thing and compare.

:class:`Endpoint` sends one raw request to either server and returns what a client observes (status, headers,
body). capa-py's CRDs go on the real API server with :func:`tests.peers.crds.install_capa_crds`, and kubectl
is found by :mod:`tests.peers.kubectl`.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

from capa_py.apiserver import RunningServer
from tests.apiserver.apiserver_support import Server
from tests.peers.cluster import PeerCluster

"""Where versioned kubectl binaries (``kubectl.1.27`` ...) are looked for after PATH."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Message
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")

    def warnings(self) -> list[str]:
        return list(self.headers.get_all("Warning") or [])


@dataclass(frozen=True)
class Endpoint:
    """An API server as a client reaches it: its URL, the TLS context (client certificate) if any, and a
    kubeconfig for kubectl."""

    name: str
    url: str
    kubeconfig: Path
    context: ssl.SSLContext | None = field(default=None, compare=False)

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=60) as response:
                return Reply(response.status, response.headers, response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                return Reply(exc.code, exc.headers, exc.read())


def capa_endpoint(server: RunningServer | Server, directory: Path) -> Endpoint:
    """``capa serve`` running in this process, as its admin (a client certificate in ``system:masters``),
    with a kubeconfig for it written under ``directory``."""
    running = server.running if isinstance(server, Server) else server
    directory.mkdir(parents=True, exist_ok=True)
    path = running.write_kubeconfig(directory / "capa.kubeconfig")
    return Endpoint("capa serve", running.url, path, running.client_context())


def peer_endpoint(peer: PeerCluster) -> Endpoint:
    return Endpoint("kube-apiserver", peer.url, peer.admin_kubeconfig, peer.admin_context())


@contextlib.contextmanager
def scratch_namespace(*endpoints: Endpoint, prefix: str = "capa-test") -> Iterator[str]:
    """A namespace of a new name on every endpoint (the real API server is shared by the whole session),
    deleted afterwards."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    for endpoint in endpoints:
        reply = endpoint.send("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        assert reply.status == 201, (endpoint.name, reply.body)
    try:
        yield name
    finally:
        for endpoint in endpoints:
            endpoint.send("DELETE", f"/api/v1/namespaces/{name}")
