"""What ``capa apply`` does once its flags are checked and its manifests loaded: it refuses clashing names and
objects being deleted (or waits for their deletion), stores the objects, then runs the controllers in this
process or observes those running elsewhere until the objects are ready, and reports. Whatever prints on
stderr takes the console it prints on (``capa apply``'s)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import typer
from rich.console import Console

from capa_app.cli.aws_support import (
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
    aws_context,
    calls_summary,
    fail,
    globals_of,
    region_of,
    stdout,
)
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


@dataclass(frozen=True)
class ApplyOptions:
    """``capa apply``'s checked flags."""

    endpoint: str | None
    region: str | None
    profile: str | None
    endpoint_profile: str | None
    wait: bool
    timeout: str
    output: str
    wait_for_lock: bool
    in_process: bool
    no_recreate: bool


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
    stderr: Console

    def run(self, targets: list[KubeObject], goal: Literal["ready", "gone"]) -> ConvergeResult:
        if self.elsewhere:
            return observe_elsewhere(self.stderr, self.store, targets, goal, self.limit.left(), self.table)
        return converge_here(
            self.stderr,
            self.store,
            targets,
            goal,
            command="capa apply",
            aws=self.aws,
            wait_for_lock=self.wait_for_lock,
            limit=self.limit,
            show=self.table,
        )


def _refuse_clashes(stderr: Console, store: ObjectStore, objects: list[KubeObject]) -> None:
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
                controllers.stderr.print(
                    f"{label(obj)} is being deleted; waiting for that to finish, then creating it again",
                    markup=False,
                    highlight=False,
                )
        gone = controllers.run(deleting, "gone")
        if not gone.converged:
            report_unfinished(
                controllers.stderr, gone, f"not deleted after {timeout} (--timeout)", "deleted", limit
            )
            raise typer.Exit(EXIT_FAILED)
        deleting = being_deleted(controllers.store, objects)


def _report(
    stderr: Console, result: ConvergeResult, output: str, elsewhere: bool, timeout: str, limit: Deadline
) -> None:
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


def apply_objects_and_wait(
    ctx: typer.Context, objects: list[KubeObject], deadline: float, options: ApplyOptions, stderr: Console
) -> None:
    """Store ``objects`` and (with ``--wait``) reconcile them until ready or ``deadline``, saying on
    ``stderr`` what blocks them; exits 1 when they are not ready, 2 when the store refuses them."""
    wait, output, timeout = options.wait, options.output, options.timeout
    # Against an API server the controllers running there do the work: wait for them.
    elsewhere = wait and globals_of(ctx).remote and not options.in_process
    # --timeout bounds the whole command: no AWS call starts after the deadline.
    with globals_of(ctx).store() as store, aws_deadline(deadline) as limit:
        _refuse_clashes(stderr, store, objects)
        deleting = being_deleted(store, objects)
        _refuse_deleting(deleting, options.no_recreate, wait)
        aws = (
            aws_context(
                ctx,
                options.endpoint,
                options.region or region_of(objects),
                options.profile,
                options.endpoint_profile,
            )
            if wait and not elsewhere and needs_aws(objects)
            else None
        )
        refuse_stale_local_store(ctx, store, aws)
        controllers = _Controllers(
            store, elsewhere, limit, output == "table", aws, options.wait_for_lock, stderr
        )
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
    _report(stderr, result, output, elsewhere, timeout, limit)


__all__ = ["ApplyOptions", "apply_objects_and_wait"]
