"""What ``capa cluster create|upgrade|delete`` does once its flags are read: it loads and checks the cluster
file, resolves the provider and the clusters, builds the lifecycle workflow, then prints its plan or runs it
with its task progress (:mod:`capa_app.cli.cluster_cmd` registers the commands)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import typer

from capa_app.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    aws_context,
    fail,
    globals_of,
    reachable_kube_store,
    stderr,
    stdout,
)
from capa_app.cli.durations import parse_duration
from capa_app.cli.output import render_json
from capa_app.providers import AWSProvider, ClusterAPIProvider, CoreComponents, TinkerbellProvider
from capa_app.rollout import UpgradeRefused, check_upgrade
from capa_py.api.loader import ManifestError
from capa_py.store.kube import KubeStore
from capa_py.store.protocol import ObjectStore
from capa_py.workflow import management, render, workload
from capa_py.workflow.cluster_files import ClusterFiles
from capa_py.workflow.clusters import ClusterAccess
from capa_py.workflow.config import ClusterFile, load_cluster_file
from capa_py.workflow.diagnostics import AWSCallCollector, ClusterStoreCollector, ErrorHandler, LogCollector
from capa_py.workflow.progress import WorkflowProgress
from capa_py.workflow.runner import TaskEvent, WorkflowResult, run_workflow
from capa_py.workflow.steps import cluster_kubeconfig_path
from capa_py.workflow.workflow import Workflow

Operation = Literal["create", "upgrade", "delete"]


@dataclass
class _Run:
    workflow: Workflow[Any]
    context: management.ManagementContext | workload.WorkloadContext
    workflow_id: str


def _load(path: Path, check_files: bool) -> ClusterFile:
    try:
        return load_cluster_file(path, check_files)
    except ManifestError as exc:
        for problem in exc.problems:
            stderr.print(f"error: {problem}", markup=False, highlight=False)
        raise typer.Exit(EXIT_INVALID) from exc


def _reachable(kubeconfig: Path, flag: str) -> None:
    """Exit 2 when the kubeconfig cannot be used, 1 when its server does not answer."""
    reachable_kube_store(kubeconfig, flag).close()


def _provider(
    ctx: typer.Context, spec: ClusterFile, in_process: bool, endpoint: str | None, profile: str | None
) -> ClusterAPIProvider:
    if spec.provider == "tinkerbell":
        return TinkerbellProvider()
    if not in_process:
        # The management cluster's controllers make every AWS call of a workload workflow.
        def elsewhere() -> Any:
            raise RuntimeError("the AWS controllers run on the management cluster, not in this process")

        return AWSProvider(elsewhere)
    region = next((o.spec.region for o in spec.objects if o.KIND == "AWSCluster"), None)  # type: ignore[attr-defined]
    aws = aws_context(ctx, endpoint, region, profile, None)
    return AWSProvider(lambda: (aws.pool, aws.engine))


def _kinds() -> list[Any]:
    from capa_py.move import MOVABLE_KINDS

    return list(MOVABLE_KINDS)


def build(
    ctx: typer.Context,
    operation: Operation,
    path: Path,
    is_management: bool,
    kubeconfig: Path | None,
    timeout: str,
    endpoint: str | None,
    profile: str | None,
    image: str,
    plan_only: bool,
) -> _Run:
    if is_management == (kubeconfig is not None):
        fail("give exactly one of --management and --kubeconfig MGMT", EXIT_INVALID)
    try:
        seconds = parse_duration(timeout)
    except ValueError as exc:
        fail(f"--timeout: {exc}", EXIT_INVALID)
    spec = _load(path, check_files=not plan_only)
    state_dir = globals_of(ctx).state.parent
    workflow_id = f"{'management' if is_management else 'workload'}-{operation}-{spec.namespace}-{spec.name}"
    files = ClusterFiles(state_dir)
    core = CoreComponents(image)
    if is_management:
        own = cluster_kubeconfig_path(state_dir, spec.name)
        if operation != "create" and not plan_only:
            if not own.exists():
                fail(
                    f"no kubeconfig of management cluster {spec.name} at {own}: "
                    "`capa cluster create --management` writes it there",
                    EXIT_INVALID,
                )
            _reachable(own, f"management cluster {spec.name}")
        # A plan runs nothing: no AWS session is made for it.
        provider = _provider(ctx, spec, not plan_only, endpoint, profile)
        context: management.ManagementContext
        workflow: Workflow[Any]
        if operation == "create":
            context = management.CreateContext(spec, provider, core, state_dir, seconds)
            workflow = management.new_create_workflow(
                spec, provider, hooks=[files], error_handler=_error_handler(spec, context)
            )
        elif operation == "upgrade":
            context = management.UpgradeContext(spec, provider, core, state_dir, seconds)
            if not plan_only:
                _check_upgrade(own, spec)
            workflow = management.new_upgrade_workflow(
                spec, provider, hooks=[files], error_handler=_error_handler(spec, context)
            )
        else:
            context = management.DeleteContext(spec, provider, core, state_dir, seconds)
            workflow = management.new_delete_workflow(
                spec, provider, hooks=[files], error_handler=_error_handler(spec, context)
            )
        return _Run(workflow, context, workflow_id)
    assert kubeconfig is not None
    if not plan_only:
        _reachable(kubeconfig, "--kubeconfig")
    access = ClusterAccess("management", kubeconfig)
    provider = _provider(ctx, spec, False, endpoint, profile)
    wl: workload.WorkloadContext
    if operation == "create":
        wl = workload.CreateContext(spec, provider, core, access, state_dir, seconds)
        workflow = workload.new_create_workflow(
            spec, provider, hooks=[files], error_handler=_error_handler(spec, wl)
        )
    elif operation == "upgrade":
        wl = workload.UpgradeContext(spec, provider, core, access, state_dir, seconds)
        if not plan_only:
            _check_upgrade(kubeconfig, spec)
        workflow = workload.new_upgrade_workflow(
            spec, provider, hooks=[files], error_handler=_error_handler(spec, wl)
        )
    else:
        wl = workload.DeleteContext(spec, provider, core, access, state_dir, seconds)
        workflow = workload.new_delete_workflow(
            spec, provider, hooks=[files], error_handler=_error_handler(spec, wl)
        )
    return _Run(workflow, wl, workflow_id)


def _check_upgrade(kubeconfig: Path, spec: ClusterFile) -> None:
    """The seed's Setup and Validate: an upgrade the cluster cannot take exits 2 before anything runs."""
    store = KubeStore.from_kubeconfig(kubeconfig)
    try:
        check_upgrade(store, list(spec.objects))
    except UpgradeRefused as exc:
        fail(str(exc), EXIT_INVALID)
    finally:
        store.close()


