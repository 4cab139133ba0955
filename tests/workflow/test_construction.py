"""Constructors decide the tasks; the workflow refuses undocumented tasks and hooks and unknown tasks."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import pytest

from capa_py.workflow import (
    Binder,
    Context,
    HookError,
    NoopHookRegistrar,
    Task,
    Workflow,
    WorkflowDefinitionError,
    hook_point,
    run_workflow,
    task,
)
from tests.workflow.sample import (
    PRE_CREATE,
    SampleContext,
    create_bootstrap,
    expected_tasks,
    install_networking,
    new_sample_workflow,
)


@pytest.mark.parametrize(("networking", "extras"), list(itertools.product([False, True], repeat=2)))
def test_every_flag_combination_gives_its_task_list(networking: bool, extras: bool) -> None:
    workflow = new_sample_workflow(networking=networking, extras=extras)
    assert workflow.task_names == expected_tasks(networking, extras)


def test_a_task_without_a_docstring_is_refused() -> None:
    @task("Undocumented")
    def undocumented(ctx: SampleContext) -> None:
        pass

    with pytest.raises(
        WorkflowDefinitionError, match="task 'Undocumented' of workflow 'w' needs a docstring"
    ):
        Workflow("w", SampleContext, [PRE_CREATE, undocumented])


def test_a_task_listed_twice_is_refused() -> None:
    with pytest.raises(WorkflowDefinitionError, match="lists task 'Pre Create' twice"):
        Workflow("w", SampleContext, [PRE_CREATE, PRE_CREATE])


def test_hook_on_a_task_outside_the_workflow_is_refused_naming_it() -> None:
    def handler(ctx: SampleContext) -> None:
        """Runs before Install Networking."""

    def bind(binder: Binder[SampleContext]) -> None:
        binder.before(install_networking, handler)

    with pytest.raises(HookError, match="workflow 'sample create' has no task 'Install Networking'"):
        new_sample_workflow(networking=False, extras=False, hooks=[bind])


def test_hook_handler_without_a_docstring_is_refused() -> None:
    def bind(binder: Binder[SampleContext]) -> None:
        binder.after(create_bootstrap, lambda ctx: None)

    with pytest.raises(HookError, match="on 'Create Bootstrap Cluster' needs a docstring"):
        new_sample_workflow(networking=False, extras=False, hooks=[bind])


def test_a_task_with_the_same_name_is_another_task() -> None:
    lookalike: Task[SampleContext] = hook_point(
        "Pre Create", "Another hook point with the same name.", SampleContext
    )

    def handler(ctx: SampleContext) -> None:
        """Runs before the lookalike."""

    def bind(binder: Binder[SampleContext]) -> None:
        assert not binder.has(lookalike)
        binder.before(lookalike, handler)

    with pytest.raises(HookError, match="has no task 'Pre Create'"):
        new_sample_workflow(networking=False, extras=False, hooks=[bind])


def test_noop_registrar_leaves_the_kinds_a_component_does_not_override() -> None:
    def extra(ctx: SampleContext) -> None:
        """Runs after Create Bootstrap Cluster."""

    class Component(NoopHookRegistrar):
        def bind_create_hooks(self, binder: Binder[Any]) -> None:
            binder.after(create_bootstrap, extra)

    component = Component()
    created = new_sample_workflow(networking=False, extras=False, hooks=[component.bind_create_hooks])
    deleted = new_sample_workflow(networking=False, extras=False, hooks=[component.bind_delete_hooks])
    assert created.binder.handlers_after(create_bootstrap) == [extra]
    assert deleted.binder.handlers_after(create_bootstrap) == []


def test_a_workflow_without_tasks_is_refused() -> None:
    with pytest.raises(WorkflowDefinitionError, match="workflow 'w' has no tasks"):
        Workflow("w", SampleContext, [])


def test_running_with_another_kind_of_context_is_refused(tmp_path: Path) -> None:
    workflow = new_sample_workflow(networking=False, extras=False)
    with pytest.raises(TypeError, match="runs with a SampleContext, not a Context"):
        run_workflow(workflow, Context(), workflow_id="w", state_dir=tmp_path)  # type: ignore[arg-type]
    assert not (tmp_path / "workflows").exists()


def test_a_partial_handler_is_judged_by_its_function_docstring() -> None:
    def undocumented(ctx: SampleContext, label: str) -> None:
        pass

    def documented(ctx: SampleContext, label: str) -> None:
        """Runs after Create Bootstrap Cluster; records its label."""

    def bind_undocumented(binder: Binder[SampleContext]) -> None:
        binder.after(create_bootstrap, functools.partial(undocumented, label="x"))

    def bind_documented(binder: Binder[SampleContext]) -> None:
        binder.after(create_bootstrap, functools.partial(documented, label="x"))

    with pytest.raises(HookError, match="needs a docstring"):
        new_sample_workflow(networking=False, extras=False, hooks=[bind_undocumented])
    workflow = new_sample_workflow(networking=False, extras=False, hooks=[bind_documented])
    assert len(workflow.binder.handlers_after(create_bootstrap)) == 1
