"""The Tinkerbell workflow server: ``WorkflowService`` v2 over gRPC, on any object store.

Wire ids: a workflow's ``workflow_id`` is ``<namespace>/<name>``; an action's ``id`` is the action's name
(names are unique within a workflow). An agent's ``agent_id`` is its Hardware's name or any of its MAC
addresses, in any case and in colon, dash or dot notation.

``GetWorkflows`` opens the agent's command stream; what is sent on it, and what ``PublishEvent`` does, is
decided by :class:`capa_py.tinkerbell.dispatch.Dispatcher`. Status codes: an empty ``agent_id``, a missing
event or empty ids are ``INVALID_ARGUMENT``; an unknown workflow or action ``NOT_FOUND``; an event the
workflow's state does not allow ``FAILED_PRECONDITION``; an agent id matching two Hardware
``FAILED_PRECONDITION`` (naming both); a second stream for a Hardware that has one ``ALREADY_EXISTS``.

Every call must prove which Hardware it comes from (:mod:`capa_py.tinkerbell.agentauth`): a bearer token
in the ``authorization`` metadata, or, when the server is given a client CA, the client certificate TLS
requires. No credentials: ``UNAUTHENTICATED`` (unless ``allow_unauthenticated_agents``, and then only for
Hardware without ``agentCredentialsRef``); credentials of another Hardware: ``PERMISSION_DENIED``, for a
stream (before anything is sent on it) and for an event (checked against the workflow's Hardware).

Acknowledging a StopWorkflow (as the protobuf's header says): ``ActionFailed`` with reason ``Canceled``
for the running action, or ``WorkflowRejected`` with reason ``Canceled`` when none runs; either moves the
Cancelling workflow to Canceled (so does ``ActionFailed`` reason ``Canceled`` naming the next action, which
the agent did not start).

The server runs on its own asyncio loop in a background thread (:func:`start_in_thread`); the
``grpc.health.v1`` service answers SERVING while it runs. TLS is used when a certificate and key are
given. Env values of actions (they may carry secrets) and tokens are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry, Counter, Gauge

from capa_py.logging import get_logger
from capa_py.runtime.background import Ready, RunningServer, start_loop_thread
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore
from capa_py.tinkerbell import agentauth
from capa_py.tinkerbell.backoff import Backoff, Clock, wall_clock
from capa_py.tinkerbell.dispatch import Dispatcher, Refused
from capa_py.tinkerbell.proto import workflow_pb2 as pb
from capa_py.tinkerbell.proto import workflow_pb2_grpc as pb_grpc

_log = get_logger("tinkerbell.server")

DEFAULT_PORT = 42113
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["WorkflowService"].full_name
SERVER_OPTIONS: list[tuple[str, Any]] = [
    # A port another socket holds is an error, not a shared port.
    ("grpc.so_reuseport", 0),
    # Command streams are idle for long stretches: ping agents so a vanished one is noticed (its stream
    # ends, its hardware may be served to its next connection), and let agents ping every 10s themselves.
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
]


class ServerMetrics:
    """The workflow server's Prometheus series, registered on ``registry`` (``capa controller``'s, so
    its metrics endpoint shows them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.connected = Gauge(
            "tink_server_connected_agents", "Agents with an open GetWorkflows stream", registry=registry
        )
        self.dispatches = Counter(
            "tink_server_dispatches_total", "Workflows sent to an agent as StartWorkflow", registry=registry
        )
        self.stops = Counter(
            "tink_server_stops_total", "StopWorkflow commands sent to agents", registry=registry
        )
        self.events = Counter(
            "tink_server_events_total",
            "Events published, by type and result (ok or the gRPC status code)",
            ["type", "result"],
            registry=registry,
        )
        self.rejections = Counter(
            "tink_server_rejections_total", "Workflows rejected by their agent", registry=registry
        )

    def agents(self, count: int) -> None:
        self.connected.set(count)

    def dispatched(self) -> None:
        self.dispatches.inc()

    def stopped(self) -> None:
        self.stops.inc()

    def event(self, kind: str, result: str) -> None:
        self.events.labels(type=kind, result=result).inc()

    def rejected(self) -> None:
        self.rejections.inc()


