"""Tasks and hooks are typed on their workflow's context: mypy rejects a task or a handler written for
another workflow kind's context, and accepts the matching ones."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = '''
from dataclasses import dataclass
from pathlib import Path

from capa_py.workflow import Binder, Context, Workflow, hook_point, task


@dataclass
class CreateContext(Context):
    kubeconfig: Path


@dataclass
class DeleteContext(Context):
    cluster: str


@task("Create Cluster")
def create_cluster(ctx: CreateContext) -> None:
    """Runs first; may read ctx.kubeconfig."""
    print(ctx.kubeconfig)


@task("Delete Cluster")
def delete_cluster(ctx: DeleteContext) -> None:
    """Runs first; may read ctx.cluster."""
    print(ctx.cluster)


def on_delete(ctx: DeleteContext) -> None:
    """Runs after Delete Cluster."""


def bind_create(binder: Binder[CreateContext]) -> None:
    binder.after(create_cluster, on_delete)  # line 34: a delete handler on a create workflow


PRE = hook_point("Pre Create", "Runs first.", CreateContext)
good = Workflow("create", CreateContext, [PRE, create_cluster], hooks=[bind_create])
bad = Workflow("create", CreateContext, [PRE, delete_cluster])  # line 39: a delete task in a create workflow
'''


@pytest.mark.slow
def test_mypy_rejects_tasks_and_hooks_typed_on_another_context(tmp_path: Path) -> None:
    program = tmp_path / "typed_workflow.py"
    program.write_text(textwrap.dedent(PROGRAM).lstrip(), encoding="utf-8")
    stdout, stderr, status = api.run(
        [
            str(program),
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
        ]
    )
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    lines = sorted({int(re.search(r":(\d+): error", line).group(1)) for line in errors})  # type: ignore[union-attr]
    assert status == 1, stdout + stderr
    assert lines == [34, 39], stdout
    assert all("DeleteContext" in line for line in errors), stdout
