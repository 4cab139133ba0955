"""How the Tinkerbell agent reaches the workflow server: its configuration (``capa tink agent``'s flags),
the gRPC channel (reconnect back-off, keepalive, TLS and a client certificate) and the call metadata that
proves its Hardware (``authorization: Bearer TOKEN``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

DEFAULT_SERVER = "127.0.0.1:42113"
DEFAULT_ACTION_TIMEOUT = 3600.0
DEFAULT_RECONNECT_INITIAL = 0.5
DEFAULT_RECONNECT_MAX = 30.0
KEEPALIVE_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class AgentConfig:
    """What ``capa tink agent``'s flags set."""

    agent_id: str
    server: str = DEFAULT_SERVER
    tls_ca: bytes | None = None
    tls_cert: bytes | None = None
    """The client certificate (PEM) presented to a server that requires one, with ``tls_key``."""
    tls_key: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    """A file holding the token, read for each call (a rotated token is picked up without a restart)."""
    action_timeout: float = DEFAULT_ACTION_TIMEOUT
    reconnect_initial: float = DEFAULT_RECONNECT_INITIAL
    reconnect_max: float = DEFAULT_RECONNECT_MAX
    once: bool = False


def open_channel(config: AgentConfig) -> grpc.Channel:
    """The channel to ``config.server``: TLS when ``config.tls_ca`` is given, plaintext otherwise."""
    backoff_ms = int(config.reconnect_initial * 1000)
    options = [
        # The channel's own reconnects follow the agent's back-off, so a server that comes back is
        # found within reconnect_max rather than gRPC's default two minutes.
        ("grpc.initial_reconnect_backoff_ms", max(backoff_ms, 1)),
        ("grpc.min_reconnect_backoff_ms", max(backoff_ms, 1)),
        ("grpc.max_reconnect_backoff_ms", max(int(config.reconnect_max * 1000), 1)),
        # A server that vanished without closing the connection (power loss, a cut network) is noticed
        # by keepalive pings on the command stream; the workflow server allows one every 10 s.
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ]
    if config.tls_ca is not None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=config.tls_ca,
            private_key=config.tls_key,
            certificate_chain=config.tls_cert,
        )
        return grpc.secure_channel(config.server, credentials, options=options)
    return grpc.insecure_channel(config.server, options=options)


def call_metadata(config: AgentConfig, log: Any) -> tuple[tuple[str, str], ...]:
    """The call metadata proving the agent's Hardware (none without a token); ``token_file`` is read for
    each call."""
    token = config.token
    if config.token_file is not None:
        try:
            token = config.token_file.read_text().strip()
        except OSError as exc:
            log.warning("cannot read the token file", path=str(config.token_file), error=str(exc))
            token = None
    return (("authorization", f"Bearer {token}"),) if token else ()
