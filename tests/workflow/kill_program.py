"""Runs the sample workflow and SIGKILLs its own process right after task number KILL_AFTER completed.

Usage: ``python -m tests.workflow.kill_program STATE_DIR MARKS_DIR KILL_AFTER`` (``-1``: killed before
the first task starts; ``none``: not killed). A hook before and after every task counts its runs too.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from capa_py.logging import configure_logging
from capa_py.workflow import Binder, TaskEvent, run_workflow
from tests.workflow.sample import SampleContext, mark, new_sample_workflow


def bind_counting_hooks(binder: Binder[SampleContext]) -> None:
    from tests.workflow.sample import create_bootstrap, use_kubeconfig

    def before_bootstrap(ctx: SampleContext) -> None:
        """Runs before Create Bootstrap Cluster; assumes nothing."""
        mark(ctx, "hook before bootstrap")

    def after_use(ctx: SampleContext) -> None:
        """Runs after Use Kubeconfig; assumes the kubeconfig was used."""
        mark(ctx, "hook after use")

    binder.before(create_bootstrap, before_bootstrap)
    binder.after(use_kubeconfig, after_use)


def main() -> int:
    state_dir, marks, kill_after = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    configure_logging("json")

    def on_event(event: TaskEvent) -> None:
        if kill_after == "-1" and event.kind == "started":
            os.kill(os.getpid(), signal.SIGKILL)
        if event.kind == "finished" and str(event.index) == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    workflow = new_sample_workflow(networking=True, extras=True, hooks=[bind_counting_hooks])
    result = run_workflow(
        workflow, SampleContext(marks=marks), workflow_id="sample", state_dir=state_dir, on_event=on_event
    )
    print("ran:", ",".join(result.ran))
    print("skipped:", ",".join(result.skipped))
    return 0 if result.succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
