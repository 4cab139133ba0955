"""``capa serve``: the embedded store over the Kubernetes REST API, for kubectl and Kubernetes clients."""

from __future__ import annotations

import asyncio
import base64
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from capa_py.cli.common import EXIT_INVALID, fail, globals_of, stderr, stdout

NO_AUTHENTICATION = "capa-serve-authenticates-no-one"


def kubeconfig(url: str, name: str = "capa", ca_pem: bytes | None = None) -> dict[str, Any]:
    """A kubeconfig whose current context is the served store; over HTTPS it trusts ``ca_pem``.

    capa serve authenticates no one. Over HTTPS the user carries a placeholder token (sent, and ignored):
    with no credentials at all, kubectl asks for a username and password on an HTTPS server."""
    cluster: dict[str, Any] = {"server": url}
    user: dict[str, Any] = {}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
        user["token"] = NO_AUTHENTICATION
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }


def serve(
    ctx: typer.Context,
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on; 0 picks a free one.")] = 6443,
    write_kubeconfig: Annotated[
        Path | None,
        typer.Option("--write-kubeconfig", help="Write a kubeconfig for the served URL to this path."),
    ] = None,
    tls_cert_dir: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert-dir",
            help="Serve HTTPS with tls.crt and tls.key from this directory (ca.crt, when there, is the CA "
            "the written kubeconfig trusts; else tls.crt itself).",
        ),
    ] = None,
) -> None:
    """Serve the store over the Kubernetes API (HTTP, or HTTPS with --tls-cert-dir) until interrupted."""
    from capa_py.apiserver import serve as run_server
    from capa_py.webhooks import CERT_FILE, CertificateReloader, WebhookConfigError

    if not 0 <= port <= 65535:
        fail(f"--port must be between 0 and 65535, not {port}", EXIT_INVALID)
    if globals_of(ctx).remote:
        fail(
            "capa serve serves the SQLite store at --state, not an API server (--kubeconfig, --store kube)",
            EXIT_INVALID,
        )
    certificates = None
    ca_pem = None
    if tls_cert_dir is not None:
        try:
            certificates = CertificateReloader(tls_cert_dir, flag="--tls-cert-dir")
        except WebhookConfigError as exc:
            fail(str(exc), EXIT_INVALID)
        ca_file = tls_cert_dir / "ca.crt"
        ca_pem = (ca_file if ca_file.is_file() else tls_cert_dir / CERT_FILE).read_bytes()
    store = globals_of(ctx).store()
    if bind not in ("127.0.0.1", "localhost", "::1"):
        stderr.print(
            f"warning: serving on {bind} over {'HTTPS' if certificates else 'plain HTTP'} with no "
            "authentication: anyone who can reach it can read and change every object, Secrets included",
            markup=False,
            highlight=False,
        )

    def on_ready(url: str) -> None:
        if write_kubeconfig is not None:
            write_kubeconfig.parent.mkdir(parents=True, exist_ok=True)
            write_kubeconfig.write_text(yaml.safe_dump(kubeconfig(url, ca_pem=ca_pem), sort_keys=False))
        stdout.print(f"Serving {globals_of(ctx).state} on {url}", highlight=False, markup=False)
        if write_kubeconfig is not None:
            stdout.print(f"kubeconfig written to {write_kubeconfig}", highlight=False, markup=False)

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stopping.set)
        context = certificates.context if certificates is not None else None
        await run_server(store, bind, port, stopping, on_ready, ssl_context=context)

    try:
        asyncio.run(main())
    except OSError as exc:
        fail(f"cannot listen on {bind}:{port}: {exc.strerror or exc}")
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    app.command(name="serve")(serve)
