"""The Python generator: the seed CronJob document becomes a working manager against a real SQLite store."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from typer.testing import CliRunner

from capa_app.cli.ctrlkit_cmd import app
from capa_py.api.meta import KubeObject, ObjectMeta, OwnerReference
from capa_py.api.registry import KindRegistry, default_registry
from capa_py.ctrlkit import Action, Context, If, Join, Result, ignore_exit, requeue_after
from capa_py.ctrlkit.codegen import generate, snake_case
from capa_py.ctrlkit.dsl import DSLError, parse, parse_file
from capa_py.ctrlkit.state import NotOwned
from capa_py.store import SQLiteStore

FIXTURE = Path(__file__).parent / "fixtures" / "cronjob.ctrlkit"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "demo"
HookLog = list[tuple[str, str, str, tuple[str, ...]]]  # (who, "before"/"after", action, state names)


def load_module(path: Path, source: str) -> ModuleType:
    """Write ``source`` to ``path`` and import it as a module of that file's name."""
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"generated_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def cronjob_manager(tmp_path: Path) -> ModuleType:
    source = generate(parse_file(FIXTURE), FIXTURE.name)
    return load_module(tmp_path / "cronjob_manager.py", source)


@dataclass
class World:
    """A store with the CronJob demo kinds (schemaless) and one CronJob ``nightly``."""

    store: SQLiteStore
    registry: KindRegistry
    cron_job_kind: type[KubeObject]
    job_kind: type[KubeObject]
    cron_job: KubeObject

    def create_job(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        owner: OwnerReference | None = None,
        namespace: str = NAMESPACE,
    ) -> None:
        meta = ObjectMeta(
            name=name, namespace=namespace, labels=labels or {}, owner_references=[owner] if owner else []
        )
        self.store.create(self.job_kind(metadata=meta))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    registry = KindRegistry()
    cron_job_kind = registry.define("controller-kit-demo/v1", "CronJob")
    job_kind = registry.define("batch/v1", "Job")
    store = SQLiteStore(tmp_path / "state.db", registry=registry)
    cron_job = store.create(
        cron_job_kind.model_validate(
            {"metadata": {"name": "nightly", "namespace": NAMESPACE}, "spec": {"schedule": "0 3 * * *"}}
        )
    )
    yield World(store, registry, cron_job_kind, job_kind, cron_job)
    store.close()


def owner(name: str, uid: str) -> OwnerReference:
    """A controller reference to a CronJob called ``name`` with ``uid``."""
    return OwnerReference(
        api_version="controller-kit-demo/v1", kind="CronJob", name=name, uid=uid, controller=True
    )


def names(objects: list[KubeObject]) -> list[str]:
    return sorted(obj.name for obj in objects)


class RecordingHook:
    """Records what each hook call saw in a log shared with other hooks."""

    def __init__(self, log: HookLog, who: str) -> None:
        self.log = log
        self.who = who

    def before_action(self, action: Action, states: Mapping[str, Any]) -> None:
        self.log.append((self.who, "before", action.description, tuple(states)))

    def after_action(self, action: Action, states: Mapping[str, Any], result: Result) -> None:
        self.log.append((self.who, "after", action.description, tuple(states)))


class CronJobImpl(RecordingHook):
    """The test's implementation of the generated protocol: records the jobs each action received."""

    def __init__(self, log: HookLog, cleanup: Result | None = None) -> None:
        super().__init__(log, "impl")
        self.received: dict[str, list[str]] = {}
        self.cleanup = cleanup

    def list_active_jobs_and_update_status(self, ctx: Context, jobs: list[KubeObject]) -> Result | None:
        self.received["ListActiveJobsAndUpdateStatus"] = names(jobs)
        return None

    def clean_up_old_jobs_exceeds_history_limits(self, ctx: Context, jobs: list[KubeObject]) -> Result | None:
        self.received["CleanUpOldJobsExceedsHistoryLimits"] = names(jobs)
        return self.cleanup

    def run_next_scheduled_job(self, ctx: Context) -> Result | None:
        self.received["RunNextScheduledJob"] = []
        return None

    def update_cron_job_status(self, ctx: Context) -> Result | None:
        self.received["UpdateCronJobStatus"] = []
        return None