@dataclass(frozen=True)
class TLSFiles:
    """The server's certificate and key; with ``client_ca``, every client must present a certificate
    that CA signed (mutual TLS), which then names the client's Hardware."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        pairs = [(self.key.read_bytes(), self.cert.read_bytes())]
        if self.client_ca is None:
            return grpc.ssl_server_credentials(pairs)
        return grpc.ssl_server_credentials(
            pairs, root_certificates=self.client_ca.read_bytes(), require_client_auth=True
        )


def check_tls(
    cert: Path | None, key: Path | None, prefix: str = "--", client_ca: Path | None = None
) -> TLSFiles | None:
    """The TLS files, checked loadable as a PEM certificate and its private key (and ``client_ca`` as
    PEM certificates); ValueError naming the flag (``{prefix}tls-cert``/``{prefix}tls-key``/
    ``{prefix}tls-client-ca``) otherwise. None when none is given."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    if client_ca is not None:
        if cert is None or key is None:
            raise ValueError(f"{prefix}tls-client-ca needs {prefix}tls-cert and {prefix}tls-key")
        try:
            x509.load_pem_x509_certificates(client_ca.read_bytes())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{prefix}tls-client-ca {client_ca}: not a PEM certificate ({exc})") from exc
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError(f"{prefix}tls-cert and {prefix}tls-key go together")
    try:
        certificate = x509.load_pem_x509_certificate(cert.read_bytes())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{prefix}tls-cert {cert}: not a PEM certificate ({exc})") from exc
    try:
        private = load_pem_private_key(key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{prefix}tls-key {key}: not an unencrypted PEM private key ({exc})") from exc
    if _public_der(certificate.public_key()) != _public_der(private.public_key()):
        raise ValueError(f"{prefix}tls-key {key}: does not match the certificate {cert}")
    return TLSFiles(cert, key, client_ca)


def _public_der(key: Any) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return bytes(key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo))


class _Abort:
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code = code
        self.message = message


