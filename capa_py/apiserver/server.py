"""Running the API server: :func:`serve` on an event loop until told to stop, and :func:`start_in_thread`
(a :class:`RunningServer` on a background thread, over HTTPS with a certificate authority of its own).

The application itself is :mod:`~capa_py.apiserver.routing` (:func:`build_app`, :class:`ApiServer`); its
handlers of resources are :mod:`~capa_py.apiserver.handlers`.
"""

from __future__ import annotations

import asyncio
import secrets
import ssl
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from capa_py.apiserver import reviews
from capa_py.apiserver.authentication import ADMIN, Authenticator, ServiceAccountTokens
from capa_py.apiserver.bootstrap_policy import ensure_bootstrap_policy
from capa_py.apiserver.certificates import ServingFiles, ephemeral_serving_files, serving_hosts
from capa_py.apiserver.handlers import MAX_REQUEST_BODY
from capa_py.apiserver.namespaces import ensure_system_namespaces
from capa_py.apiserver.rbac import Authorizer, default_authorizer
from capa_py.apiserver.routing import ApiServer, build_app
from capa_py.logging import get_logger
from capa_py.runtime.background import BackgroundLoop, Ready, start_loop_thread
from capa_py.store.identity import publish_identity
from capa_py.store.protocol import ObjectStore

__all__ = [
    "LOOPBACK_BINDS",
    "MAX_REQUEST_BODY",
    "ApiServer",
    "RunningServer",
    "build_app",
    "serve",
    "start_in_thread",
]

_log = get_logger("apiserver")


