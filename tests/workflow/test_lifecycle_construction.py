"""The cluster lifecycle workflows as their constructors build them: the task lists of the workflow design,
the tasks typed per workflow kind, the hooks a provider and a registrar bind, and the one error path.

The runs here use :class:`RecordingProvider`, a test double of the ``Provider`` protocol: it records the
calls the workflows make instead of provisioning anything, so a workload delete (and a workload create up
to its failing provider call) runs in milliseconds without AWS or a management cluster. The workflows that
need a bootstrap cluster and AWS are run end to end elsewhere.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from capa_app.providers import CoreComponents
from capa_py.api.clusterconfig import ProviderName
from capa_py.workflow import management, workload
from capa_py.workflow.cluster_files import ClusterFiles
from capa_py.workflow.clusters import ClusterAccess
from capa_py.workflow.config import ClusterFile, load_cluster_file
from capa_py.workflow.hook import Binder, HookError, NoopHookRegistrar
from capa_py.workflow.provider import RolloutStep
from capa_py.workflow.runner import run_workflow
from capa_py.workflow.steps import cluster_directory
from capa_py.workflow.workflow import Workflow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"

MANAGEMENT_CREATE = [
    "Pre Create",
    "Create Bootstrap Cluster",
    "Install Bootstrap Components",
    "Create Management Cluster",
    "[Install Networking]",
    "Install Management Components",
    "Pivot to Management",
    "Install Cluster Configuration",
    "Delete Bootstrap Cluster",
    "Post Create",
]
MANAGEMENT_UPGRADE = [
    "Pre Upgrade",
    "Upgrade Management Components",
    "[Upgrade Networking]",
    "Install Management Components",
    "Create Bootstrap Cluster",
    "Install Bootstrap Components",
    "Pivot to Bootstrap",
    "Upgrade Cluster",
    "Pivot to Management",
    "Delete Bootstrap Cluster",
    "Write Cluster Config",
    "Post Upgrade",
]
MANAGEMENT_DELETE = [
    "Pre Delete",
    "Create Bootstrap Cluster",
    "Install Bootstrap Components",
    "Pivot to Bootstrap",
    "Delete Cluster",
    "Delete Bootstrap Cluster",
    "Post Delete",
]
WORKLOAD_CREATE = [
    "Pre Create",
    "Create Workload Cluster",
    "[Install Networking]",
    "Install capa-py Components",
    "Post Create",
]
WORKLOAD_UPGRADE = [
    "Pre Upgrade",
    "[Upgrade Networking]",
    "Upgrade capa-py Components",
    "Upgrade Cluster",
    "Write Cluster Config",
    "Post Upgrade",
]
WORKLOAD_DELETE = ["Pre Delete", "Delete Workload Cluster", "Post Delete"]
"""The workflow design's task lists; a bracketed task is there only when the config names a CNI manifest."""

Constructor = Callable[..., Workflow[Any]]

DESIGN: dict[tuple[str, str], tuple[Constructor, list[str], str]] = {
    ("management", "create"): (management.new_create_workflow, MANAGEMENT_CREATE, "management create"),
    ("management", "upgrade"): (management.new_upgrade_workflow, MANAGEMENT_UPGRADE, "management upgrade"),
    ("management", "delete"): (management.new_delete_workflow, MANAGEMENT_DELETE, "management delete"),
    ("workload", "create"): (workload.new_create_workflow, WORKLOAD_CREATE, "workload create"),
    ("workload", "upgrade"): (workload.new_upgrade_workflow, WORKLOAD_UPGRADE, "workload upgrade"),
    ("workload", "delete"): (workload.new_delete_workflow, WORKLOAD_DELETE, "workload delete"),
}


def expected_tasks(design: list[str], cni: bool) -> list[str]:
    listed = []
    for name in design:
        if name.startswith("["):
            if cni:
                listed.append(name.strip("[]"))
        else:
            listed.append(name)
    return listed


