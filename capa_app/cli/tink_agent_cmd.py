"""``capa tink agent``: run the Tinkerbell agent (:mod:`capa_py.tinkerbell.agent`) on this machine.

``capa tink agent --id AGENT_ID [--server HOST:PORT] [--tls-ca PEM] [--tls-cert PEM --tls-key PEM]
[--token-file FILE] [--runtime process|docker] [--action-timeout 1h] [--reconnect-max 30s]
[--stop-grace 10s] [--once]`` connects to the workflow server
and runs the workflows it dispatches until SIGTERM or SIGINT (which stop the running action; exit 0).
It prints ``agent: AGENT_ID via SERVER (runtime R)`` once it starts and ``stopped`` when it ends. With
``--once`` it exits after one workflow has ended: 0 when every action succeeded, 1 otherwise. Bad flags
exit 2 naming the flag; ``--runtime docker`` without a Docker engine that answers exits 1.

The agent proves its Hardware with the token ``capa tink agent-credentials`` issued, read from
``--token-file`` (read again for each call) or from the ``CAPA_TINK_AGENT_TOKEN`` environment variable
(never a flag: arguments show in ``ps``), and/or with a client certificate (``--tls-cert``/``--tls-key``,
with ``--tls-ca``) naming ``<hardware>.<namespace>``.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from capa_app.cli.common import EXIT_FAILED, EXIT_INVALID, fail
from capa_app.cli.durations import parse_duration

SERVER_HELP = "The workflow server, HOST:PORT."
TLS_CA_HELP = (
    "PEM file of the CA that signed the server's certificate: the connection uses TLS and verifies the "
    "server. Without it the connection is plaintext."
)
DEFAULT_SERVER = "127.0.0.1:42113"
TOKEN_FILE_HELP = (
    "File holding the token that proves this machine's Hardware (capa tink agent-credentials issues it); "
    "read again for each call. Without it the token is taken from $CAPA_TINK_AGENT_TOKEN, if set."
)
TLS_CERT_HELP = (
    "PEM client certificate (with --tls-key and --tls-ca) for a server that requires one; its CN or a DNS "
    "SAN is <hardware>.<namespace>."
)
ACTION_TIMEOUT_HELP = "Longest an action may run before it is stopped (reason Timeout)."
RUNTIME_HELP = "How actions run: 'process' (host processes; images are not pulled) or 'docker' (containers)."


def checked_server(server: str) -> str:
    """``HOST:PORT`` with a port in 1..65535; exits 2 naming ``--server`` otherwise."""
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        fail(f"--server {server!r}: expected HOST:PORT with a port between 1 and 65535", EXIT_INVALID)
    return server


def checked_duration(flag: str, text: str) -> float:
    """A positive duration (``90s``, ``15m``, ``1h``, seconds); exits 2 naming ``flag`` otherwise."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        fail(f"{flag}: {exc}", EXIT_INVALID)
    if seconds <= 0:
        fail(f"{flag}: must be more than zero, not {text!r}", EXIT_INVALID)
    return seconds


def checked_ca(path: Path | None) -> bytes | None:
    """The PEM bytes of ``--tls-ca``; exits 2 when the file cannot be read or holds no certificate."""
    if path is None:
        return None
    try:
        pem = path.read_bytes()
    except OSError as exc:
        fail(f"--tls-ca {path}: {exc.strerror or exc}", EXIT_INVALID)
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        fail(f"--tls-ca {path}: not a PEM certificate", EXIT_INVALID)
    return pem


def checked_token_file(path: Path | None) -> Path | None:
    """``--token-file``, readable and not empty; exits 2 naming the flag otherwise."""
    if path is None:
        return None
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--token-file {path}: {getattr(exc, 'strerror', None) or exc}", EXIT_INVALID)
    if not text:
        fail(f"--token-file {path}: the file is empty", EXIT_INVALID)
    return path


def checked_client_certificate(
    cert: Path | None, key: Path | None, ca: bytes | None
) -> tuple[bytes | None, bytes | None]:
    """The client certificate and key PEM; exits 2 naming the flag that is wrong."""
    if cert is None and key is None:
        return None, None
    if cert is None or key is None:
        fail("--tls-cert and --tls-key go together", EXIT_INVALID)
    if ca is None:
        fail("--tls-cert needs --tls-ca (a client certificate is only sent over TLS)", EXIT_INVALID)
    pems: list[bytes] = []
    for flag, path, marker in (
        ("--tls-cert", cert, b"CERTIFICATE-----"),
        ("--tls-key", key, b"PRIVATE KEY-----"),
    ):
        try:
            pem = path.read_bytes()
        except OSError as exc:
            fail(f"{flag} {path}: {exc.strerror or exc}", EXIT_INVALID)
        if marker not in pem:
            fail(
                f"{flag} {path}: not a PEM {'certificate' if flag == '--tls-cert' else 'private key'}",
                EXIT_INVALID,
            )
        pems.append(pem)
    return pems[0], pems[1]


