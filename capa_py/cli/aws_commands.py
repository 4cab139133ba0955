"""The commands that talk to AWS: ``apply``, ``delete``, ``resources`` and ``local``.

Each takes ``--aws-endpoint`` (``local`` for the embedded endpoint, or a URL) and ``--region``. Manifests
are validated before any AWS call or store write; invalid input exits 2 and changes nothing.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from capa_py.api.aws import AWSMachine
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.api.registry import REGISTRY, UnknownKind
from capa_py.aws import local
from capa_py.aws.accounting import CallCounter
from capa_py.aws.deadline import Deadline, aws_deadline
from capa_py.aws.errors import AWSError
from capa_py.cli.common import (
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
    check_output,
    fail,
    globals_of,
    load_files,
    region_of,
    say_no_store,
    stderr,
    stdout,
)
from capa_py.cli.durations import parse_duration
from capa_py.cli.lease import NoWaitForLockOption, store_lease
from capa_py.cli.output import format_table, render_json
from capa_py.cli.progress import DeletionNotices, ProgressView, ticker
from capa_py.cli.tink_cmd import report_workflow_outcomes
from capa_py.cluster_names import name_clashes
from capa_py.operations import apply_objects, being_deleted, delete_objects
from capa_py.store.errors import Invalid, NotFound, StoreError
from capa_py.store.protocol import ObjectStore
from capa_py.tag_budget import tag_budget_issues

if TYPE_CHECKING:
    from capa_py.cli.aws_context import AWSContext
    from controllers.run import ConvergeResult


def _print_calls(calls: CallCounter) -> None:
    by_op = calls.by_operation()
    stdout.print(f"AWS calls: {calls.total()} ({calls.total(mutating=True)} mutating)", highlight=False)
    rows = [[op, str(n)] for op, n in by_op.items()]
    if rows:
        sys.stdout.write(format_table(["OPERATION", "CALLS"], rows))


def _label(obj: KubeObject) -> str:
    return f"{obj.KIND.lower()}/{obj.name}"


def _report_unfinished(
    result: ConvergeResult, timed_out: str, goal: str, deadline: Deadline | None = None
) -> None:
    """Say on stderr why a wait ended before every target was done."""
    if result.failed:
        for obj in result.objects:
            failure = obj.failure() if obj is not None else None
            if failure is not None:
                reason, message = failure
                stderr.print(f"error: {obj.ref()}: {reason}: {message}", markup=False, highlight=False)
    elif result.blocked:
        for ref, blocked in result.blocked.items():
            stderr.print(f"error: {ref}: {blocked}", markup=False, highlight=False)
        stderr.print(
            f"error: stopped waiting: every object not {goal} is blocked on something that will not "
            "change by itself (above)",
            highlight=False,
        )
    else:
        stderr.print(f"error: {timed_out}", markup=False, highlight=False)
        _report_in_progress(result, deadline)


def _report_in_progress(result: ConvergeResult, deadline: Deadline | None) -> None:
    """What the timeout left unfinished: each object not done, and each reconcile it cut short."""
    left = [f"{ref} ({state})" for ref, state in result.states.items() if state not in ("ready", "gone")]
    if left:
        stderr.print(f"still in progress: {', '.join(left)}", markup=False, highlight=False)
    for stopped in deadline.stopped if deadline is not None else []:
        stderr.print(f"stopped at the deadline: {stopped}", markup=False, highlight=False)


def _refuse_stale_local_store(ctx: typer.Context, store: ObjectStore, aws: AWSContext | None) -> None:
    """Exit 1, before anything changes, when the store's AWS resources lived on a local endpoint that has
    been stopped (see :mod:`capa_py.cli.local_binding`)."""
    if aws is None or aws.local is None:
        return
    from capa_py.cli.local_binding import stale_store

    problem = stale_store(globals_of(ctx).state, store, aws.local)
    if problem is not None:
        fail(problem)


def _stored_copies(store: ObjectStore, references: list[KubeObject]) -> list[KubeObject]:
    """The stored objects that ``references`` (kind, namespace and name only) name."""
    found: list[KubeObject] = []
    for ref in references:
        try:
            found.append(store.get(type(ref), ref.metadata.name, ref.metadata.namespace))
        except NotFound:
            continue
    return found


RunControllersOption = Annotated[
    bool,
    typer.Option(
        "--run-controllers",
        help="Against an API server (--kubeconfig, --store kube): run the controllers in this process, "
        "holding the store's lease, instead of waiting for the ones running there. Always so on SQLite.",
    ),
]


def _observe(
    store: ObjectStore, targets: list[KubeObject], goal: Literal["ready", "gone"], seconds: float, show: bool
) -> ConvergeResult:
    """Wait while the controllers running at the API server bring ``targets`` to ``goal``."""
    from controllers.observe import observe

    with ProgressView(stderr, targets, enabled=show) as view:
        notices = DeletionNotices(stderr, store, targets)
        return observe(
            store, targets, goal=goal, timeout=seconds, on_tick=ticker(view.update, notices.update)
        )


def register(app: typer.Typer) -> None:
    @app.command()
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
            clashes = [*name_clashes(store, objects), *tag_budget_issues(store, objects)]
            if clashes:
                for clash in clashes:
                    stderr.print(f"error: {clash}", markup=False, highlight=False)
                raise typer.Exit(EXIT_INVALID)
            deleting = being_deleted(store, objects)
            if deleting and (no_recreate or not wait):
                names = ", ".join(_label(o) for o in deleting)
                fail(
                    f"{names} {'is' if len(deleting) == 1 else 'are'} being deleted; nothing applied "
                    + (
                        "(--no-recreate)"
                        if no_recreate
                        else "(apply with --wait to wait for the deletion, then create them again)"
                    )
                )
            from controllers import embedded_controllers, needs_aws

            aws = (
                aws_context(ctx, aws_endpoint, region or region_of(objects), profile, endpoint_profile)
                if wait and not elsewhere and needs_aws(objects)
                else None
            )
            _refuse_stale_local_store(ctx, store, aws)

            def run_controllers(targets: list[KubeObject], goal: Literal["ready", "gone"]) -> ConvergeResult:
                """The controllers run in-process until ``targets`` reach ``goal``, or are blocked."""
                if elsewhere:
                    return _observe(
                        store, targets, goal, max(deadline - time.monotonic(), 0.0), output == "table"
                    )
                from controllers.run import converge

                left = max(deadline - time.monotonic(), 0.0)
                with (
                    store_lease(store, "capa apply", not no_wait_for_lock, left) as lease,
                    ProgressView(stderr, targets, enabled=output == "table") as view,
                ):
                    notices = DeletionNotices(stderr, store, targets)
                    result = converge(
                        store,
                        embedded_controllers(store, aws.pool if aws else None, aws.engine if aws else None),
                        targets,
                        goal=goal,
                        timeout=max(deadline - time.monotonic(), 0.0),
                        on_tick=lease.guard(ticker(view.update, notices.update)),
                    )
                    view.show_blocked(result.blocked)
                    return result

            announced: set[str] = set()
            while deleting:
                # Applying over an object being deleted would undo nothing its finalizers tear down:
                # let the deletion finish (controllers running with goal "gone"), then create it anew.
                for obj in deleting:
                    if obj.ref() not in announced:
                        announced.add(obj.ref())
                        stderr.print(
                            f"{_label(obj)} is being deleted; waiting for that to finish, "
                            "then creating it again",
                            markup=False,
                            highlight=False,
                        )
                gone = run_controllers(deleting, "gone")
                if not gone.converged:
                    _report_unfinished(gone, f"not deleted after {timeout} (--timeout)", "deleted", limit)
                    raise typer.Exit(EXIT_FAILED)
                deleting = being_deleted(store, objects)
            try:
                applied = apply_objects(store, objects)
            except Invalid as exc:
                fail(str(exc), EXIT_INVALID)
            except StoreError as exc:
                fail(str(exc))
            if output == "table":
                for item in applied:
                    stdout.print(
                        f"{item.object.KIND.lower()}/{item.object.name} {item.outcome}", highlight=False
                    )
            if not wait:
                return
            result = run_controllers([a.object for a in applied if not isinstance(a.object, Secret)], "ready")
        if output == "json":
            document = {
                "converged": result.converged,
                "timedOut": result.timed_out and not result.converged,
                "elapsedSeconds": round(result.elapsed, 3),
                "states": result.states,
                "blocked": {
                    ref: {"reason": b.reason, "message": b.message} for ref, b in result.blocked.items()
                },
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
                _print_calls(result.calls)
        if not result.converged:
            _report_unfinished(result, f"not ready after {timeout} (--timeout)", "ready", limit)
            raise typer.Exit(EXIT_FAILED)

    @app.command()
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
        if filename:
            objects = load_files(filename)
        elif kind and name:
            try:
                model = REGISTRY.resolve(kind)
            except UnknownKind as exc:
                fail(str(exc), EXIT_INVALID)
            reference = model.model_construct()
            reference.metadata = ObjectMeta(
                name=name, namespace=(namespace or "default") if model.NAMESPACED else None
            )
            objects = [reference]
        else:
            raise typer.BadParameter("give -f FILE or KIND NAME")
        deadline = time.monotonic() + seconds
        elsewhere = wait and globals_of(ctx).remote and not in_process
        from controllers import embedded_controllers, needs_aws

        # --timeout bounds the whole command: no AWS call starts after the deadline.
        with globals_of(ctx).store() as store, aws_deadline(deadline) as limit:
            aws = None
            if wait and not elsewhere and needs_aws(objects, store):
                # An object named by KIND NAME is a bare reference: its region is its stored copy's.
                known = objects if filename else _stored_copies(store, objects)
                aws = aws_context(
                    ctx, aws_endpoint, region or region_of(known, store), profile, endpoint_profile
                )
                _refuse_stale_local_store(ctx, store, aws)
            try:
                # A manifest re-deleted after a delete that did not finish: what is gone already is done.
                results = delete_objects(store, objects, ignore_not_found, partial_ok=bool(filename))
            except NotFound as exc:
                fail(str(exc))
            for requested, last in results:
                if last is None:
                    if filename:
                        stdout.print(f"{_label(requested)} already deleted", highlight=False)
                    continue
                pending = last.metadata.deletion_timestamp is not None and bool(last.metadata.finalizers)
                label = f"{requested.KIND.lower()}/{requested.metadata.name}"
                stdout.print(f"{label} {'deleting' if pending else 'deleted'}", highlight=False)
            if not wait:
                return
            targets = [last for _, last in results if last is not None]
            if elsewhere:
                result = _observe(store, targets, "gone", limit.left(), True)
                if not result.converged:
                    _report_unfinished(result, f"not deleted after {timeout} (--timeout)", "deleted", limit)
                    raise typer.Exit(EXIT_FAILED)
                report_workflow_outcomes(store, targets)
                return
            from controllers.run import converge

            with (
                store_lease(store, "capa delete", not no_wait_for_lock, limit.left()) as lease,
                ProgressView(stderr, targets, enabled=True) as view,
            ):
                result = converge(
                    store,
                    embedded_controllers(store, aws.pool if aws else None, aws.engine if aws else None),
                    targets,
                    goal="gone",
                    timeout=limit.left(),
                    on_tick=lease.guard(ticker(view.update, DeletionNotices(stderr, store, targets).update)),
                )
                view.show_blocked(result.blocked)
            report_workflow_outcomes(store, targets)
        _print_calls(result.calls)
        if not result.converged:
            _report_unfinished(result, f"not deleted after {timeout} (--timeout)", "deleted", limit)
            raise typer.Exit(EXIT_FAILED)

    @app.command()
    def resources(
        ctx: typer.Context,
        cluster: Annotated[
            str | None, typer.Option("--cluster", help="Only this cluster's resources.")
        ] = None,
        namespace: Annotated[
            str | None, typer.Option("-n", "--namespace", help="Namespace (default: all).")
        ] = None,
        aws_endpoint: EndpointOption = None,
        region: RegionOption = None,
        profile: ProfileOption = None,
        endpoint_profile: TraitsOption = None,
        offline: Annotated[
            bool, typer.Option("--offline", help="Show what is recorded without asking AWS.")
        ] = False,
        output: Annotated[str, typer.Option("-o", "--output", help="table, json or yaml.")] = "table",
    ) -> None:
        """List every AWS resource recorded for a cluster: kind, id, strategy class, tags complete."""
        check_output(output)
        from capa_py.inventory import recorded_resources, verify_tags

        rows = []
        opened = globals_of(ctx).existing_store()
        if opened is None:
            say_no_store(globals_of(ctx).state)  # a listing never creates a store
        else:
            with opened as store:
                rows = recorded_resources(store, cluster=cluster, namespace=namespace)
                if not offline and rows:
                    aws = aws_context(
                        ctx, aws_endpoint, region or region_of([], store), profile, endpoint_profile
                    )
                    try:
                        verify_tags(rows, aws.pool, aws.engine)
                    except AWSError as exc:
                        fail(str(exc))
        documents = [row.as_dict() for row in rows]
        if output == "json":
            sys.stdout.write(render_json({"resources": documents}) + "\n")
            return
        if output == "yaml":
            from capa_py.cli.output import render_yaml

            sys.stdout.write(render_yaml({"resources": documents}))
            return
        if not rows:
            stderr.print("No recorded AWS resources.", highlight=False)
            return
        headers = ["CLUSTER", "OWNER", "ROLE", "KIND", "ID", "STRATEGY", "TAGS", "STATE"]
        sys.stdout.write(format_table(headers, [row.as_row() for row in rows]))

    local_app = typer.Typer(
        help="The embedded AWS endpoint (a moto server on 127.0.0.1), one per user.", no_args_is_help=True
    )

    @local_app.command("status")
    def local_status(output: Annotated[str, typer.Option("-o", "--output")] = "table") -> None:
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

    @local_app.command("start")
    def local_start() -> None:
        """Start the local AWS endpoint (commands with --aws-endpoint local also start it on demand)."""
        try:
            endpoint = local.ensure_endpoint()
        except local.LocalEndpointError as exc:
            fail(str(exc))
        stdout.print(f"local AWS endpoint: running at {endpoint.url} (pid {endpoint.pid})", highlight=False)

    @local_app.command("stop")
    def local_stop() -> None:
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

    app.add_typer(local_app, name="local")


__all__ = ["register"]
_ = (Path, AWSMachine)
