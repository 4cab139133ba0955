"""``capa manifests crds|rbac|deployment|webhooks|all [-o yaml|json] [--image IMAGE] [--without-core]
[--webhook-url URL --webhook-ca-file FILE]``: print what a management cluster needs installed.

``capa manifests repository --output DIR [--version vX.Y.Z] [--image IMAGE]`` writes capa-py as a clusterctl
provider repository instead (:mod:`capa_py.manifests.repository`):
``DIR/infrastructure-capa-py/<version>/{infrastructure-components.yaml,metadata.yaml}``.

``--webhook-url`` and ``--webhook-ca-file`` register webhooks served outside the cluster (``capa controller
--webhook-cert-dir`` on a workstation) at that URL, trusting that CA, instead of the pods' behind a Service
with cert-manager's certificate.

Thin over :mod:`capa_py.manifests`; reads no store and makes no AWS call. YAML is a multi-document stream
for ``kubectl apply -f -``; JSON is one ``v1`` ``List``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from capa_py import __version__
from capa_py.defaults import DEFAULT_IMAGE

EXIT_INVALID = 2


def manifests(
    what: Annotated[
        str,
        typer.Argument(
            metavar="crds|rbac|deployment|webhooks|all|repository",
            help="Which documents to print (repository: write a clusterctl provider repository).",
        ),
    ],
    output: Annotated[
        str,
        typer.Option(
            "-o", "--output", help="yaml (default) or json; for repository, the directory to write."
        ),
    ] = "yaml",
    version: Annotated[
        str,
        typer.Option("--version", help="The release a repository is written for (vMAJOR.MINOR.PATCH)."),
    ] = f"v{__version__}",
    image: Annotated[
        str, typer.Option("--image", help="The controller's container image (deployment, all).")
    ] = DEFAULT_IMAGE,
    without_core: Annotated[
        bool,
        typer.Option(
            "--without-core",
            help="Leave out the Cluster and Machine CRDs: for a cluster where Cluster API core "
            "(clusterctl init) installed its own.",
        ),
    ] = False,
    webhook_url: Annotated[
        str | None,
        typer.Option(
            "--webhook-url",
            help="Register the webhooks at https://HOST:PORT (a controller outside the cluster) "
            "instead of the pods' Service; needs --webhook-ca-file.",
            metavar="URL",
        ),
    ] = None,
    webhook_ca_file: Annotated[
        Path | None,
        typer.Option(
            "--webhook-ca-file",
            help="PEM of the CA that signed the certificate served at --webhook-url (the caBundle).",
            metavar="FILE",
        ),
    ] = None,
) -> None:
    """Print the CRDs, the RBAC or the controller Deployment for a management cluster (`all`: every
    one), or write capa-py as a clusterctl provider repository (`repository --output DIR`)."""
    from capa_py.manifests import SELECTIONS, ExternalWebhooks, documents, render
    from capa_py.manifests.repository import write_repository

    if what == "repository":
        if output in ("yaml", "json") or not output.strip():
            typer.echo("error: repository needs --output DIR, the directory to write", err=True)
            raise typer.Exit(EXIT_INVALID)
        if not image.strip() or any(c.isspace() for c in image):
            typer.echo(f"error: --image must be an image reference, not {image!r}", err=True)
            raise typer.Exit(EXIT_INVALID)
        try:
            written = write_repository(Path(output), version, None if image == DEFAULT_IMAGE else image)
        except ValueError as exc:
            typer.echo(f"error: --version: {exc}", err=True)
            raise typer.Exit(EXIT_INVALID) from exc
        except OSError as exc:
            typer.echo(f"error: writing {output}: {exc}", err=True)
            raise typer.Exit(1) from exc
        typer.echo(str(written))
        return
    if what not in SELECTIONS:
        typer.echo(f"error: unknown manifests {what!r} (expected one of {', '.join(SELECTIONS)})", err=True)
        raise typer.Exit(EXIT_INVALID)
    if output not in ("yaml", "json"):
        typer.echo(f"error: -o must be yaml or json, not {output!r}", err=True)
        raise typer.Exit(EXIT_INVALID)
    if not image.strip() or any(c.isspace() for c in image):
        typer.echo(f"error: --image must be an image reference, not {image!r}", err=True)
        raise typer.Exit(EXIT_INVALID)
    external = None
    if (webhook_url is None) != (webhook_ca_file is None):
        typer.echo("error: --webhook-url and --webhook-ca-file go together", err=True)
        raise typer.Exit(EXIT_INVALID)
    if webhook_url is not None and webhook_ca_file is not None:
        if what not in ("deployment", "webhooks", "all"):
            typer.echo(f"error: --webhook-url does not apply to {what}", err=True)
            raise typer.Exit(EXIT_INVALID)
        try:
            external = ExternalWebhooks(webhook_url, webhook_ca_file.read_bytes())
        except (OSError, ValueError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(EXIT_INVALID) from exc
    docs = documents(what, image, core=not without_core, external=external)
    sys.stdout.write(render(docs, output))  # type: ignore[arg-type]


def register(app: typer.Typer) -> None:
    app.command()(manifests)