class StreamOutbox:
    """A session's commands, handed from any thread to the stream's coroutine."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.queue: asyncio.Queue[pb.GetWorkflowsResponse | _Abort] = asyncio.Queue()

    def _put(self, item: pb.GetWorkflowsResponse | _Abort) -> None:
        # A closed loop means the server stopped, and the stream with it.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def send(self, response: pb.GetWorkflowsResponse) -> None:
        self._put(response)

    def abort(self, code: grpc.StatusCode, message: str) -> None:
        self._put(_Abort(code, message))


class WorkflowService(pb_grpc.WorkflowServiceServicer):
    """The gRPC face of a :class:`Dispatcher`."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._open: set[StreamOutbox] = set()
        self._stopping = False

    async def end_streams(self, timeout: float) -> None:
        """Tell every connected agent the service is stopping (UNAVAILABLE: they reconnect), and give the
        streams ``timeout`` to end. Streams still open when the server stops are cancelled instead, which
        gRPC reports as unhandled errors. A stream still connecting is told too, and one that opens after
        this is told at once."""
        self._stopping = True
        for outbox in list(self._open):
            outbox.abort(grpc.StatusCode.UNAVAILABLE, "the workflow service is stopping")
        deadline = asyncio.get_running_loop().time() + timeout
        while self._open and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    async def GetWorkflows(
        self, request: pb.GetWorkflowsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.GetWorkflowsResponse]:
        outbox = StreamOutbox(asyncio.get_running_loop())
        if self._stopping:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the workflow service is stopping")
        # Open before it connects: a stop while the dispatcher registers the session tells this stream too.
        self._open.add(outbox)
        credentials = _credentials(context)
        try:
            session = await asyncio.to_thread(self.dispatcher.connect, request.agent_id, outbox, credentials)
        except Refused as exc:
            self._open.discard(outbox)
            await context.abort(exc.code, exc.message)
        except BaseException:
            self._open.discard(outbox)
            raise
        try:
            while True:
                item = await outbox.queue.get()
                if isinstance(item, _Abort):
                    await context.abort(item.code, item.message)
                yield item
        finally:
            self._open.discard(outbox)
            self.dispatcher.disconnect(session)

    async def PublishEvent(
        self, request: pb.PublishEventRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PublishEventResponse:
        if not request.HasField("event"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "event: required")
        try:
            await asyncio.to_thread(self.dispatcher.publish, request.event, _credentials(context))
        except Refused as exc:
            await context.abort(exc.code, exc.message)
        except StoreError as exc:
            _log.warning(
                "cannot apply an event: the store failed", workflow=request.event.workflow_id, error=str(exc)
            )
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the store failed: {exc}")
        return pb.PublishEventResponse()


def _credentials(context: grpc.aio.ServicerContext[Any, Any]) -> agentauth.Credentials:
    return agentauth.from_call(context.invocation_metadata(), context.auth_context())


class RunningWorkflowServer(RunningServer):
    """The workflow server on its own event loop; ``address`` is ``host:port``."""

    def __init__(self, address: str, port: int, handle: Any, dispatcher: Dispatcher) -> None:
        super().__init__(address, port, handle)
        self.address = address
        self.dispatcher = dispatcher

    def stop(self, timeout: float = 30.0) -> None:
        super().stop(timeout)
        self.dispatcher.stop()


def _check_free(bind: str, port: int) -> None:
    """OSError (with the system's reason) when ``bind:port`` cannot be listened on; gRPC's own failure
    says less. Port 0 always can."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As gRPC binds: a port whose old connections linger in TIME_WAIT is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((bind.strip("[]"), port))


def _address(bind: str, port: int) -> str:
    host = f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind
    return f"{host}:{port}"


def start_in_thread(
    store: ObjectStore,
    bind: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    tls: TLSFiles | None = None,
    backoff: Backoff | None = None,
    clock: Clock = wall_clock,
    registry: CollectorRegistry | None = None,
    allow_unauthenticated_agents: bool = False,
) -> RunningWorkflowServer:
    """Serve the workflow service in a background thread; returns once it serves (OSError when the
    address cannot be bound). Metrics go to ``registry`` (a private one when None). Agents without
    credentials are refused unless ``allow_unauthenticated_agents`` (then only for Hardware without
    ``spec.agentCredentialsRef``)."""
    metrics = ServerMetrics(registry if registry is not None else CollectorRegistry())
    dispatcher = Dispatcher(store, backoff, clock, metrics, allow_unauthenticated_agents)
    try:
        dispatcher.start()
    except BaseException:
        dispatcher.stop()
        raise

    async def serve(stopping: asyncio.Event, ready: Ready) -> None:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        service = WorkflowService(dispatcher)
        pb_grpc.add_WorkflowServiceServicer_to_server(service, server)
        checks = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checks, server)
        address = _address(bind, port)
        _check_free(bind, port)
        try:
            bound = (
                server.add_secure_port(address, tls.credentials())
                if tls
                else server.add_insecure_port(address)
            )
        except RuntimeError as exc:
            raise OSError(errno.EADDRINUSE, f"cannot bind {address} ({exc})") from exc
        if not bound:
            raise OSError(errno.EADDRINUSE, f"cannot bind {address}")
        await server.start()
        for name in ("", SERVICE_NAME):
            await checks.set(name, health_pb2.HealthCheckResponse.SERVING)
        served = _address(bind, bound)
        _log.info(
            "serving the workflow service",
            address=served,
            tls=tls is not None,
            client_certificates=tls is not None and tls.client_ca is not None,
            unauthenticated_agents=allow_unauthenticated_agents,
        )
        ready({"address": served, "port": bound})
        try:
            await stopping.wait()
        finally:
            await checks.enter_graceful_shutdown()
            await service.end_streams(timeout=1.0)
            await server.stop(grace=1.0)
            _log.info("workflow service stopped", address=served)

    try:
        info, handle = start_loop_thread(serve, "capa-tink-server")
    except BaseException:
        dispatcher.stop()
        raise
    return RunningWorkflowServer(info["address"], info["port"], handle, dispatcher)


__all__ = [
    "DEFAULT_PORT",
    "RunningWorkflowServer",
    "ServerMetrics",
    "TLSFiles",
    "WorkflowService",
    "check_tls",
    "start_in_thread",
]