def seed_workflow(
    module: ModuleType, world: World, impl: CronJobImpl, hooks: list[Any], suspended: bool
) -> Action:
    """The RFC's CronJob workflow: Join(list active, clean up, If(not suspended, run next))."""
    state = module.CronJobControllerManagerState(world.store, world.cron_job, world.registry)
    manager = module.CronJobControllerManager(state, impl, hooks)
    return Join(
        manager.list_active_jobs_and_update_status(),
        manager.clean_up_old_jobs_exceeds_history_limits(),
        If(not suspended, manager.run_next_scheduled_job()),
    )


# -- the seed document, end to end -----------------------------------------------------------------------


def test_seed_workflow_gives_each_action_exactly_the_jobs_its_state_selects(
    cronjob_manager: ModuleType, world: World
) -> None:
    uid = world.cron_job.uid
    label = {"cronjob": "nightly"}
    world.create_job("nightly-1", label, owner(uid=uid, name="nightly"))
    world.create_job("nightly-2", label, owner(uid=uid, name="nightly"))
    world.create_job("labelled-not-owned", label)
    world.create_job("owned-not-labelled", {}, owner(uid=uid, name="nightly"))
    world.create_job("owned-by-another-cronjob", label, owner(uid="0" * 32, name="hourly"))
    world.create_job("stale-owner-same-name", label, owner(uid="1" * 32, name="nightly"))
    world.create_job("other-namespace", label, owner(uid=uid, name="nightly"), namespace="elsewhere")
    log: HookLog = []
    impl = CronJobImpl(log)

    result = seed_workflow(cronjob_manager, world, impl, [RecordingHook(log, "hook")], suspended=False).run()

    assert ignore_exit(result) == Result()
    assert impl.received == {
        "ListActiveJobsAndUpdateStatus": ["nightly-1", "nightly-2"],
        "CleanUpOldJobsExceedsHistoryLimits": ["nightly-1", "nightly-2"],
        "RunNextScheduledJob": [],
    }


def test_hooks_see_before_and_after_of_each_action_with_its_state_names(
    cronjob_manager: ModuleType, world: World
) -> None:
    log: HookLog = []
    impl = CronJobImpl(log)

    seed_workflow(cronjob_manager, world, impl, [RecordingHook(log, "hook")], suspended=False).run()

    expected: HookLog = []
    for action, states in (
        ("ListActiveJobsAndUpdateStatus", ("jobs",)),
        ("CleanUpOldJobsExceedsHistoryLimits", ("jobs",)),
        ("RunNextScheduledJob", ()),
    ):
        # The manager's hooks first, then the implementation's own (it implements ActionHook).
        expected += [("hook", "before", action, states), ("impl", "before", action, states)]
        expected += [("hook", "after", action, states), ("impl", "after", action, states)]
    assert log == expected


def test_suspended_cronjob_skips_running_the_next_job(cronjob_manager: ModuleType, world: World) -> None:
    impl = CronJobImpl([])

    seed_workflow(cronjob_manager, world, impl, [], suspended=True).run()

    assert sorted(impl.received) == ["CleanUpOldJobsExceedsHistoryLimits", "ListActiveJobsAndUpdateStatus"]


def test_action_results_are_joined_by_the_workflow(cronjob_manager: ModuleType, world: World) -> None:
    impl = CronJobImpl([], cleanup=requeue_after(30))

    result = seed_workflow(cronjob_manager, world, impl, [], suspended=False).run()

    assert result == Result(requeue_after=30)


def test_actions_are_described_by_their_dsl_names(cronjob_manager: ModuleType, world: World) -> None:
    state = cronjob_manager.CronJobControllerManagerState(world.store, world.cron_job, world.registry)
    manager = cronjob_manager.CronJobControllerManager(state, CronJobImpl([]))

    assert [manager.update_cron_job_status().description, manager.run_next_scheduled_job().description] == [
        "UpdateCronJobStatus",
        "RunNextScheduledJob",
    ]