def cluster_file(kind: str, cni: bool, copy_to: Path | None = None) -> ClusterFile:
    """The example cluster file of ``kind``, with or without its CNI manifest. ``copy_to`` writes the file
    there first (the cluster-files hooks copy it from ``spec.path``)."""
    path = EXAMPLES / ("mgmt.yaml" if kind == "management" else "work.yaml")
    if copy_to is not None:
        copy_to.mkdir(parents=True, exist_ok=True)
        (copy_to / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        path = copy_to / path.name
    spec = load_cluster_file(path, check_files=False)
    if cni:
        assert spec.config.spec.networking.cni_manifest is not None, f"{path} names no CNI manifest"
        return spec
    config = spec.config.model_copy(deep=True)
    config.spec.networking.cni_manifest = None
    return dataclasses.replace(spec, config=config)


class RecordingProvider(NoopHookRegistrar):
    """A test double of the Provider protocol: records each call the workflows make (in ``events``, shared
    with the test's hooks so the order can be checked) instead of provisioning; ``fail_create`` makes
    create_cluster raise."""

    name: ProviderName = "aws"

    def __init__(self, events: list[str] | None = None, fail_create: bool = False) -> None:
        self.events = events if events is not None else []
        self.fail_create = fail_create

    def install_components(self, cluster: ClusterAccess, spec: ClusterFile) -> None:
        self.events.append(f"provider.install_components {cluster.name}")

    def upgrade_components(self, cluster: ClusterAccess, spec: ClusterFile) -> None:
        self.events.append(f"provider.upgrade_components {cluster.name}")

    def create_cluster(self, cluster: ClusterAccess, spec: ClusterFile, timeout: float) -> None:
        self.events.append(f"provider.create_cluster {spec.name} on {cluster.name}")
        if self.fail_create:
            raise RuntimeError("the test provider refuses to create clusters")

    def upgrade_cluster(self, cluster: ClusterAccess, spec: ClusterFile, timeout: float) -> list[RolloutStep]:
        self.events.append(f"provider.upgrade_cluster {spec.name} on {cluster.name}")
        return []

    def delete_cluster(self, cluster: ClusterAccess, spec: ClusterFile, timeout: float) -> None:
        self.events.append(f"provider.delete_cluster {spec.name} on {cluster.name}")


def recorder(events: list[str], label: str) -> Callable[[Any], None]:
    def record(ctx: Any) -> None:
        """Records that it ran (a test hook: runs wherever the test binds it)."""
        events.append(label)

    record.__qualname__ = f"record[{label}]"
    return record


def management_access(tmp_path: Path) -> ClusterAccess:
    # Never connected to: the provider double takes every call that would reach the management cluster.
    return ClusterAccess("management", tmp_path / "management.kubeconfig")


@pytest.mark.parametrize("cni", [True, False], ids=["cni", "no-cni"])
@pytest.mark.parametrize(("kind", "operation"), list(DESIGN), ids=[f"{k}-{o}" for k, o in DESIGN])
def test_constructor_lists_the_design_tasks_in_order(kind: str, operation: str, cni: bool) -> None:
    constructor, design, name = DESIGN[(kind, operation)]
    workflow = constructor(cluster_file(kind, cni), RecordingProvider())
    assert workflow.name == name
    assert workflow.task_names == expected_tasks(design, cni), f"{name} (cni={cni}) lists other tasks"


@pytest.mark.parametrize(("kind", "operation"), list(DESIGN), ids=[f"{k}-{o}" for k, o in DESIGN])
def test_every_task_is_documented(kind: str, operation: str) -> None:
    constructor, _, name = DESIGN[(kind, operation)]
    workflow = constructor(cluster_file(kind, True), RecordingProvider())
    undocumented = [t.name for t in workflow.tasks if not t.doc.strip()]
    assert undocumented == [], f"{name}: tasks without a docstring: {undocumented}"
    thin = [t.name for t in workflow.tasks if len(t.summary) < 20]
    assert thin == [], f"{name}: tasks whose docstring says nothing of when they run: {thin}"


def workflows_of(cni: bool) -> dict[tuple[str, str], Workflow[Any]]:
    return {
        key: constructor(cluster_file(key[0], cni), RecordingProvider())
        for key, (constructor, _, _) in DESIGN.items()
    }


def test_tasks_are_typed_per_workflow_kind() -> None:
    """A task object belongs to one workflow kind: same-named tasks of two kinds are different objects,
    and no workflow's binder has another kind's task."""
    built = workflows_of(cni=True)
    for key, workflow in built.items():
        for other_key, other in built.items():
            if other_key == key:
                continue
            foreign = [t.name for t in other.tasks if workflow.binder.has(t)]
            assert foreign == [], f"{workflow.name}'s binder has tasks of {other.name}: {foreign}"
            assert all(workflow.binder.has(t) for t in workflow.tasks)
    # The same behaviour under the same name is still a different task per kind (mypy knows it too: it
    # calls an identity check between the two a non-overlapping comparison).
    assert id(management.create.CREATE_BOOTSTRAP_CLUSTER) != id(management.upgrade.CREATE_BOOTSTRAP_CLUSTER)
    assert id(management.create.PRE_CREATE) != id(workload.PRE_CREATE)


def test_a_task_of_another_kind_cannot_be_hooked() -> None:
    workflow = workload.new_upgrade_workflow(cluster_file("workload", True), RecordingProvider())
    with pytest.raises(HookError, match="has no task 'Create Bootstrap Cluster'") as caught:
        workflow.binder.before(management.create.CREATE_BOOTSTRAP_CLUSTER, recorder([], "x"))
    assert "Upgrade capa-py Components" in str(caught.value), "the message lists the workflow's tasks"


def test_a_context_of_another_kind_is_refused(tmp_path: Path) -> None:
    spec = cluster_file("workload", False)
    provider = RecordingProvider()
    workflow = workload.new_delete_workflow(spec, provider)
    wrong = workload.CreateContext(spec, provider, CoreComponents(), management_access(tmp_path), tmp_path)
    with pytest.raises(TypeError, match="runs with a DeleteContext, not a CreateContext"):
        run_workflow(workflow, wrong, workflow_id="wrong", state_dir=tmp_path)  # type: ignore[misc]
    assert provider.events == []


class BindingProvider(RecordingProvider):
    """The provider double, extending management create: before Create Bootstrap Cluster and after Post
    Create."""

    def bind_create_hooks(self, binder: Binder[Any]) -> None:
        binder.before(management.create.CREATE_BOOTSTRAP_CLUSTER, self.before_bootstrap)
        binder.after(management.create.POST_CREATE, self.after_create)

    def before_bootstrap(self, ctx: management.CreateContext) -> None:
        """Runs before Create Bootstrap Cluster; records it."""
        self.events.append("provider before Create Bootstrap Cluster")

    def after_create(self, ctx: management.CreateContext) -> None:
        """Runs after Post Create; records it."""
        self.events.append("provider after Post Create")


class AfterCreate(NoopHookRegistrar):
    def bind_create_hooks(self, binder: Binder[Any]) -> None:
        binder.after(management.create.POST_CREATE, self.after_create)

    def after_create(self, ctx: management.CreateContext) -> None:
        """Runs after Post Create, after the provider's hook (the provider binds first)."""


def test_provider_and_registrar_hooks_are_bound_where_they_ask() -> None:
    provider = BindingProvider()
    registrar = AfterCreate()
    workflow = management.new_create_workflow(cluster_file("management", True), provider, hooks=[registrar])
    binder = workflow.binder
    assert binder.handlers_before(management.create.CREATE_BOOTSTRAP_CLUSTER) == [provider.before_bootstrap]
    assert binder.handlers_after(management.create.POST_CREATE) == [
        provider.after_create,
        registrar.after_create,
    ]
    hooked = [t.name for t in binder.tasks if binder.handlers_before(t) or binder.handlers_after(t)]
    assert hooked == ["Create Bootstrap Cluster", "Post Create"]
    # A provider's create hooks are not bound into its other workflows.
    upgrade = management.new_upgrade_workflow(cluster_file("management", True), provider, hooks=[registrar])
    assert not any(
        upgrade.binder.handlers_before(t) or upgrade.binder.handlers_after(t) for t in upgrade.tasks
    )


class DeleteHooks(RecordingProvider):
    """The provider double, hooking every task of workload delete on both sides."""

    def bind_delete_hooks(self, binder: Binder[Any]) -> None:
        for point in (workload.PRE_DELETE, workload.DELETE_WORKLOAD_CLUSTER, workload.POST_DELETE):
            binder.before(point, recorder(self.events, f"provider before {point.name}"))
            binder.after(point, recorder(self.events, f"provider after {point.name}"))


class SeesFilesGone(NoopHookRegistrar):
    """Bound after ClusterFiles: records whether the cluster's directory was still there."""

    def __init__(self, events: list[str], directory: Path) -> None:
        self.events = events
        self.directory = directory

    def bind_delete_hooks(self, binder: Binder[Any]) -> None:
        binder.after(workload.POST_DELETE, self.look)

    def look(self, ctx: workload.DeleteContext) -> None:
        """Runs after Post Delete, after the cluster files' hook; records what it finds."""
        self.events.append(f"cluster directory exists: {self.directory.exists()}")


def test_workload_delete_runs_hooks_around_each_task_and_removes_the_cluster_files(tmp_path: Path) -> None:
    state = tmp_path / "state"
    spec = cluster_file("workload", False)
    directory = cluster_directory(state, spec.name)
    directory.mkdir(parents=True)
    (directory / "kubeconfig").write_text("stand-in\n", encoding="utf-8")
    (directory / "cluster.yaml").write_text("stand-in\n", encoding="utf-8")
    events: list[str] = []
    provider = DeleteHooks(events)
    workflow = workload.new_delete_workflow(
        spec, provider, hooks=[ClusterFiles(state), SeesFilesGone(events, directory)]
    )
    access = management_access(tmp_path)
    ctx = workload.DeleteContext(spec, provider, CoreComponents(), access, state, timeout=5.0)
    result = run_workflow(workflow, ctx, workflow_id="work-delete", state_dir=state)
    assert result.succeeded, result.failure
    assert result.ran == ("Pre Delete", "Delete Workload Cluster", "Post Delete")
    assert events == [
        "provider before Pre Delete",
        "provider after Pre Delete",
        "provider before Delete Workload Cluster",
        "provider.delete_cluster work on management",
        "provider after Delete Workload Cluster",
        "provider before Post Delete",
        "provider after Post Delete",
        "cluster directory exists: False",
    ]
    assert not directory.exists()
    assert not (state / "workflows" / "work-delete.json").exists(), "a completed workflow keeps no checkpoint"


@pytest.mark.parametrize("kind", ["management", "workload"])
def test_cluster_files_hook_writes_the_cluster_file_after_post_create(kind: str, tmp_path: Path) -> None:
    """Runs the handlers the create workflow bound after Post Create (the tasks before it need a cluster)."""
    state = tmp_path / "state"
    spec = cluster_file(kind, True, copy_to=tmp_path / "given")
    provider = RecordingProvider()
    ctx: Any
    workflow: Workflow[Any]
    if kind == "management":
        workflow = management.new_create_workflow(spec, provider, hooks=[ClusterFiles(state)])
        point: Any = management.create.POST_CREATE
        ctx = management.CreateContext(spec, provider, CoreComponents(), state)
    else:
        workflow = workload.new_create_workflow(spec, provider, hooks=[ClusterFiles(state)])
        point = workload.POST_CREATE
        ctx = workload.CreateContext(spec, provider, CoreComponents(), management_access(tmp_path), state)
    handlers = workflow.binder.handlers_after(point)
    assert len(handlers) == 1, f"ClusterFiles binds one handler after Post Create, got {handlers}"
    hooked = [
        t.name
        for t in workflow.tasks
        if workflow.binder.handlers_after(t) or workflow.binder.handlers_before(t)
    ]
    assert hooked == ["Post Create"]
    target = cluster_directory(state, spec.name) / "cluster.yaml"
    assert not target.exists()
    handlers[0](ctx)
    assert target.read_text(encoding="utf-8") == spec.path.read_text(encoding="utf-8")


def record_before(workflow: Workflow[Any], points: Sequence[Any], events: list[str]) -> None:
    for point in points:
        workflow.binder.before(point, recorder(events, f"before {point.name}"))


def test_a_failing_provider_fails_the_task_writes_a_bundle_and_resume_skips_what_completed(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    # No kubeconfigFile: the create task then goes straight to the provider, which fails before anything
    # would reach the management cluster.
    spec = cluster_file("workload", False)
    config = spec.config.model_copy(deep=True)
    config.spec.control_plane.kubeconfig_file = None
    spec = dataclasses.replace(spec, config=config)
    events: list[str] = []

    def run_once() -> Any:
        provider = RecordingProvider(events, fail_create=True)
        workflow = workload.new_create_workflow(spec, provider)
        record_before(workflow, [workload.PRE_CREATE, workload.CREATE_WORKLOAD_CLUSTER], events)
        ctx = workload.CreateContext(spec, provider, CoreComponents(), management_access(tmp_path), state)
        return run_workflow(workflow, ctx, workflow_id="work-create", state_dir=state)

    first = run_once()
    assert not first.succeeded
    assert first.failure is not None
    assert (first.failure.task, first.failure.phase) == ("Create Workload Cluster", "task")
    assert "refuses to create clusters" in first.failure.message
    assert first.ran == ("Pre Create",)
    assert first.bundle is not None
    assert first.bundle.parent == state / "diagnostics"
    failure = json.loads((first.bundle / "failure.json").read_text(encoding="utf-8"))
    assert failure["task"] == "Create Workload Cluster"
    assert failure["workflow"] == "workload create"
    assert failure["workflowId"] == "work-create"
    assert "RuntimeError" in failure["errorType"]
    assert events == [
        "before Pre Create",
        "before Create Workload Cluster",
        "provider.create_cluster work on management",
    ]

    events.clear()
    second = run_once()
    assert second.skipped == ("Pre Create",)
    assert second.ran == ()
    assert second.failure is not None
    assert second.failure.task == "Create Workload Cluster"
    assert events == ["before Create Workload Cluster", "provider.create_cluster work on management"], (
        "the resumed run ran Pre Create's hooks again"
    )
    assert second.bundle is not None
    assert second.bundle != first.bundle
