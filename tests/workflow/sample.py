"""A small workflow for the framework's tests: a constructor with flags, tasks that count their runs.

Every task and hook appends a line to ``<marks>/<name>`` when it does its work, so a test (or a process
run again after being killed) can count how often each ran.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from capa_py.workflow import CHECKPOINTED, Binder, Context, ErrorHandler, Workflow, hook_point, task


@dataclass
class SampleContext(Context):
    marks: Path
    fail_at: str | None = None
    kubeconfig: str | None = field(default=None, metadata=CHECKPOINTED)
    nodes: list[str] | None = field(default=None, metadata=CHECKPOINTED)
    seen_kubeconfig: list[str] = field(default_factory=list)


def mark(ctx: SampleContext, name: str) -> None:
    with (ctx.marks / name.replace(" ", "-")).open("a", encoding="utf-8") as out:
        out.write("ran\n")


def _maybe_fail(ctx: SampleContext, name: str) -> None:
    if ctx.fail_at == name:
        raise RuntimeError(f"{name} broke on purpose")


PRE_CREATE = hook_point(
    "Pre Create", "Runs first; executes the pre workflow hooks. Assumes nothing.", SampleContext
)
POST_CREATE = hook_point(
    "Post Create", "Runs last, after every task succeeded; executes post hooks.", SampleContext
)


@task("Create Bootstrap Cluster")
def create_bootstrap(ctx: SampleContext) -> None:
    """Runs after Pre Create; records the bootstrap kubeconfig path in the context."""
    mark(ctx, "Create Bootstrap Cluster")
    _maybe_fail(ctx, "Create Bootstrap Cluster")
    ctx.kubeconfig = str(ctx.marks / "bootstrap.kubeconfig")
    ctx.nodes = ["cp-0"]


@task("Install Networking")
def install_networking(ctx: SampleContext) -> None:
    """Runs when the cluster config names a CNI; assumes the bootstrap kubeconfig is known."""
    mark(ctx, "Install Networking")
    _maybe_fail(ctx, "Install Networking")


@task("Install Extras")
def install_extras(ctx: SampleContext) -> None:
    """Runs when extras were asked for; assumes the cluster exists."""
    mark(ctx, "Install Extras")
    _maybe_fail(ctx, "Install Extras")


@task("Use Kubeconfig")
def use_kubeconfig(ctx: SampleContext) -> None:
    """Runs after the cluster exists; assumes the kubeconfig path recorded by Create Bootstrap Cluster."""
    if ctx.kubeconfig is None or ctx.nodes != ["cp-0"]:
        raise RuntimeError("the kubeconfig recorded by Create Bootstrap Cluster is gone")
    mark(ctx, "Use Kubeconfig")
    (ctx.marks / "used-kubeconfig").write_text(ctx.kubeconfig, encoding="utf-8")
    _maybe_fail(ctx, "Use Kubeconfig")


def expected_tasks(networking: bool, extras: bool) -> list[str]:
    return [
        "Pre Create",
        "Create Bootstrap Cluster",
        *(["Install Networking"] if networking else []),
        *(["Install Extras"] if extras else []),
        "Use Kubeconfig",
        "Post Create",
    ]


def new_sample_workflow(
    *,
    networking: bool,
    extras: bool,
    hooks: Iterable[Callable[[Binder[SampleContext]], None]] = (),
    error_handler: ErrorHandler | None = None,
) -> Workflow[SampleContext]:
    """The constructor: the one place deciding which tasks run."""
    tasks = [PRE_CREATE, create_bootstrap]
    if networking:
        tasks.append(install_networking)
    if extras:
        tasks.append(install_extras)
    tasks += [use_kubeconfig, POST_CREATE]
    return Workflow("sample create", SampleContext, tasks, hooks=hooks, error_handler=error_handler)