def test_state_getter_reads_the_store_when_called(cronjob_manager: ModuleType, world: World) -> None:
    state = cronjob_manager.CronJobControllerManagerState(world.store, world.cron_job, world.registry)
    assert state.get_jobs() == []

    world.create_job("nightly-1", {"cronjob": "nightly"}, owner(uid=world.cron_job.uid, name="nightly"))

    assert names(state.get_jobs()) == ["nightly-1"]


def test_state_refuses_a_target_of_another_kind(cronjob_manager: ModuleType, world: World) -> None:
    job = world.job_kind(metadata=ObjectMeta(name="j", namespace=NAMESPACE))

    with pytest.raises(
        TypeError, match="reads the states of a controller-kit-demo/v1/CronJob, not of a batch/v1/Job"
    ):
        cronjob_manager.CronJobControllerManagerState(world.store, job, world.registry)


def test_impl_protocol_methods_carry_the_dsl_comments_as_docstrings(cronjob_manager: ModuleType) -> None:
    impl = cronjob_manager.CronJobControllerManagerImpl

    assert (
        inspect.getdoc(impl.list_active_jobs_and_update_status)
        == "List all active jobs, and update the status."
    )
    assert inspect.getdoc(impl.run_next_scheduled_job) == (
        "Run the next job if it's on time, or otherwise we should wait\nuntil the next scheduled time."
    )
    assert "declares all the actions needed by the CronJobController" in (inspect.getdoc(impl) or "")


def test_header_says_the_module_is_generated_and_from_which_file() -> None:
    source = generate(parse_file(FIXTURE), "cronjob.ctrlkit")

    assert (
        source.splitlines()[0]
        == "# Code generated by capa_py.ctrlkit.codegen from cronjob.ctrlkit. DO NOT EDIT."
    )


# -- state fetch failures --------------------------------------------------------------------------------

CONFIG_DOCUMENT = """\
bind v1 k8s.io/api/core/v1
bind controller-kit-demo/v1 controller-kit-demo/api/v1
alias CronJob controller-kit-demo/v1/CronJob
alias ConfigMap v1/ConfigMap

decl CronJobConfig for CronJob {
    state {
        config ConfigMap {
            name=${target.Name}-config
            owned
        }
    }
    action {
        // Apply the configuration.
        ApplyConfig(config)
    }
}
"""


class ConfigImpl:
    def __init__(self) -> None:
        self.received: list[KubeObject | None] = []

    def apply_config(self, ctx: Context, config: KubeObject | None) -> Result | None:
        self.received.append(config)
        return None


@pytest.fixture
def config_world(world: World, tmp_path: Path) -> tuple[ModuleType, type[KubeObject]]:
    module = load_module(
        tmp_path / "config_manager.py", generate(parse(CONFIG_DOCUMENT, "config.ctrlkit"), "c")
    )
    return module, world.registry.define("v1", "ConfigMap")


def test_state_fetch_error_requeues_with_the_error_without_calling_impl_or_hooks(
    world: World, config_world: tuple[ModuleType, type[KubeObject]]
) -> None:
    module, config_map = config_world
    world.store.create(config_map(metadata=ObjectMeta(name="nightly-config", namespace=NAMESPACE)))
    impl = ConfigImpl()
    log: HookLog = []
    manager = module.CronJobConfig(
        module.CronJobConfigState(world.store, world.cron_job, world.registry),
        impl,
        [RecordingHook(log, "hook")],
    )

    result = manager.apply_config().run()

    assert isinstance(result.error, NotOwned)
    assert (impl.received, log) == ([], [])


def test_single_object_state_is_none_when_absent_and_the_object_when_owned(
    world: World, config_world: tuple[ModuleType, type[KubeObject]]
) -> None:
    module, config_map = config_world
    impl = ConfigImpl()
    manager = module.CronJobConfig(
        module.CronJobConfigState(world.store, world.cron_job, world.registry), impl
    )
    assert manager.apply_config().run() == Result()

    meta = ObjectMeta(
        name="nightly-config", namespace=NAMESPACE, owner_references=[world.cron_job.owner_reference()]
    )
    world.store.create(config_map(metadata=meta))
    manager.apply_config().run()

    assert [None if obj is None else obj.name for obj in impl.received] == [None, "nightly-config"]