def _error_handler(
    spec: ClusterFile, context: management.ManagementContext | workload.WorkloadContext
) -> ErrorHandler:
    """The bundle reads the cluster's objects from where they are when the workflow fails: the bootstrap
    cluster while it serves, else the management cluster."""

    def find() -> ObjectStore | None:
        if isinstance(context, management.ManagementContext):
            if context.bootstrap_cluster.serving:
                return context.bootstrap_cluster.start().store()
            kubeconfig = cluster_kubeconfig_path(context.state_dir, spec.name)
            return KubeStore.from_kubeconfig(kubeconfig) if kubeconfig.exists() else None
        return context.management.store()

    return ErrorHandler(
        [ClusterStoreCollector(find, _kinds(), spec.namespace), AWSCallCollector(), LogCollector()]
    )


def _print_event(event: TaskEvent) -> None:
    word = {"started": "running", "finished": "done", "failed": "failed", "skipped": "done earlier"}[
        event.kind
    ]
    took = f" ({event.seconds:.1f}s)" if event.seconds is not None else ""
    stderr.print(
        f"[{event.index + 1}/{event.total}] {event.task}: {word}{took}", markup=False, highlight=False
    )


def _document(run: _Run, result: WorkflowResult, seconds: dict[str, float]) -> dict[str, Any]:
    states = dict.fromkeys(run.workflow.task_names, "pending")
    for name in result.skipped:
        states[name] = "resumed"
    for name in result.ran:
        states[name] = "done"
    if result.failure is not None:
        states[result.failure.task] = "failed"
    return {
        "workflow": run.workflow.name,
        "workflowId": run.workflow_id,
        "cluster": run.context.spec.name,
        "namespace": run.context.spec.namespace,
        "succeeded": result.succeeded,
        "tasks": [
            {"name": name, "state": state, "seconds": round(seconds[name], 3) if name in seconds else None}
            for name, state in states.items()
        ],
        "failure": None
        if result.failure is None
        else {
            "task": result.failure.task,
            "phase": result.failure.phase,
            "error": result.failure.error_type,
            "message": result.failure.message,
        },
        "bundle": str(result.bundle) if result.bundle is not None else None,
        "kubeconfig": str(cluster_kubeconfig_path(run.context.state_dir, run.context.spec.name)),
    }


def execute(run: _Run, resume: bool, output: str) -> None:
    seconds: dict[str, float] = {}
    view = WorkflowProgress(run.workflow, stderr)
    if output == "table":
        run.context.notify = lambda line: stderr.print(f"      {line}", markup=False, highlight=False)

    def on_event(event: TaskEvent) -> None:
        if event.seconds is not None:
            seconds[event.task] = event.seconds
        if output == "table":
            view(event)
            if not view.live:
                _print_event(event)

    try:
        with view if output == "table" else _nothing():
            result = run_workflow(
                run.workflow,
                run.context,
                workflow_id=run.workflow_id,
                state_dir=run.context.state_dir,
                resume=resume,
                on_event=on_event,
            )
    except ValueError as exc:  # a checkpoint of another task list
        fail(str(exc), EXIT_INVALID)
    finally:
        run.context.close()
    if output == "json":
        sys.stdout.write(render_json(_document(run, result, seconds)) + "\n")
    else:
        if not view.live:
            stderr.print(view.render())
        if result.succeeded:
            stdout.print(
                f"{run.workflow.name} {run.context.spec.name}: done "
                f"({len(result.ran)} tasks run, {len(result.skipped)} done earlier)",
                markup=False,
                highlight=False,
            )
    if not result.succeeded:
        assert result.failure is not None
        stderr.print(
            f"error: {run.workflow.name} failed at {result.failure.task}: {result.failure.message}",
            markup=False,
            highlight=False,
        )
        if result.bundle is not None:
            stderr.print(f"diagnostics: {result.bundle}", markup=False, highlight=False)
        stderr.print("run the same command again to resume after the last completed task", markup=False)
        raise typer.Exit(EXIT_FAILED)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def show_plan(run: _Run, fmt: str) -> None:
    text = {"list": render.to_list, "mermaid": render.to_mermaid, "dot": render.to_dot}[fmt](run.workflow)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


__all__ = ["Operation", "build", "execute", "show_plan"]
