"""The commands that talk to AWS: ``apply``, ``delete``, ``resources`` and ``local``.

Each takes ``--aws-endpoint`` (``local`` for the embedded endpoint, or a URL) and ``--region``. Manifests
are validated before any AWS call or store write; invalid input exits 2 and changes nothing.

``apply`` is here (what it does once its flags are checked is :mod:`~capa_app.cli.apply_run`, imported when
it runs); ``delete``, ``resources`` and ``local`` are in their own modules (:mod:`~capa_app.cli.delete_cmd`,
:mod:`~capa_app.cli.resources_cmd`, :mod:`~capa_app.cli.local_cmd`), and :func:`register` adds them all.
"""

from __future__ import annotations

import time
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
    WaitOption,
    load_files,
    stderr,
)
from capa_app.cli.durations import parse_duration


def apply(
    ctx: typer.Context,
    filename: FilesOption = None,
    aws_endpoint: EndpointOption = None,
    region: RegionOption = None,
    profile: ProfileOption = None,
    endpoint_profile: TraitsOption = None,
    wait: WaitOption = True,
    timeout: TimeoutOption = "30m",
    output: Annotated[str, typer.Option("-o", "--output", help="table or json.")] = "table",
    no_wait_for_lock: NoWaitForLockOption = False,
    in_process: RunControllersOption = False,
    no_recreate: Annotated[
        bool,
        typer.Option(
            "--no-recreate",
            help="Refuse (exit 1) instead of waiting when an object is being deleted.",
        ),
    ] = False,
) -> None:
    """Store the objects of manifest files, then reconcile them until ready (with --wait)."""
    if not filename:
        raise typer.BadParameter("at least one -f FILE is required", param_hint="-f")
    if output not in ("table", "json"):
        raise typer.BadParameter("must be table or json", param_hint="-o/--output")
    try:
        seconds = parse_duration(timeout)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--timeout") from exc
    objects = load_files(filename)
    deadline = time.monotonic() + seconds
    from capa_app.cli.apply_run import ApplyOptions, apply_objects_and_wait

    options = ApplyOptions(
        aws_endpoint,
        region,
        profile,
        endpoint_profile,
        wait,
        timeout,
        output,
        not no_wait_for_lock,
        in_process,
        no_recreate,
    )
    apply_objects_and_wait(ctx, objects, deadline, options, stderr)


def register(app: typer.Typer) -> None:
    """Add ``apply``, ``delete``, ``resources`` and the ``local`` group to ``app``, in that order."""
    from capa_app.cli import delete_cmd, local_cmd, resources_cmd

    app.command()(apply)
    app.command()(delete_cmd.delete)
    app.command()(resources_cmd.resources)
    app.add_typer(local_cmd.app, name="local")


__all__ = ["apply", "register"]