def test_kind_that_the_registry_does_not_know_is_a_requeue_error(
    world: World, config_world: tuple[ModuleType, type[KubeObject]]
) -> None:
    module, _ = config_world
    manager = module.CronJobConfig(
        module.CronJobConfigState(world.store, world.cron_job, KindRegistry()), ConfigImpl()
    )

    result = manager.apply_config().run()

    assert result.error is not None
    assert "unknown kind v1/ConfigMap" in str(result.error)


# -- kinds from importable Python packages ---------------------------------------------------------------

CLUSTER_DOCUMENT = """\
bind cluster.x-k8s.io/v1beta1 capa_py.api.cluster
alias Cluster cluster.x-k8s.io/v1beta1/Cluster
alias Machine cluster.x-k8s.io/v1beta1/Machine

decl ClusterMachines for Cluster {
    state {
        machines []Machine {
            labels/cluster.x-k8s.io/cluster-name=${target.Name}
        }
    }
    action {
        Count(machines)
    }
}
"""


def test_kind_of_an_importable_package_is_imported_not_looked_up(tmp_path: Path) -> None:
    source = generate(parse(CLUSTER_DOCUMENT, "cluster.ctrlkit"), "cluster.ctrlkit")
    module = load_module(tmp_path / "cluster_machines.py", source)

    assert "from capa_py.api.cluster import Cluster, Machine" in source
    assert "for_gvk" not in source
    from capa_py.api.cluster import Cluster, Machine

    with SQLiteStore(tmp_path / "state.db", registry=default_registry()) as store:
        cluster = store.create(Cluster(metadata=ObjectMeta(name="c1", namespace=NAMESPACE)))
        store.create(
            Machine.model_validate(
                {
                    "metadata": {
                        "name": "m1",
                        "namespace": NAMESPACE,
                        "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
                    },
                    "spec": {"clusterName": "c1", "infrastructureRef": {"kind": "AWSMachine", "name": "m1"}},
                }
            )
        )
        machines = module.ClusterMachinesState(store, cluster).get_machines()

    assert [(type(m), m.name) for m in machines] == [(Machine, "m1")]


def test_python_package_without_the_kind_class_is_an_error_at_the_alias() -> None:
    document = parse("bind v1 capa_py.api.core\nalias Pod v1/Pod\n" + "decl M for Pod {\n}\n", "x")

    with pytest.raises(DSLError) as caught:
        generate(document, "x")

    assert str(caught.value) == (
        "x:2:1: expected Python package 'capa_py.api.core' (bound to v1) to define the KubeObject class "
        "'Pod', found no such name"
    )


# -- names that cannot become Python ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            "    action {\n        RunJob()\n        Run_Job()\n    }\n",
            "x:6:9: expected action names distinct in snake_case, found 'Run_Job' and 'RunJob' "
            "(both 'run_job')",
            id="snake-case-collision",
        ),
        pytest.param(
            "    state {\n        ctx Thing {\n        }\n    }\n",
            "x:5:9: expected a state name usable as a Python parameter, found 'ctx' (it becomes 'ctx')",
            id="state-named-ctx",
        ),
        pytest.param(
            "    action {\n        BeforeAction()\n    }\n",
            "x:5:9: expected an action name usable as a Python method, found 'BeforeAction' "
            "(it becomes 'before_action')",
            id="action-shadowing-a-hook",
        ),
    ],
)
def test_names_that_cannot_become_python_are_errors_at_the_declaration(body: str, expected: str) -> None:
    document = parse(
        "bind v1 k8s.io/api/core/v1\nalias Thing v1/Thing\ndecl M for Thing {\n" + body + "}\n", "x"
    )

    with pytest.raises(DSLError) as caught:
        generate(document, "x")

    assert str(caught.value) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ListActiveJobsAndUpdateStatus", "list_active_jobs_and_update_status"),
        ("UpdateAWSCluster", "update_aws_cluster"),
        ("jobs", "jobs"),
        ("bootstrapConfig", "bootstrap_config"),
    ],
)
def test_snake_case_of_dsl_names(name: str, expected: str) -> None:
    assert snake_case(name) == expected


