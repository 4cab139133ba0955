"""Hooks run before and after every task in registration order; a raising task or hook goes to the one
error handler, which is hookable itself, and the workflow stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capa_py.workflow import HANDLE_ERROR, Binder, run_workflow
from tests.workflow.sample import SampleContext, expected_tasks, new_sample_workflow


def recording_hooks(calls: list[str], raise_on: str | None = None):  # type: ignore[no-untyped-def]
    """Two handlers before and two after every task (and around the error handler), recording order."""

    def bind(binder: Binder[SampleContext]) -> None:
        for task in binder.tasks:
            for side in ("before", "after"):
                for number in (1, 2):
                    label = f"{side}{number} {task.name}"

                    def handler(ctx: SampleContext, label: str = label) -> None:
                        """Records that it ran; raises when told to."""
                        calls.append(label)
                        if label == raise_on:
                            raise RuntimeError(f"hook {label} broke")

                    getattr(binder, side)(task, handler)

    return bind


def test_hooks_run_before_and_after_every_task_in_registration_order(tmp_path: Path) -> None:
    calls: list[str] = []
    workflow = new_sample_workflow(networking=True, extras=True, hooks=[recording_hooks(calls)])
    ctx = SampleContext(marks=tmp_path)
    result = run_workflow(workflow, ctx, workflow_id="w", state_dir=tmp_path)
    assert result.succeeded
    expected: list[str] = []
    for name in expected_tasks(True, True):
        expected += [f"before1 {name}", f"before2 {name}", f"after1 {name}", f"after2 {name}"]
    assert calls == expected
    assert list(result.ran) == expected_tasks(True, True)


@pytest.mark.parametrize(
    ("raise_on", "phase", "ran"),
    [
        ("before2 Install Networking", "before", ["Pre Create", "Create Bootstrap Cluster"]),
        ("after1 Install Networking", "after", ["Pre Create", "Create Bootstrap Cluster"]),
    ],
)
def test_a_raising_hook_goes_to_the_error_handler(
    tmp_path: Path, raise_on: str, phase: str, ran: list[str]
) -> None:
    calls: list[str] = []
    workflow = new_sample_workflow(networking=True, extras=True, hooks=[recording_hooks(calls, raise_on)])
    result = run_workflow(workflow, SampleContext(marks=tmp_path), workflow_id="w", state_dir=tmp_path)
    assert not result.succeeded
    assert result.failure is not None
    assert (result.failure.task, result.failure.phase) == ("Install Networking", phase)
    assert list(result.ran) == ran
    # The workflow stopped: nothing of a later task ran, and the error handler's own hooks ran after.
    after_failure = calls[calls.index(raise_on) + 1 :]
    assert after_failure == [
        "before1 Handle Error",
        "before2 Handle Error",
        "after1 Handle Error",
        "after2 Handle Error",
    ]
    assert result.bundle is not None
    failure = json.loads((result.bundle / "failure.json").read_text())
    assert failure["message"] == f"hook {raise_on} broke"
    assert failure["phase"] == phase


def test_a_raising_task_stops_the_workflow_and_error_hooks_see_the_failure(tmp_path: Path) -> None:
    seen: list[str] = []

    def on_error(ctx: SampleContext) -> None:
        """Runs before the bundle is written; assumes ctx.failure is set."""
        assert ctx.failure is not None
        seen.append(f"{ctx.failure.task}: {ctx.failure.message}")

    def bind(binder: Binder[SampleContext]) -> None:
        binder.before(HANDLE_ERROR, on_error)

    workflow = new_sample_workflow(networking=False, extras=True, hooks=[bind])
    ctx = SampleContext(marks=tmp_path, fail_at="Install Extras")
    result = run_workflow(workflow, ctx, workflow_id="w", state_dir=tmp_path)
    assert not result.succeeded
    assert seen == ["Install Extras: Install Extras broke on purpose"]
    assert not (tmp_path / "Use-Kubeconfig").exists(), "a task after the failed one ran"
    assert result.bundle is not None
    assert result.bundle.parent == tmp_path / "diagnostics"
    failure = json.loads((result.bundle / "failure.json").read_text())
    assert failure["task"] == "Install Extras"
    assert failure["phase"] == "task"
    assert failure["errorType"] == "builtins.RuntimeError"
    assert "in install_extras" in failure["traceback"]


def test_a_raising_error_hook_does_not_stop_the_bundle(tmp_path: Path) -> None:
    def broken(ctx: SampleContext) -> None:
        """Runs before the bundle; raises."""
        raise RuntimeError("error hook broke")

    def bind(binder: Binder[SampleContext]) -> None:
        binder.before(HANDLE_ERROR, broken)

    workflow = new_sample_workflow(networking=False, extras=False, hooks=[bind])
    ctx = SampleContext(marks=tmp_path, fail_at="Use Kubeconfig")
    result = run_workflow(workflow, ctx, workflow_id="w", state_dir=tmp_path)
    assert result.bundle is not None
    assert (result.bundle / "failure.json").exists()
