"""``capa serve``: the embedded store over the Kubernetes REST API, for kubectl and Kubernetes clients.

It serves HTTPS and authenticates every request (:mod:`capa_py.apiserver.authentication`). Without TLS
flags it makes a certificate authority, a serving certificate and a ServiceAccount token signing key once,
in ``<state>.serve/`` beside the store, and reuses them; ``--write-kubeconfig`` writes a kubeconfig with an
admin client certificate (``system:masters``) of that authority."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from capa_app.cli.common import EXIT_INVALID, fail, globals_of, stderr, stdout

LOOPBACK = ("127.0.0.1", "localhost", "::1")
SERVE_DIRECTORY_SUFFIX = ".serve"


def serving_directory(state: Path) -> Path:
    """Where ``capa serve`` keeps the certificate authority and keys of the store at ``state``."""
    return state.with_name(state.name + SERVE_DIRECTORY_SUFFIX)


def admin_kubeconfig(url: str, directory: Path, name: str = "capa") -> dict[str, Any]:
    """A kubeconfig for the server at ``url`` whose serving files are in ``directory``: it trusts the
    directory's certificate authority and carries a new admin client certificate (``system:masters``)."""
    from capa_py.apiserver.authentication import ADMIN
    from capa_py.apiserver.certificates import ServingFiles, kubeconfig_document

    files = ServingFiles(directory)
    cert, key = files.authority().issue_client(ADMIN.username, ADMIN.groups)
    return kubeconfig_document(url, files.ca_cert.read_bytes(), name, cert, key)


def serve(
    ctx: typer.Context,
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on; 0 picks a free one.")] = 6443,
    write_kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--write-kubeconfig",
            help="Write a kubeconfig for the served URL with admin credentials (a client certificate in "
            "system:masters) to this path (mode 0600).",
        ),
    ] = None,
    tls_cert_dir: Annotated[
        Path | None,
        typer.Option(
            "--tls-cert-dir",
            help="Serve HTTPS with tls.crt and tls.key from this directory instead of the certificate "
            "capa serve issues itself (ca.crt, when there, is the CA the written kubeconfig trusts; else "
            "tls.crt itself). Client certificates are still those of capa serve's own CA.",
        ),
    ] = None,
    token_auth_file: Annotated[
        Path | None,
        typer.Option(
            "--token-auth-file",
            help='Also authenticate the bearer tokens of this file (CSV: token,user,uid,"group1,group2", '
            "as kube-apiserver's --token-auth-file).",
        ),
    ] = None,
    insecure_http: Annotated[
        bool,
        typer.Option(
            "--insecure-http",
            help="Serve plain HTTP (loopback binds only): bearer tokens still authenticate "
            "(--token-auth-file, ServiceAccount tokens), client certificates cannot.",
        ),
    ] = False,
) -> None:
    """Serve the store over the Kubernetes API (HTTPS, authenticating every request) until interrupted."""
    import asyncio
    import base64
    import signal
    import ssl

    from capa_py.apiserver import serve as run_server
    from capa_py.apiserver.authentication import (
        Authenticator,
        ServiceAccountTokens,
        TokenFileError,
        read_token_file,
    )
    from capa_py.apiserver.certificates import ensure_serving_files, serving_hosts
    from capa_py.apiserver.certificates import write_kubeconfig as write
    from capa_py.webhooks import CERT_FILE, CertificateReloader, WebhookConfigError

    if not 0 <= port <= 65535:
        fail(f"--port must be between 0 and 65535, not {port}", EXIT_INVALID)
    if globals_of(ctx).remote:
        fail(
            "capa serve serves the SQLite store at --state, not an API server (--kubeconfig, --store kube)",
            EXIT_INVALID,
        )
    if insecure_http and bind not in LOOPBACK:
        fail(
            f"--insecure-http serves plain HTTP on loopback addresses only ({', '.join(LOOPBACK)}), "
            f"not {bind}",
            EXIT_INVALID,
        )
    if insecure_http and tls_cert_dir is not None:
        fail("--insecure-http and --tls-cert-dir exclude each other", EXIT_INVALID)
    if insecure_http and write_kubeconfig is not None:
        fail(
            "--write-kubeconfig writes a client certificate, which plain HTTP cannot carry: "
            "drop --insecure-http",
            EXIT_INVALID,
        )
    tokens = {}
    if token_auth_file is not None:
        try:
            tokens = read_token_file(token_auth_file)
        except TokenFileError as exc:
            fail(f"--token-auth-file: {exc}", EXIT_INVALID)
    certificates = None
    if tls_cert_dir is not None:
        try:
            certificates = CertificateReloader(tls_cert_dir, flag="--tls-cert-dir")
        except WebhookConfigError as exc:
            fail(str(exc), EXIT_INVALID)
    directory = serving_directory(Path(globals_of(ctx).state))
    try:
        files = ensure_serving_files(directory, serving_hosts(bind))
    except (OSError, ValueError) as exc:
        fail(f"cannot prepare the serving certificates in {directory}: {exc}")
    if certificates is not None:
        context = certificates.context
        context.load_verify_locations(cafile=str(files.ca_cert))
        context.verify_mode = ssl.CERT_OPTIONAL
    store = globals_of(ctx).store()
    authenticator = Authenticator(store, ServiceAccountTokens(files.signing_key.read_bytes()), tokens)

    def kubeconfig_for(url: str) -> dict[str, Any]:
        document = admin_kubeconfig(url, directory)
        if tls_cert_dir is not None:
            ca_file = tls_cert_dir / "ca.crt"
            ca_pem = (ca_file if ca_file.is_file() else tls_cert_dir / CERT_FILE).read_bytes()
            document["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
                ca_pem
            ).decode()
        return document

    def on_ready(url: str) -> None:
        if write_kubeconfig is not None:
            write(write_kubeconfig, kubeconfig_for(url))
        stdout.print(f"Serving {globals_of(ctx).state} on {url}", highlight=False, markup=False)
        if write_kubeconfig is not None:
            stdout.print(f"kubeconfig written to {write_kubeconfig}", highlight=False, markup=False)

    if insecure_http:
        stderr.print(
            "warning: serving plain HTTP: credentials and objects, Secrets included, cross loopback "
            "unencrypted",
            markup=False,
            highlight=False,
        )

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stopping.set)
        if insecure_http:
            context = None
        elif certificates is not None:
            context = certificates.context
        else:
            context = files.server_context()
        await run_server(
            store, bind, port, stopping, on_ready, ssl_context=context, authenticator=authenticator
        )

    try:
        asyncio.run(main())
    except OSError as exc:
        fail(f"cannot listen on {bind}:{port}: {exc.strerror or exc}")
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    app.command(name="serve")(serve)