async def _start(
    app: web.Application, bind: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, bind, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        # Setting up started the application's threads (the foreground collector): stop them.
        await runner.cleanup()
        raise
    host, bound_port = runner.addresses[0][:2]
    host = f"[{host}]" if ":" in host else host
    return runner, f"{'https' if ssl_context else 'http'}://{host}:{bound_port}"


async def serve(
    store: ObjectStore,
    bind: str,
    port: int,
    stopping: asyncio.Event,
    on_ready: Callable[[str], None],
    bookmark_interval: float = 5.0,
    max_watches: int = 64,
    ssl_context: ssl.SSLContext | None = None,
    *,
    authenticator: Authenticator,
    authorizer: Authorizer | None = None,
) -> None:
    """Serve until ``stopping`` is set (over HTTPS with ``ssl_context``), authenticating every request with
    ``authenticator`` and authorizing it with ``authorizer`` (by default :func:`~capa_py.apiserver.rbac.
    default_authorizer`: ``system:masters``, then the stored RBAC); ``on_ready`` gets the URL once the port
    is bound. The system Namespaces (``default``...) are created first where missing, and the store's
    identity is published (the ``capa-py-system/capa-py-store`` ConfigMap), so that clients of the served
    store share the identity of the store itself. The bootstrap RBAC policy is created where missing
    (:mod:`capa_py.apiserver.bootstrap_policy`)."""
    await asyncio.to_thread(ensure_system_namespaces, store)
    await asyncio.to_thread(ensure_bootstrap_policy, store)
    await asyncio.to_thread(publish_identity, store, store.uid)
    app = build_app(
        store,
        bookmark_interval=bookmark_interval,
        max_watches=max_watches,
        authenticator=authenticator,
        authorizer=authorizer if authorizer is not None else default_authorizer(store),
    )
    runner, url = await _start(app, bind, port, ssl_context)
    _log.info("serving the store over the Kubernetes API", url=url)
    try:
        on_ready(url)
        await stopping.wait()
    finally:
        transports = [c.transport for c in getattr(runner.server, "connections", ()) if c.transport]
        await runner.cleanup()
        # A TLS connection closes by waiting for the client's close_notify, which an idle keep-alive
        # client never sends: end those at once rather than leave their sockets to the closed loop.
        for transport in transports:
            transport.abort()
        await asyncio.sleep(0)
        _log.info("stopped serving", url=url)


LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")


class RunningServer:
    """A server running on its own event loop in a background thread, over HTTPS with a certificate
    authority of its own; :meth:`kubeconfig` and :meth:`client_context` carry an admin client certificate
    (``system:masters``) of that authority."""

    def __init__(
        self,
        url: str,
        handle: BackgroundLoop,
        files: ServingFiles,
        holder: tempfile.TemporaryDirectory[str],
        admin_token: str,
    ) -> None:
        self.url = url
        self.admin_token = admin_token
        """A bearer token of the admin (``system:masters``), known to this server only while it runs."""
        self.files = files
        self._handle = handle
        self._holder = holder
        self._issued = 0

    @property
    def ca_pem(self) -> bytes:
        """The certificate authority's certificate (what clients trust; it signs client certificates)."""
        return self.files.ca_cert.read_bytes()

    def client_certificate(self, user: str, groups: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
        """A client certificate and key (PEM) for ``user`` in ``groups``, signed by the server's authority."""
        return self.files.authority().issue_client(user, groups)

    def kubeconfig(
        self, name: str = "capa", user: str = ADMIN.username, groups: tuple[str, ...] = ADMIN.groups
    ) -> dict[str, Any]:
        """A kubeconfig for this server with a client certificate for ``user`` (the admin by default)."""
        from capa_py.apiserver.certificates import kubeconfig_document

        cert, key = self.client_certificate(user, groups)
        return kubeconfig_document(self.url, self.ca_pem, name, cert, key)

    def write_kubeconfig(self, path: Path, name: str = "capa") -> Path:
        """Write :meth:`kubeconfig` (the admin's) to ``path``, readable by its owner only."""
        from capa_py.apiserver.certificates import write_kubeconfig

        write_kubeconfig(path, self.kubeconfig(name))
        return path

    def client_context(
        self, user: str = ADMIN.username, groups: tuple[str, ...] = ADMIN.groups
    ) -> ssl.SSLContext:
        """A TLS client context that trusts the server and presents a client certificate for ``user``."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        cert, key = self.client_certificate(user, groups)
        self._issued += 1
        cert_file = Path(self._holder.name) / f"client-{self._issued}.crt"
        key_file = cert_file.with_suffix(".key")
        cert_file.write_bytes(cert)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        context.load_cert_chain(cert_file, key_file)
        return context

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving (open watches end) and wait for the thread; stopping twice is harmless."""
        if not self._handle.stop(timeout):
            raise RuntimeError("the API server thread did not stop")
        self._holder.cleanup()


def start_in_thread(
    store: ObjectStore,
    bind: str = "127.0.0.1",
    port: int = 0,
    bookmark_interval: float = 5.0,
    max_watches: int = 64,
    tokens: Mapping[str, reviews.User] | None = None,
    insecure_http: bool = False,
    authorizer: Authorizer | None = None,
) -> RunningServer:
    """Start serving in a background thread and return once the port is bound: over HTTPS with a new
    certificate authority (in a temporary directory removed on stop), authenticating every request
    (client certificates of that authority, ServiceAccount tokens it issues, ``tokens`` (a static token
    file's users) and :attr:`RunningServer.admin_token`, a random bearer token of the admin).

    ``insecure_http`` serves plain HTTP instead, on a loopback address only (``ValueError`` otherwise), for
    tests that must read the bytes on the wire: requests are still authenticated, by bearer token only."""
    if insecure_http and bind not in LOOPBACK_BINDS:
        raise ValueError(f"plain HTTP is served on a loopback address only, not {bind}")
    files, holder = ephemeral_serving_files(serving_hosts(bind))
    admin_token = secrets.token_urlsafe(32)
    known = {**(tokens or {}), admin_token: ADMIN}
    authenticator = Authenticator(store, ServiceAccountTokens(files.signing_key.read_bytes()), known)
    context = None if insecure_http else files.server_context()

    async def server(stopping: asyncio.Event, ready: Ready) -> None:
        await serve(
            store,
            bind,
            port,
            stopping,
            lambda url: ready({"url": url}),
            bookmark_interval,
            max_watches,
            context,
            authenticator=authenticator,
            authorizer=authorizer,
        )

    try:
        info, handle = start_loop_thread(server, "capa-apiserver")
    except Exception as exc:
        holder.cleanup()
        raise RuntimeError(f"the API server did not start: {exc}") from exc
    return RunningServer(info["url"], handle, files, holder, admin_token)
