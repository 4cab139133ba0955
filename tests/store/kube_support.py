"""Helpers of the kube store tests: a client for a served store, a TCP proxy that cuts connections, and
capa-py's CRDs on a real kube-apiserver with a way to empty it between tests."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from dataclasses import dataclass, field

from kubernetes import client, config

from capa_py.api.coordination import Lease
from capa_py.api.core import ConfigMap, Event, Secret
from capa_py.api.meta import KubeObject
from capa_py.apiserver import RunningServer
from capa_py.manifests.crds import custom_kinds
from capa_py.store.errors import AlreadyExists, NotFound
from capa_py.store.kube import KubeStore
from tests.peers.cluster import PeerCluster
from tests.peers.crds import install_capa_crds
from tests.support.eventually import eventually

_REQUEST_LINE = re.compile(rb"(GET|POST|PUT|PATCH|DELETE) (\S+) HTTP/1\.1\r\n")
_BOOKMARK = re.compile(rb'"type":"BOOKMARK".*?"resourceVersion":"(\d+)"')


def api_client_for(running: RunningServer | str, through: str | None = None) -> client.ApiClient:
    """The official client of ``running`` as its admin: with its kubeconfig (a client certificate), or,
    ``through`` a proxy to a server of plain HTTP, with its admin bearer token. Given a URL: a client of
    that URL without credentials."""
    configuration = client.Configuration()
    if isinstance(running, str):
        configuration.host = running
    elif through is None:
        config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
            running.kubeconfig(), client_configuration=configuration, persist_config=False
        )
    else:
        configuration.host = through
        configuration.api_key = {"authorization": f"Bearer {running.admin_token}"}
    return client.ApiClient(configuration)


@dataclass
class _Pair:
    downstream: socket.socket
    upstream: socket.socket


@dataclass
class CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream`` (host, port). :meth:`cut` drops every open
    connection at once, in both directions, while new connections keep working. It records the path of
    every request it relays (``requests``) and the resourceVersion of every BOOKMARK the server sent back
    (``bookmarks``), so tests can see what a client asked for and what it was told."""

    upstream: tuple[str, int]
    requests: list[str] = field(default_factory=list)
    bookmarks: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="test-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream)
            except OSError:  # the server is gone (a test tearing down): refuse as it would
                downstream.close()
                continue
            with self._lock:
                self._pairs.append(_Pair(downstream, upstream))
            threading.Thread(target=self._relay, args=(downstream, upstream, True), daemon=True).start()
            threading.Thread(target=self._relay, args=(upstream, downstream, False), daemon=True).start()

    def _relay(self, source: socket.socket, target: socket.socket, requests: bool) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
                # Recorded once relayed: a bookmark seen here is on its way to the client.
                with self._lock:
                    if requests:
                        self.requests.extend(m.group(2).decode() for m in _REQUEST_LINE.finditer(data))
                    else:
                        self.bookmarks.extend(int(m.group(1)) for m in _BOOKMARK.finditer(data))
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def watch_requests(self) -> list[str]:
        with self._lock:
            return [path for path in self.requests if "watch=" in path]

    def open_connections(self) -> int:
        """How many connections are being relayed (TLS included: nothing of the stream is read)."""
        with self._lock:
            return len(self._pairs)

    def cut(self) -> int:
        """Drop every open connection; how many there were."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in (pair.downstream, pair.upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        return len(pairs)

    def close(self) -> None:
        self._listener.close()
        self.cut()


TEST_NAMESPACES = ("default", "team-a", "team-b", "anything")
"""Namespaces the contract tests write to (a real API server refuses objects in a missing namespace)."""
CREATED_NAMESPACES = ("team",)
"""Namespaces a contract test creates itself: deleted again between tests."""


def install_crds(cluster: PeerCluster) -> None:
    """capa-py's CRDs (``capa manifests crds``) and :data:`TEST_NAMESPACES`, once served."""
    from capa_py.api.core import Namespace

    install_capa_crds(cluster)
    with KubeStore.from_kubeconfig(cluster.admin_kubeconfig) as store:
        for name in TEST_NAMESPACES:
            with contextlib.suppress(AlreadyExists):
                store.create(Namespace.model_validate({"metadata": {"name": name}}))


def purge(cluster: PeerCluster) -> None:
    """Delete every object of capa-py's kinds (custom ones, Secrets, ConfigMaps, Events, Leases) in the
    test namespaces, finalizers removed first, and the namespaces tests create; wait until they are gone."""
    from capa_py.api.core import Namespace

    kinds: list[type[KubeObject]] = [*custom_kinds(), Secret, ConfigMap, Event, Lease]
    with KubeStore.from_kubeconfig(cluster.admin_kubeconfig) as store:
        for name in CREATED_NAMESPACES:
            with contextlib.suppress(NotFound):
                store.delete(Namespace, name)
        custom = set(custom_kinds())
        for kind in kinds:
            # capa-py's own kinds in every namespace (other suites share this server); Kubernetes' kinds only
            # in the test namespaces (kube-system's Leases and ConfigMaps belong to the control plane).
            scopes: list[str | None] = [None] if kind in custom else list(TEST_NAMESPACES)
            for namespace in scopes:
                for obj in store.list(kind, namespace=namespace):
                    if kind is ConfigMap and obj.name == "kube-root-ca.crt":
                        continue
                    if obj.metadata.finalizers:
                        obj.metadata.finalizers = []
                        obj.metadata.resource_version = None
                        with contextlib.suppress(NotFound):
                            store.update(obj)
                    with contextlib.suppress(NotFound):
                        store.delete(kind, obj.name, obj.metadata.namespace)

        def emptied() -> bool:
            return not (
                any(store.list(k) for k in custom)
                or any(
                    o.name != "kube-root-ca.crt"
                    for k in kinds
                    if k not in custom
                    for ns in TEST_NAMESPACES
                    for o in store.list(k, ns)
                )
                or any(_exists(store, Namespace, n) for n in CREATED_NAMESPACES)
            )

        eventually(emptied, "the real API server emptied", timeout=60, interval=0.05)


def _exists(store: KubeStore, kind: type[KubeObject], name: str) -> bool:
    try:
        store.get(kind, name)
    except NotFound:
        return False
    return True
