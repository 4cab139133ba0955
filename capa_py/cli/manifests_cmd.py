"""``capa manifests crds|rbac|deployment|all [-o yaml|json] [--image IMAGE]``: print deployment artefacts.

Thin over :mod:`capa_py.manifests`; reads no store and makes no AWS call. YAML is a multi-document stream
for ``kubectl apply -f -``; JSON is one ``v1`` ``List``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from capa_py.manifests import SELECTIONS, documents, render
from capa_py.manifests.deployment import DEFAULT_IMAGE

EXIT_INVALID = 2


def register(app: typer.Typer) -> None:
    @app.command()
    def manifests(
        what: Annotated[
            str, typer.Argument(metavar="crds|rbac|deployment|all", help="Which documents to print.")
        ],
        output: Annotated[str, typer.Option("-o", "--output", help="yaml (default) or json.")] = "yaml",
        image: Annotated[
            str, typer.Option("--image", help="The controller image the Deployment runs.")
        ] = DEFAULT_IMAGE,
    ) -> None:
        """Print CRDs, RBAC or the controller Deployment for a management cluster (`all`: every one)."""
        if what not in SELECTIONS:
            typer.echo(
                f"error: unknown manifests {what!r} (expected one of {', '.join(SELECTIONS)})", err=True
            )
            raise typer.Exit(EXIT_INVALID)
        if output not in ("yaml", "json"):
            typer.echo(f"error: -o must be yaml or json, not {output!r}", err=True)
            raise typer.Exit(EXIT_INVALID)
        sys.stdout.write(render(documents(what, image), output))  # type: ignore[arg-type]
