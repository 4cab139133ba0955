"""``capa manifests crds|rbac|deployment|all [-o yaml|json] [--image IMAGE] [--without-core]``: print what
a management cluster needs installed.

Thin over :mod:`capa_py.manifests`; reads no store and makes no AWS call. YAML is a multi-document stream
for ``kubectl apply -f -``; JSON is one ``v1`` ``List``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from capa_py.manifests import DEFAULT_IMAGE, SELECTIONS, documents, render

EXIT_INVALID = 2


def register(app: typer.Typer) -> None:
    @app.command()
    def manifests(
        what: Annotated[
            str, typer.Argument(metavar="crds|rbac|deployment|all", help="Which documents to print.")
        ],
        output: Annotated[str, typer.Option("-o", "--output", help="yaml (default) or json.")] = "yaml",
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
    ) -> None:
        """Print the CRDs, the RBAC or the controller Deployment for a management cluster (`all`: every
        one)."""
        if what not in SELECTIONS:
            typer.echo(
                f"error: unknown manifests {what!r} (expected one of {', '.join(SELECTIONS)})", err=True
            )
            raise typer.Exit(EXIT_INVALID)
        if output not in ("yaml", "json"):
            typer.echo(f"error: -o must be yaml or json, not {output!r}", err=True)
            raise typer.Exit(EXIT_INVALID)
        if not image.strip() or any(c.isspace() for c in image):
            typer.echo(f"error: --image must be an image reference, not {image!r}", err=True)
            raise typer.Exit(EXIT_INVALID)
        sys.stdout.write(render(documents(what, image, core=not without_core), output))  # type: ignore[arg-type]