def agent(
    agent_id: Annotated[
        str,
        typer.Option(
            "--id", metavar="AGENT_ID", help="This machine's id: its Hardware's name or one of its MACs."
        ),
    ],
    server: Annotated[str, typer.Option("--server", help=SERVER_HELP, metavar="HOST:PORT")] = DEFAULT_SERVER,
    tls_ca: Annotated[Path | None, typer.Option("--tls-ca", help=TLS_CA_HELP, metavar="PEM")] = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help=TLS_CERT_HELP, metavar="PEM")] = None,
    tls_key: Annotated[
        Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.", metavar="PEM")
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help=TOKEN_FILE_HELP, metavar="FILE")
    ] = None,
    runtime: Annotated[
        str, typer.Option("--runtime", help=RUNTIME_HELP, metavar="process|docker")
    ] = "process",
    action_timeout: Annotated[
        str, typer.Option("--action-timeout", help=ACTION_TIMEOUT_HELP, metavar="DURATION")
    ] = "1h",
    reconnect_max: Annotated[
        str,
        typer.Option(
            "--reconnect-max", metavar="DURATION", help="Longest pause between reconnects and event retries."
        ),
    ] = "30s",
    stop_grace: Annotated[
        str,
        typer.Option(
            "--stop-grace",
            metavar="DURATION",
            help="Time between SIGTERM and SIGKILL when an action is stopped.",
        ),
    ] = "10s",
    once: Annotated[
        bool, typer.Option("--once", help="Exit after one workflow has ended (1 unless it succeeded).")
    ] = False,
) -> None:
    """Run the workflows the Tinkerbell workflow server dispatches to this machine, until interrupted."""
    from capa_py.tinkerbell.agent import DEFAULT_RECONNECT_INITIAL, Agent, AgentConfig
    from capa_py.tinkerbell.runtimes import DockerRuntime, DockerUnavailable, ProcessRuntime, Runtime

    if not agent_id.strip():
        fail("--id must not be empty", EXIT_INVALID)
    if runtime not in ("process", "docker"):
        fail(f"--runtime must be process or docker, not {runtime!r}", EXIT_INVALID)
    from capa_py.tinkerbell.agentauth import TOKEN_ENV

    ca = checked_ca(tls_ca)
    client_cert, client_key = checked_client_certificate(tls_cert, tls_key, ca)
    config = AgentConfig(
        agent_id=agent_id,
        server=checked_server(server),
        tls_ca=ca,
        tls_cert=client_cert,
        tls_key=client_key,
        token_file=checked_token_file(token_file),
        token=(os.environ.get(TOKEN_ENV) or "").strip() or None,
        action_timeout=checked_duration("--action-timeout", action_timeout),
        reconnect_initial=min(DEFAULT_RECONNECT_INITIAL, checked_duration("--reconnect-max", reconnect_max)),
        reconnect_max=checked_duration("--reconnect-max", reconnect_max),
        once=once,
    )
    grace = checked_duration("--stop-grace", stop_grace)
    chosen: Runtime
    if runtime == "docker":
        try:
            chosen = DockerRuntime.from_env(grace)
        except DockerUnavailable as exc:
            fail(f"--runtime docker: {exc}")
    else:
        chosen = ProcessRuntime(grace)
    running = Agent(config, chosen)
    worker = threading.Thread(target=running.run, name="tink-agent", daemon=True)
    signalled = threading.Event()

    def stop(*_: object) -> None:
        signalled.set()
        running.shutdown()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        print(f"agent: {agent_id} via {config.server} (runtime {runtime})", flush=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped", flush=True)
    finished = running.last_finished
    if once and not signalled.is_set() and finished is not None and not finished.succeeded:
        raise typer.Exit(EXIT_FAILED)


__all__ = [
    "agent",
    "checked_ca",
    "checked_client_certificate",
    "checked_duration",
    "checked_server",
    "checked_token_file",
]