# -- lint and type checks of the output ------------------------------------------------------------------


def test_generated_module_passes_ruff_with_the_project_settings(tmp_path: Path) -> None:
    pytest.importorskip("ruff")
    for name, document in (("cronjob", parse_file(FIXTURE)), ("cluster", parse(CLUSTER_DOCUMENT, "c"))):
        (tmp_path / f"{name}_manager.py").write_text(generate(document, f"{name}.ctrlkit"), encoding="utf-8")

    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--config",
            str(PROJECT_ROOT / "pyproject.toml"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr


USER_CODE = """\
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit import Context, Result
from capa_py.store import SQLiteStore

from cronjob_manager import CronJobControllerManager, CronJobControllerManagerState


class Impl:
    def list_active_jobs_and_update_status(self, ctx: Context, jobs: list[KubeObject]) -> Result | None:
        return None

    def clean_up_old_jobs_exceeds_history_limits(self, ctx: Context, jobs: list[KubeObject]) -> Result | None:
        return None

    def run_next_scheduled_job(self, ctx: Context) -> Result | None:
        return None

    def update_cron_job_status(self, ctx: Context) -> Result | None:
        return None


def build(store: SQLiteStore, target: KubeObject) -> CronJobControllerManager:
    return CronJobControllerManager(CronJobControllerManagerState(store, target), Impl())
"""


@pytest.mark.slow
def test_generated_module_and_an_implementation_pass_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "cronjob_manager.py").write_text(
        generate(parse_file(FIXTURE), "cronjob.ctrlkit"), encoding="utf-8"
    )
    (tmp_path / "cluster_manager.py").write_text(
        generate(parse(CLUSTER_DOCUMENT, "c"), "cluster.ctrlkit"), encoding="utf-8"
    )
    (tmp_path / "user.py").write_text(USER_CODE, encoding="utf-8")

    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(PROJECT_ROOT / "pyproject.toml"),
            "--follow-imports",
            "silent",
            str(tmp_path / "cronjob_manager.py"),
            str(tmp_path / "cluster_manager.py"),
            str(tmp_path / "user.py"),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=PROJECT_ROOT,
    )

    assert checked.returncode == 0, checked.stdout + checked.stderr


# -- the gen command -------------------------------------------------------------------------------------


def test_gen_command_writes_the_generated_module(tmp_path: Path) -> None:
    output = tmp_path / "cronjob_manager.py"

    result = CliRunner().invoke(app, ["gen", str(FIXTURE), "-o", str(output)])

    assert result.exit_code == 0, result.output
    assert output.read_text(encoding="utf-8") == generate(parse_file(FIXTURE), "cronjob.ctrlkit")


def test_gen_command_prints_to_stdout_without_an_output_file() -> None:
    result = CliRunner().invoke(app, ["gen", str(FIXTURE)])

    assert result.exit_code == 0, result.output
    assert result.stdout == generate(parse_file(FIXTURE), "cronjob.ctrlkit")


def test_gen_command_reports_a_dsl_error_with_its_position_and_exits_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.ctrlkit"
    broken.write_text("bind batch/v1 k8s.io/api/batch/v1\nalias Job batch/v1/Job\ndecl M for Jb {\n}\n")
    output = tmp_path / "out.py"

    result = CliRunner().invoke(app, ["gen", str(broken), "-o", str(output)])

    assert result.exit_code == 2
    assert result.stderr == f"{broken}:3:12: expected the kind of decl 'M' to be an alias (Job), found 'Jb'\n"
    assert not output.exists()


def test_gen_command_reports_a_missing_file_and_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["gen", str(tmp_path / "missing.ctrlkit")])

    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: cannot read {tmp_path / 'missing.ctrlkit'}")
