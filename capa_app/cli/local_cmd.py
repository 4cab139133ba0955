"""``capa local``: the embedded AWS endpoint (a moto server on 127.0.0.1), one per user."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from capa_app.cli.common import fail, stdout
from capa_py.aws import local

app = typer.Typer(
    help="The embedded AWS endpoint (a moto server on 127.0.0.1), one per user.", no_args_is_help=True
)


def status(output: Annotated[str, typer.Option("-o", "--output")] = "table") -> None:
    """Show whether this user's local AWS endpoint is running, and where (exit 3 when not)."""
    record = local.endpoint_dir() / local.STATE_FILE
    endpoint = local.read_endpoint()
    if output == "json":
        document = {
            "running": endpoint is not None,
            "record": str(record),
            **({"url": endpoint.url, "pid": endpoint.pid} if endpoint else {}),
        }
        sys.stdout.write(json.dumps(document) + "\n")
    elif endpoint is None:
        stdout.print("local AWS endpoint: not running", highlight=False)
    else:
        stdout.print(
            f"local AWS endpoint: running at {endpoint.url} (pid {endpoint.pid}; record {record})",
            markup=False,
            highlight=False,
        )
    if endpoint is None:
        raise typer.Exit(3)


def start() -> None:
    """Start the local AWS endpoint (commands with --aws-endpoint local also start it on demand)."""
    try:
        endpoint = local.ensure_endpoint()
    except local.LocalEndpointError as exc:
        fail(str(exc))
    stdout.print(f"local AWS endpoint: running at {endpoint.url} (pid {endpoint.pid})", highlight=False)


def stop() -> None:
    """Stop this user's local AWS endpoint, from any directory (everything it held is gone)."""
    try:
        stopped = local.stop_endpoint()
    except local.LocalEndpointError as exc:
        fail(str(exc))
    if stopped is None:
        stdout.print("local AWS endpoint: was not running", highlight=False)
        return
    stdout.print(
        f"local AWS endpoint: stopped (was {stopped.url}, pid {stopped.pid}); everything it held is gone",
        highlight=False,
    )


app.command("status")(status)
app.command("start")(start)
app.command("stop")(stop)
