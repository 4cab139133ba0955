"""Runs ``management create`` against moto and SIGKILLs its own process right after one task.

Usage: ``python -m tests.workflow.lifecycle_kill_program STATE_DIR CLUSTER_FILE MOTO_URL TASK WHEN``.
``TASK`` is a task name of the workflow, or ``none`` to run to the end. ``WHEN`` is ``hook``: killed
from a hook bound after the task (its work done, its checkpoint not yet written, so a resumed run
repeats it), or ``checkpointed``: killed once the task is reported finished (its checkpoint written, so a
resumed run starts after it). Prints the result as JSON when not killed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from capa_app.providers import AWSProvider, CoreComponents
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSSettings, ClientPool, RetryPolicy
from capa_py.engine.engine import Engine
from capa_py.engine.profiles import MOTO
from capa_py.logging import configure_logging
from capa_py.workflow import management
from capa_py.workflow.config import load_cluster_file
from capa_py.workflow.hook import Binder, NoopHookRegistrar
from capa_py.workflow.runner import TaskEvent, run_workflow
from capa_py.workflow.task import Task

WORKFLOW_ID = "management-create-default-mgmt"
TIMEOUT = 120.0
# As the controller tests' harness builds it: quick retries, no rate limit.
FAST_RETRY = RetryPolicy(attempts=6, initial_delay=0.01, max_delay=0.1, not_found_window=1.0)


class KillAfter(NoopHookRegistrar):
    """Kills this process once the named task has done its work."""

    def __init__(self, task: str) -> None:
        self.task = task

    def bind_create_hooks(self, binder: Binder[Any]) -> None:
        chosen = [
            t
            for t in vars(management.create).values()
            if isinstance(t, Task) and t.name == self.task and binder.has(t)
        ]
        if not chosen:
            raise SystemExit(f"no task {self.task!r} in the workflow")
        binder.after(chosen[0], self.kill)

    def kill(self, ctx: management.CreateContext) -> None:
        """Runs after the chosen task: the process dies as if killed from outside."""
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    state_dir, path, url = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    task, when = sys.argv[4], sys.argv[5]
    configure_logging("json")
    settings = AWSSettings(region="us-east-1", endpoint_url=url, retry=FAST_RETRY)
    pool = ClientPool(settings, limiter=RateLimiter(enabled=False))
    engine = Engine(MOTO)
    spec = load_cluster_file(path)
    provider = AWSProvider(lambda: (pool, engine))
    hooks = [KillAfter(task)] if task != "none" and when == "hook" else []

    def on_event(event: TaskEvent) -> None:
        if when == "checkpointed" and event.kind == "finished" and event.task == task:
            os.kill(os.getpid(), signal.SIGKILL)

    workflow = management.new_create_workflow(spec, provider, hooks=hooks)
    ctx = management.CreateContext(spec, provider, CoreComponents(), state_dir, TIMEOUT)
    try:
        result = run_workflow(workflow, ctx, workflow_id=WORKFLOW_ID, state_dir=state_dir, on_event=on_event)
    finally:
        ctx.close()
    print(json.dumps({"succeeded": result.succeeded, "ran": result.ran, "skipped": result.skipped}))
    return 0 if result.succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
