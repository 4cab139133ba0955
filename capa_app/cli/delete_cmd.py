"""``capa delete``: delete objects named by manifest files or by KIND NAME; with ``--wait`` reconcile until
they are gone (their AWS resources torn down)."""

from __future__ import annotations

from typing import Annotated

import typer

from capa_app.cli.common import (
    EndpointOption,
    FilesOption,
    NoWaitForLockOption,
    ProfileOption,
    RegionOption,
    RunControllersOption,
    TimeoutOption,
    TraitsOption,
)
from capa_app.cli.durations import parse_duration


def delete(
    ctx: typer.Context,
    kind: Annotated[str | None, typer.Argument(help="Kind of the object to delete.")] = None,
    name: Annotated[str | None, typer.Argument(help="Name of the object to delete.")] = None,
    filename: FilesOption = None,
    namespace: Annotated[str | None, typer.Option("-n", "--namespace", help="Namespace.")] = None,
    ignore_not_found: Annotated[
        bool, typer.Option("--ignore-not-found", help="Treat objects that do not exist as deleted.")
    ] = False,
    aws_endpoint: EndpointOption = None,
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_profile: TraitsOption = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Reconcile until everything is gone.")
    ] = False,
    timeout: TimeoutOption = "30m",
    no_wait_for_lock: NoWaitForLockOption = False,
    in_process: RunControllersOption = False,
) -> None:
    """Delete objects named by manifest files or by KIND NAME; --wait tears down their AWS resources."""
    if filename and (kind or name):
        raise typer.BadParameter("give either -f FILE or KIND NAME, not both")
    try:
        seconds = parse_duration(timeout)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--timeout") from exc
    from capa_app.cli.delete_run import DeleteOptions, delete_and_wait

    options = DeleteOptions(
        filename,
        kind,
        name,
        namespace,
        ignore_not_found,
        aws_endpoint,
        region,
        profile,
        endpoint_profile,
        wait,
        timeout,
        not no_wait_for_lock,
        in_process,
    )
    delete_and_wait(ctx, options, seconds)
