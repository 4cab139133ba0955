"""The commands that talk to AWS: ``apply``, ``delete``, ``resources`` and ``local``.

Each takes ``--aws-endpoint`` (``local`` for the embedded endpoint, or a URL) and ``--region``. Manifests
are validated before any AWS call or store write; invalid input exits 2 and changes nothing.

``apply`` is here; ``delete``, ``resources`` and ``local`` are in their own modules
(:mod:`~capa_app.cli.delete_cmd`, :mod:`~capa_app.cli.resources_cmd`, :mod:`~capa_app.cli.local_cmd`), and
:func:`register` adds them all.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from capa_app.cli.aws_support import (
    RunControllersOption,
    converge_here,
    label,
    observe_elsewhere,
    print_calls,
    refuse_stale_local_store,
    report_unfinished,
)
from capa_app.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EndpointOption,
    FilesOption,
    ProfileOption,
    RegionOption,
    TimeoutOption,
    TraitsOption,
    WaitOption,
    aws_context,
    calls_summary,
    fail,
    globals_of,
    load_files,
    region_of,
    stderr,
    stdout,
)
from capa_app.cli.durations import parse_duration
from capa_app.cli.lease import NoWaitForLockOption
from capa_app.cli.output import format_table, render_json
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.aws.deadline import Deadline, aws_deadline
from capa_py.cluster_names import name_clashes
from capa_py.operations import apply_objects, being_deleted
from capa_py.store.errors import Invalid, StoreError
from capa_py.store.protocol import ObjectStore
from capa_py.tag_budget import tag_budget_issues
from controllers import needs_aws
from controllers.run import ConvergeResult

if TYPE_CHECKING:
    from capa_app.cli.aws_context import AWSContext


@dataclass
class _Controllers:
    """How an apply waits: the controllers run in this process (holding the store lease) until the targets
    reach the goal or are blocked, or, against an API server, the ones running there are observed."""

    store: ObjectStore
    elsewhere: bool
    limit: Deadline
    table: bool
    aws: AWSContext | None
    wait_for_lock: bool

    def run(self, targets: list[KubeObject], goal: Literal["ready", "gone"]) -> ConvergeResult:
        if self.elsewhere:
            return observe_elsewhere(stderr, self.store, targets, goal, self.limit.left(), self.table)
        return converge_here(
            stderr,
            self.store,
            targets,
            goal,
            command="capa apply",
            aws=self.aws,
            wait_for_lock=self.wait_for_lock,
            limit=self.limit,
            show=self.table,
        )


def _refuse_clashes(store: ObjectStore, objects: list[KubeObject]) -> None:
    clashes = [*name_clashes(store, objects), *tag_budget_issues(store, objects)]
    if clashes:
        for clash in clashes:
            stderr.print(f"error: {clash}", markup=False, highlight=False)
        raise typer.Exit(EXIT_INVALID)


def _refuse_deleting(deleting: list[KubeObject], no_recreate: bool, wait: bool) -> None:
    if deleting and (no_recreate or not wait):
        names = ", ".join(label(o) for o in deleting)
        fail(
            f"{names} {'is' if len(deleting) == 1 else 'are'} being deleted; nothing applied "
            + (
                "(--no-recreate)"
                if no_recreate
                else "(apply with --wait to wait for the deletion, then create them again)"
            )
        )


def _wait_for_deletions(
    controllers: _Controllers,
    deleting: list[KubeObject],
    objects: list[KubeObject],
    timeout: str,
    limit: Deadline,
) -> None:
    """Applying over an object being deleted would undo nothing its finalizers tear down: let the deletion
    finish (controllers running with goal "gone"), then create it anew."""
    announced: set[str] = set()
    while deleting:
        for obj in deleting:
            if obj.ref() not in announced:
                announced.add(obj.ref())
                stderr.print(
                    f"{label(obj)} is being deleted; waiting for that to finish, then creating it again",
                    markup=False,
                    highlight=False,
                )
        gone = controllers.run(deleting, "gone")
        if not gone.converged:
            report_unfinished(stderr, gone, f"not deleted after {timeout} (--timeout)", "deleted", limit)
            raise typer.Exit(EXIT_FAILED)
        deleting = being_deleted(controllers.store, objects)


def _report(result: ConvergeResult, output: str, elsewhere: bool, timeout: str, limit: Deadline) -> None:
    if output == "json":
        document = {
            "converged": result.converged,
            "timedOut": result.timed_out and not result.converged,
            "elapsedSeconds": round(result.elapsed, 3),
            "states": result.states,
            "blocked": {ref: {"reason": b.reason, "message": b.message} for ref, b in result.blocked.items()},
            "objects": [o.to_dict() for o in result.objects],
            # Controllers running elsewhere made the AWS calls: none are known here.
            "awsCalls": None if elsewhere else calls_summary(result.calls),
            "reconciled": None if elsewhere else sorted(str(key) for key in result.reconciled_keys),
        }
        sys.stdout.write(render_json(document) + "\n")
    else:
        rows = [[ref, state] for ref, state in result.states.items()]
        sys.stdout.write(format_table(["OBJECT", "STATE"], rows))
        if not elsewhere:
            print_calls(result.calls)
    if not result.converged:
        report_unfinished(stderr, result, f"not ready after {timeout} (--timeout)", "ready", limit)
        raise typer.Exit(EXIT_FAILED)


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
    # Against an API server the controllers running there do the work: wait for them.
    elsewhere = wait and globals_of(ctx).remote and not in_process
    # --timeout bounds the whole command: no AWS call starts after the deadline.
    with globals_of(ctx).store() as store, aws_deadline(deadline) as limit:
        _refuse_clashes(store, objects)
        deleting = being_deleted(store, objects)
        _refuse_deleting(deleting, no_recreate, wait)
        aws = (
            aws_context(ctx, aws_endpoint, region or region_of(objects), profile, endpoint_profile)
            if wait and not elsewhere and needs_aws(objects)
            else None
        )
        refuse_stale_local_store(ctx, store, aws)
        controllers = _Controllers(store, elsewhere, limit, output == "table", aws, not no_wait_for_lock)
        _wait_for_deletions(controllers, deleting, objects, timeout, limit)
        try:
            applied = apply_objects(store, objects)
        except Invalid as exc:
            fail(str(exc), EXIT_INVALID)
        except StoreError as exc:
            fail(str(exc))
        if output == "table":
            for item in applied:
                stdout.print(f"{item.object.KIND.lower()}/{item.object.name} {item.outcome}", highlight=False)
        if not wait:
            return
        result = controllers.run([a.object for a in applied if not isinstance(a.object, Secret)], "ready")
    _report(result, output, elsewhere, timeout, limit)


def register(app: typer.Typer) -> None:
    """Add ``apply``, ``delete``, ``resources`` and the ``local`` group to ``app``, in that order."""
    from capa_app.cli import delete_cmd, local_cmd, resources_cmd

    app.command()(apply)
    app.command()(delete_cmd.delete)
    app.command()(resources_cmd.resources)
    app.add_typer(local_cmd.app, name="local")


__all__ = ["apply", "register"]
