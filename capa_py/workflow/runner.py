"""Running a workflow: tasks in order, their hooks around them, a checkpoint after each, one error path.

For each task the runner calls the handlers bound before it, the task, and the handlers bound after it;
then it records the checkpoint and reports the task finished. The first exception from a task or a hook
stops the workflow: the context's ``failure`` is set, the error handler step runs (its own hooks around
it, then the diagnostics bundle) and the result says failed, with the bundle's path. Run again with the
same workflow id, the workflow resumes after the last completed task; a completed workflow removes its
checkpoint.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from capa_py.logging import get_logger
from capa_py.workflow import checkpoint
from capa_py.workflow.hook import handler_name
from capa_py.workflow.task import HANDLE_ERROR, C, Failure
from capa_py.workflow.workflow import Workflow

log = get_logger("workflow")

EventKind = Literal["started", "finished", "failed", "skipped"]


@dataclass(frozen=True)
class TaskEvent:
    """Progress of one task. ``skipped`` means done by an earlier run (resumed past it)."""

    kind: EventKind
    workflow: str
    task: str
    index: int
    total: int
    seconds: float | None = None
    """How long the task took, hooks included (``finished`` and ``failed`` only)."""


ProgressCallback = Callable[[TaskEvent], None]


@dataclass(frozen=True)
class WorkflowResult:
    workflow: str
    workflow_id: str
    succeeded: bool
    ran: tuple[str, ...]
    """Tasks completed by this run."""
    skipped: tuple[str, ...]
    """Tasks completed by an earlier run and not run again."""
    failure: Failure | None = None
    bundle: Path | None = None
    """The diagnostics bundle written for the failure."""


def run_workflow(
    workflow: Workflow[C],
    ctx: C,
    *,
    workflow_id: str,
    state_dir: Path,
    resume: bool = True,
    on_event: ProgressCallback | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> WorkflowResult:
    """Run ``workflow`` with ``ctx``, checkpointing under ``state_dir``.

    ``resume=False`` deletes any checkpoint of ``workflow_id`` and starts from the first task. A checkpoint
    recorded for another task list raises :class:`~capa_py.workflow.checkpoint.CheckpointError` before
    anything runs.
    """
    if not isinstance(ctx, workflow.context_type):
        raise TypeError(
            f"workflow {workflow.name!r} runs with a {workflow.context_type.__name__}, "
            f"not a {type(ctx).__name__}"
        )
    path = checkpoint.checkpoint_path(state_dir, workflow_id)
    if not resume:
        path.unlink(missing_ok=True)
    names = workflow.task_names
    saved = checkpoint.load(path)
    if saved is not None:
        if saved.workflow != workflow.name or saved.tasks != names:
            raise checkpoint.CheckpointError(
                f"{path} was recorded for workflow {saved.workflow!r} with tasks {saved.tasks}, "
                f"not {workflow.name!r} with tasks {names}; run without resuming to start over"
            )
        checkpoint.restore_context(ctx, saved.context)
    progress = saved or checkpoint.Checkpoint(workflow=workflow.name, workflow_id=workflow_id, tasks=names)
    emit = on_event or (lambda _: None)
    total = len(names)
    ran: list[str] = []
    skipped = names[: progress.completed]
    with contextlib.ExitStack() as recording:
        for collector in workflow.error_handler.collectors:
            recording.enter_context(collector.recording())
        # Bound only now: a bound logger keeps the logging pipeline of the moment it was bound, and the
        # collectors may just have extended it.
        bound = log.bind(workflow=workflow.name, workflow_id=workflow_id)
        if skipped:
            bound.info("resuming workflow", completed=len(skipped))
        for index, task in enumerate(workflow.tasks):
            if index < progress.completed:
                emit(TaskEvent("skipped", workflow.name, task.name, index, total))
                continue
            emit(TaskEvent("started", workflow.name, task.name, index, total))
            bound.info("task started", task=task.name)
            started = clock()
            phase = "before"
            try:
                for handler in workflow.binder.handlers_before(task):
                    handler(ctx)
                phase = "task"
                task.run(ctx)
                phase = "after"
                for handler in workflow.binder.handlers_after(task):
                    handler(ctx)
            except Exception as exc:
                seconds = clock() - started
                failure = Failure.from_exception(task.name, phase, exc)
                bound.error("task failed", task=task.name, phase=phase, error=failure.message)
                emit(TaskEvent("failed", workflow.name, task.name, index, total, seconds))
                bundle = _handle_error(workflow, ctx, workflow_id, state_dir, failure)
                return WorkflowResult(
                    workflow.name, workflow_id, False, tuple(ran), tuple(skipped), failure, bundle
                )
            seconds = clock() - started
            progress.completed = index + 1
            progress.context = checkpoint.dump_context(ctx)
            checkpoint.save(path, progress)
            ran.append(task.name)
            bound.info("task finished", task=task.name, seconds=round(seconds, 3))
            emit(TaskEvent("finished", workflow.name, task.name, index, total, seconds))
        path.unlink(missing_ok=True)
        bound.info("workflow finished")
    return WorkflowResult(workflow.name, workflow_id, True, tuple(ran), tuple(skipped))


def _handle_error(
    workflow: Workflow[C], ctx: C, workflow_id: str, state_dir: Path, failure: Failure
) -> Path | None:
    """The error handling step: its before hooks, the bundle, its after hooks. A hook that raises here is
    logged and does not stop the bundle from being written."""
    ctx.failure = failure
    for handler in workflow.binder.handlers_before(HANDLE_ERROR):
        _run_error_hook(handler, ctx)
    bundle: Path | None = None
    try:
        bundle = workflow.error_handler.write_bundle(workflow.name, workflow_id, failure, state_dir)
    except OSError as exc:
        log.error("cannot write diagnostics bundle", workflow=workflow.name, error=str(exc))
    else:
        log.error("workflow failed", workflow=workflow.name, task=failure.task, bundle=str(bundle))
    for handler in workflow.binder.handlers_after(HANDLE_ERROR):
        _run_error_hook(handler, ctx)
    return bundle


def _run_error_hook(handler: Callable[[C], None], ctx: C) -> None:
    try:
        handler(ctx)
    except Exception as exc:
        log.error("error handling hook failed", hook=handler_name(handler), error=str(exc))
