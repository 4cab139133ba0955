"""A workflow drawn as a list (the plan) and as a Mermaid or Graphviz graph, hooks included; and the
rich progress view fed by the runner's events."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from rich.console import Console

from capa_py.workflow import HANDLE_ERROR, Binder, TaskEvent, run_workflow
from capa_py.workflow.progress import WorkflowProgress
from capa_py.workflow.render import plan, to_dot, to_list, to_mermaid
from tests.workflow.sample import SampleContext, new_sample_workflow, use_kubeconfig


def write_config(ctx: SampleContext) -> None:
    """Runs after Use Kubeconfig; writes the cluster config next to the kubeconfig."""


def tell_support(ctx: SampleContext) -> None:
    """Runs when the workflow failed, before the bundle is written."""


def bind(binder: Binder[SampleContext]) -> None:
    binder.after(use_kubeconfig, write_config)
    binder.before(HANDLE_ERROR, tell_support)


def test_the_list_shows_each_task_its_description_and_its_hooks() -> None:
    workflow = new_sample_workflow(networking=False, extras=True, hooks=[bind])
    assert to_list(workflow) == (
        "sample create:\n"
        "  1. Pre Create — Runs first; executes the pre workflow hooks. Assumes nothing.\n"
        "  2. Create Bootstrap Cluster — Runs after Pre Create; records the bootstrap kubeconfig path in the "
        "context.\n"
        "  3. Install Extras — Runs when extras were asked for; assumes the cluster exists.\n"
        "  4. Use Kubeconfig — Runs after the cluster exists; assumes the kubeconfig path recorded by Create "
        "Bootstrap\n"
        "       Cluster.\n"
        "       after:  write_config\n"
        "  5. Post Create — Runs last, after every task succeeded; executes post hooks.\n"
        "  on error: Handle Error — Runs when a task or a hook raised: records the failure and writes the "
        "diagnostics\n"
        "       bundle.\n"
        "       before: tell_support\n"
    )
    assert [step.name for step in plan(workflow)][-1] == "Handle Error"


def test_the_mermaid_graph_chains_tasks_and_hangs_hooks_beside_them() -> None:
    text = to_mermaid(new_sample_workflow(networking=False, extras=False, hooks=[bind]))
    assert text.splitlines() == [
        "flowchart TD",
        '    t0["Pre Create"]',
        '    t1["Create Bootstrap Cluster"]',
        '    t2["Use Kubeconfig"]',
        '    t2_after0(["after: write_config"])',
        '    t3["Post Create"]',
        '    t4{{"Handle Error"}}',
        '    t4_before0(["before: tell_support"])',
        "    t0 --> t1",
        "    t1 --> t2",
        "    t2 -.- t2_after0",
        "    t2 --> t3",
        "    t0 -. any task or hook raises .-> t4",
        "    t4_before0 -.- t4",
    ]


@pytest.mark.parametrize(("networking", "extras"), list(itertools.product([False, True], repeat=2)))
def test_the_dot_graph_draws_every_task_hook_and_the_error_edge(networking: bool, extras: bool) -> None:
    text = to_dot(new_sample_workflow(networking=networking, extras=extras, hooks=[bind]))
    assert text.startswith('digraph "sample create" {')
    assert text.count("->") == (3 + networking + extras) + 1 + 2, "chain, error edge and two hook edges"
    assert text.count("{") == text.count("}") == 1
    assert '[label="Handle Error", shape=hexagon]' in text


def test_the_progress_view_shows_done_running_pending_and_times(tmp_path: Path) -> None:
    workflow = new_sample_workflow(networking=True, extras=False)
    console = Console(record=True, width=100, force_terminal=False)
    view = WorkflowProgress(workflow, console)
    ticks = iter(float(n) for n in itertools.count(step=2))
    events: list[TaskEvent] = []

    def stop_midway(event: TaskEvent) -> None:
        events.append(event)
        view(event)
        if event.kind == "started" and event.task == "Install Networking":
            console.print(view.render())

    with view:
        run_workflow(
            workflow,
            SampleContext(marks=tmp_path),
            workflow_id="w",
            state_dir=tmp_path,
            on_event=stop_midway,
            clock=lambda: next(ticks),
        )
    console.print(view.render())
    midway, final = console.export_text().split("sample create")[1:]
    assert [line.split() for line in midway.strip().splitlines()[1:]] == [
        ["1", "Pre", "Create", "✓", "done", "2.0s"],
        ["2", "Create", "Bootstrap", "Cluster", "✓", "done", "2.0s"],
        ["3", "Install", "Networking", "…", "running"],
        ["4", "Use", "Kubeconfig", "pending"],
        ["5", "Post", "Create", "pending"],
    ]
    assert all(line.split()[-1] == "2.0s" for line in final.strip().splitlines()[1:])
    assert [e.kind for e in events].count("finished") == 5


def test_the_progress_view_marks_resumed_and_failed_tasks(tmp_path: Path) -> None:
    workflow = new_sample_workflow(networking=False, extras=False)
    run_workflow(
        workflow, SampleContext(marks=tmp_path, fail_at="Use Kubeconfig"), workflow_id="w", state_dir=tmp_path
    )
    console = Console(record=True, width=100)
    view = WorkflowProgress(workflow, console)
    run_workflow(
        workflow,
        SampleContext(marks=tmp_path, fail_at="Use Kubeconfig"),
        workflow_id="w",
        state_dir=tmp_path,
        on_event=view,
        clock=lambda: 0.0,
    )
    console.print(view.render())
    rows = [line.split() for line in console.export_text().strip().splitlines()[2:]]
    assert rows == [
        ["1", "Pre", "Create", "✓", "done", "earlier"],
        ["2", "Create", "Bootstrap", "Cluster", "✓", "done", "earlier"],
        ["3", "Use", "Kubeconfig", "✗", "failed", "0.0s"],
        ["4", "Post", "Create", "pending"],
    ]


def test_the_live_view_redraws_on_a_terminal(tmp_path: Path) -> None:
    workflow = new_sample_workflow(networking=False, extras=False)
    console = Console(record=True, width=100, force_terminal=True)
    with WorkflowProgress(workflow, console) as view:
        assert view.live
        run_workflow(
            workflow,
            SampleContext(marks=tmp_path),
            workflow_id="w",
            state_dir=tmp_path,
            on_event=view,
            clock=lambda: 0.0,
        )
    final = console.export_text().split("sample create")[-1]
    assert [line.split()[-2:] for line in final.strip().splitlines()[1:]] == [["done", "0.0s"]] * 4
