"""Checkpoints: a workflow killed at any task boundary resumes after its last completed task, with the
context values later tasks need; a checkpoint for another task list is refused; resume=False starts over."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from capa_py.workflow import CheckpointError, run_workflow
from tests.support.programs import module_command, program_env
from tests.workflow.sample import SampleContext, expected_tasks, new_sample_workflow

TASKS = expected_tasks(networking=True, extras=True)
# What the program's tasks and hooks leave behind when they do their work (hook points do nothing).
WORK = [
    "Create-Bootstrap-Cluster",
    "Install-Networking",
    "Install-Extras",
    "Use-Kubeconfig",
    "hook-before-bootstrap",
    "hook-after-use",
]


def _run(state_dir: Path, marks: Path, kill_after: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        module_command("tests.workflow.kill_program", str(state_dir), str(marks), kill_after),
        env=program_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _counts(marks: Path) -> Counter[str]:
    return Counter(
        {name: len((marks / name).read_text().splitlines()) for name in WORK if (marks / name).exists()}
    )


@pytest.mark.slow
@pytest.mark.parametrize("kill_after", range(-1, len(TASKS)))
def test_killed_at_a_task_boundary_the_rerun_finishes_with_every_task_run_once(
    tmp_path: Path, kill_after: int
) -> None:
    state_dir, marks = tmp_path / "state", tmp_path / "marks"
    marks.mkdir()
    killed = _run(state_dir, marks, str(kill_after))
    assert killed.returncode == -9, f"the program was not killed: {killed.stdout}{killed.stderr}"
    checkpoint = state_dir / "workflows" / "sample.json"
    if kill_after >= 0:
        assert json.loads(checkpoint.read_text())["completed"] == kill_after + 1
    rerun = _run(state_dir, marks, "none")
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout.splitlines() == [
        f"ran: {','.join(TASKS[kill_after + 1 :])}",
        f"skipped: {','.join(TASKS[: kill_after + 1])}",
    ]
    assert _counts(marks) == Counter(dict.fromkeys(WORK, 1)), "a task or hook ran twice or never"
    # The kubeconfig recorded before the kill reached the task that needs it after the resume.
    assert (marks / "used-kubeconfig").read_text() == str(marks / "bootstrap.kubeconfig")
    assert not checkpoint.exists(), "a completed workflow left its checkpoint"


def test_checkpointed_context_fields_survive_a_resume(tmp_path: Path) -> None:
    workflow = new_sample_workflow(networking=False, extras=False)
    first = SampleContext(marks=tmp_path, fail_at="Use Kubeconfig")
    assert not run_workflow(workflow, first, workflow_id="w", state_dir=tmp_path).succeeded
    saved = json.loads((tmp_path / "workflows" / "w.json").read_text())
    assert saved["context"] == {"kubeconfig": str(tmp_path / "bootstrap.kubeconfig"), "nodes": ["cp-0"]}
    second = SampleContext(marks=tmp_path)
    result = run_workflow(workflow, second, workflow_id="w", state_dir=tmp_path)
    assert result.succeeded
    assert list(result.skipped) == ["Pre Create", "Create Bootstrap Cluster"]
    assert second.kubeconfig == str(tmp_path / "bootstrap.kubeconfig")
    assert second.nodes == ["cp-0"]


def test_a_failed_task_runs_again_on_resume(tmp_path: Path) -> None:
    workflow = new_sample_workflow(networking=True, extras=False)
    run_workflow(
        workflow,
        SampleContext(marks=tmp_path, fail_at="Install Networking"),
        workflow_id="w",
        state_dir=tmp_path,
    )
    result = run_workflow(workflow, SampleContext(marks=tmp_path), workflow_id="w", state_dir=tmp_path)
    assert result.succeeded
    assert list(result.ran) == ["Install Networking", "Use Kubeconfig", "Post Create"]
    assert (tmp_path / "Install-Networking").read_text().splitlines() == ["ran", "ran"]
    assert (tmp_path / "Create-Bootstrap-Cluster").read_text().splitlines() == ["ran"]


def test_a_checkpoint_for_another_task_list_is_refused(tmp_path: Path) -> None:
    with_networking = new_sample_workflow(networking=True, extras=False)
    run_workflow(
        with_networking,
        SampleContext(marks=tmp_path, fail_at="Use Kubeconfig"),
        workflow_id="w",
        state_dir=tmp_path,
    )
    before = (tmp_path / "workflows" / "w.json").read_text()
    without = new_sample_workflow(networking=False, extras=False)
    with pytest.raises(CheckpointError, match="was recorded for workflow 'sample create' with tasks"):
        run_workflow(without, SampleContext(marks=tmp_path), workflow_id="w", state_dir=tmp_path)
    assert (tmp_path / "workflows" / "w.json").read_text() == before, "the refused checkpoint changed"
    assert (tmp_path / "Create-Bootstrap-Cluster").read_text().splitlines() == ["ran"], "a task ran"


def test_resume_false_deletes_the_checkpoint_and_starts_over(tmp_path: Path) -> None:
    workflow = new_sample_workflow(networking=True, extras=False)
    run_workflow(
        workflow, SampleContext(marks=tmp_path, fail_at="Use Kubeconfig"), workflow_id="w", state_dir=tmp_path
    )
    other = new_sample_workflow(networking=False, extras=False)
    result = run_workflow(
        other, SampleContext(marks=tmp_path), workflow_id="w", state_dir=tmp_path, resume=False
    )
    assert result.succeeded
    assert list(result.ran) == expected_tasks(networking=False, extras=False)
    assert result.skipped == ()
    assert (tmp_path / "Create-Bootstrap-Cluster").read_text().splitlines() == ["ran", "ran"]
    assert not (tmp_path / "workflows" / "w.json").exists()


def test_an_unreadable_checkpoint_is_refused(tmp_path: Path) -> None:
    (tmp_path / "workflows").mkdir()
    (tmp_path / "workflows" / "w.json").write_text('{"workflow": 3}')
    with pytest.raises(CheckpointError, match="not a workflow checkpoint"):
        run_workflow(
            new_sample_workflow(networking=False, extras=False),
            SampleContext(marks=tmp_path),
            workflow_id="w",
            state_dir=tmp_path,
        )


def test_a_workflow_id_that_is_not_a_file_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"workflow id '\.\./x'"):
        run_workflow(
            new_sample_workflow(networking=False, extras=False),
            SampleContext(marks=tmp_path),
            workflow_id="../x",
            state_dir=tmp_path,
        )
