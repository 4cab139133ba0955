"""What ``capa apply`` and ``capa delete`` share: running the controllers in this process under the store's
lease (:func:`converge_here`) or observing those running elsewhere (:func:`observe_elsewhere`), and reporting
why a wait ended before every object was done. Whatever prints takes the console it prints on."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal

import typer
from rich.console import Console

from capa_app.cli.common import fail, globals_of, stdout
from capa_app.cli.lease import store_lease
from capa_app.cli.output import format_table
from capa_app.cli.progress import DeletionNotices, ProgressView, ticker
from capa_py.aws.accounting import CallCounter
from capa_py.aws.deadline import Deadline
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore
from controllers import embedded_controllers
from controllers.observe import observe
from controllers.run import ConvergeResult, converge

if TYPE_CHECKING:
    from capa_app.cli.aws_context import AWSContext
    from capa_py.api.meta import KubeObject


def print_calls(calls: CallCounter) -> None:
    by_op = calls.by_operation()
    stdout.print(f"AWS calls: {calls.total()} ({calls.total(mutating=True)} mutating)", highlight=False)
    rows = [[op, str(n)] for op, n in by_op.items()]
    if rows:
        sys.stdout.write(format_table(["OPERATION", "CALLS"], rows))


def label(obj: KubeObject) -> str:
    return f"{obj.KIND.lower()}/{obj.name}"


def report_unfinished(
    console: Console, result: ConvergeResult, timed_out: str, goal: str, deadline: Deadline | None = None
) -> None:
    """Say on ``console`` (stderr) why a wait ended before every target was done."""
    if result.failed:
        for obj in result.objects:
            failure = obj.failure() if obj is not None else None
            if failure is not None:
                reason, message = failure
                console.print(f"error: {obj.ref()}: {reason}: {message}", markup=False, highlight=False)
    elif result.blocked:
        for ref, blocked in result.blocked.items():
            console.print(f"error: {ref}: {blocked}", markup=False, highlight=False)
        console.print(
            f"error: stopped waiting: every object not {goal} is blocked on something that will not "
            "change by itself (above)",
            highlight=False,
        )
    else:
        console.print(f"error: {timed_out}", markup=False, highlight=False)
        _report_in_progress(console, result, deadline)


def _report_in_progress(console: Console, result: ConvergeResult, deadline: Deadline | None) -> None:
    """What the timeout left unfinished: each object not done, and each reconcile it cut short."""
    left = [f"{ref} ({state})" for ref, state in result.states.items() if state not in ("ready", "gone")]
    if left:
        console.print(f"still in progress: {', '.join(left)}", markup=False, highlight=False)
    for stopped in deadline.stopped if deadline is not None else []:
        console.print(f"stopped at the deadline: {stopped}", markup=False, highlight=False)


def refuse_stale_local_store(ctx: typer.Context, store: ObjectStore, aws: AWSContext | None) -> None:
    """Exit 1, before anything changes, when the store's AWS resources lived on a local endpoint that has
    been stopped (see :mod:`capa_app.cli.local_binding`)."""
    if aws is None or aws.local is None:
        return
    from capa_app.cli.local_binding import stale_store

    problem = stale_store(globals_of(ctx).state, store, aws.local)
    if problem is not None:
        fail(problem)


def stored_copies(store: ObjectStore, references: list[KubeObject]) -> list[KubeObject]:
    """The stored objects that ``references`` (kind, namespace and name only) name."""
    found: list[KubeObject] = []
    for ref in references:
        try:
            found.append(store.get(type(ref), ref.metadata.name, ref.metadata.namespace))
        except NotFound:
            continue
    return found


def observe_elsewhere(
    console: Console,
    store: ObjectStore,
    targets: list[KubeObject],
    goal: Literal["ready", "gone"],
    seconds: float,
    show: bool,
) -> ConvergeResult:
    """Wait while the controllers running at the API server bring ``targets`` to ``goal``."""
    with ProgressView(console, targets, enabled=show) as view:
        notices = DeletionNotices(console, store, targets)
        return observe(
            store, targets, goal=goal, timeout=seconds, on_tick=ticker(view.update, notices.update)
        )


def converge_here(
    console: Console,
    store: ObjectStore,
    targets: list[KubeObject],
    goal: Literal["ready", "gone"],
    *,
    command: str,
    aws: AWSContext | None,
    wait_for_lock: bool,
    limit: Deadline,
    show: bool,
) -> ConvergeResult:
    """Run the controllers in this process, holding the store's lease as ``command``, until ``targets``
    reach ``goal`` or are blocked, within what is left of ``limit``; the progress (with ``show``) and the
    deletion notices go to ``console``."""
    with (
        store_lease(store, command, wait_for_lock, limit.left()) as lease,
        ProgressView(console, targets, enabled=show) as view,
    ):
        notices = DeletionNotices(console, store, targets)
        result = converge(
            store,
            embedded_controllers(store, aws.pool if aws else None, aws.engine if aws else None),
            targets,
            goal=goal,
            timeout=limit.left(),
            on_tick=lease.guard(ticker(view.update, notices.update)),
        )
        view.show_blocked(result.blocked)
    return result
