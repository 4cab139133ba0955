"""The AWS cluster lifecycle end to end: management create, upgrade and delete, and a workload cluster's
create, upgrade and delete on it, over moto (HTTP), real API servers and the real controllers.

No control-plane provider comes with capa-py, so nothing brings up a cluster's API server once its machines
run: each cluster's API server is a ``capa serve`` subprocess started by the test, whose kubeconfig the
cluster file names (``spec.controlPlane.kubeconfigFile``), as a control-plane provider would write it. And
nothing runs Deployments on those servers: the controller Deployment that Install Management Components
applies to the management cluster is stood in for by the same controllers run in the test process, started
once the management create has finished: an :class:`~capa_py.workflow.clusters.InProcessHost` over the
management cluster's kubeconfig while workflows run against it, and ``controllers.run.converge`` where a
test needs to know that every object was reconciled after the pivot.

What is pinned: every task runs; the pivot makes no AWS call that changes anything, and the management
cluster's controllers adopt what the bootstrap cluster's made without changing anything either; a rolled
machine is replaced alone, new before old; a delete leaves nothing running in AWS; a workflow killed at a
task boundary resumes and launches nothing twice; and the CLI reports what the library did (exit codes,
JSON, the diagnostics bundle).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from capa_app.providers import AWSProvider, CoreComponents
from capa_app.rollout import CONFIG_NAME_LABEL
from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.clusterconfig import ClusterConfig
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.api.workloads import DaemonSet, Deployment
from capa_py.aws.accounting import PROCESS_COUNTER
from capa_py.store.kube import KubeStore
from capa_py.workflow import management, workload
from capa_py.workflow.cluster_files import ClusterFiles
from capa_py.workflow.clusters import ClusterAccess, InProcessHost
from capa_py.workflow.config import ClusterFile, load_cluster_file
from capa_py.workflow.hook import Binder, NoopHookRegistrar
from capa_py.workflow.runner import WorkflowResult, run_workflow
from capa_py.workflow.workflow import Workflow
from controllers import aws_controllers
from controllers.run import converge
from tests.cli.served import capa_serve
from tests.controllers.conftest import Harness
from tests.e2e.e2e_support import capa_env
from tests.support.programs import module_command, program_env

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
WORKFLOW_ID = "management-create-default-mgmt"
TIMEOUT = 120.0
"""How long one task may wait for controllers: far more than moto needs, short enough to fail a test."""
NS = "default"
ROLLED_ONE_MACHINE = {
    "ec2:RunInstances": 1,
    "ec2:TerminateInstances": 1,
    "secretsmanager:CreateSecret": 1,
    "secretsmanager:DeleteSecret": 1,
}
"""The mutating AWS calls of replacing one machine, and nothing else: its bootstrap data stored in a secret
before the new instance is launched and deleted once it runs, the old instance terminated."""


# -- cluster files and clusters ------------------------------------------------------------------------------
def cluster_file(directory: Path, name: str, kubeconfig: Path, edits: Sequence[tuple[str, str]] = ()) -> Path:
    """``examples/clusters/<name>.yaml`` written to ``directory``, its kubeconfigFile pointing at the
    stand-in API server's kubeconfig, its CNI manifest at the example's, each ``(old, new)`` edit applied."""
    text = (EXAMPLES / "clusters" / f"{name}.yaml").read_text(encoding="utf-8")
    replacements = [
        (f"kubeconfigFile: stand-in/{name}.kubeconfig", f"kubeconfigFile: {kubeconfig}"),
        ("cniManifest: ../cni/demo-cni.yaml", f"cniManifest: {EXAMPLES / 'cni' / 'demo-cni.yaml'}"),
        *edits,
    ]
    for old, new in replacements:
        assert old in text, f"examples/clusters/{name}.yaml no longer holds {old!r}"
        text = text.replace(old, new)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@contextmanager
def stand_in(home: Path) -> Iterator[Path]:
    """A ``capa serve`` standing in for a cluster's API server: its kubeconfig."""
    home.mkdir(parents=True, exist_ok=True)
    with capa_serve(home) as kubeconfig:
        yield kubeconfig


@contextmanager
def management_controllers(kubeconfig: Path, spec: ClusterFile, provider: AWSProvider) -> Iterator[None]:
    """The management cluster's controllers, as the controller Deployment would run them, in this process."""
    host = InProcessHost(kubeconfig)
    access = ClusterAccess(spec.name, kubeconfig, host=host)
    try:
        CoreComponents().install(access, spec)
        provider.install_components(access, spec)
        yield
    finally:
        host.stop()


def mutating_calls() -> dict[str, int]:
    """This process's mutating AWS calls so far, by operation."""
    return PROCESS_COUNTER.mutating_operations()


def calls_since(before: dict[str, int]) -> dict[str, int]:
    now = mutating_calls()
    return {op: n - before.get(op, 0) for op, n in now.items() if n != before.get(op, 0)}


def run(workflow: Workflow[Any], ctx: Any, workflow_id: str, state: Path) -> WorkflowResult:
    try:
        result = run_workflow(workflow, ctx, workflow_id=workflow_id, state_dir=state)
    finally:
        ctx.close()
    assert result.succeeded, f"{workflow.name} failed: {result.failure} (bundle {result.bundle})"
    assert list(result.ran) == workflow.task_names, (
        f"{workflow.name}: ran {result.ran}, skipped {result.skipped}"
    )
    return result


class PivotCalls(NoopHookRegistrar):
    """Snapshots the mutating AWS calls and the instance ids around Pivot to Management."""

    def __init__(self) -> None:
        self.before: dict[str, int] = {}
        self.during: dict[str, int] | None = None
        self.instance_ids: dict[str, str] = {}

    def bind_create_hooks(self, binder: Binder[Any]) -> None:
        binder.before(management.create.PIVOT_TO_MANAGEMENT, self.snapshot)
        binder.after(management.create.PIVOT_TO_MANAGEMENT, self.compare)

    def snapshot(self, ctx: management.CreateContext) -> None:
        """Runs before Pivot to Management, with the machines ready on the bootstrap cluster: records the
        call counts and each AWSMachine's instance id."""
        self.before = mutating_calls()
        with ctx.bootstrap().store() as store:
            self.instance_ids = {m.name: m.status.instance_id or "" for m in store.list(AWSMachine)}

    def compare(self, ctx: management.CreateContext) -> None:
        """Runs after Pivot to Management: records the mutating calls the pivot made."""
        self.during = calls_since(self.before)


# -- AWS, as moto has it -------------------------------------------------------------------------------------
def instances(harness: Harness) -> list[dict[str, Any]]:
    pages = harness.aws.ec2.pages("DescribeInstances", "Reservations")
    return [i for r in pages for i in r["Instances"]]


def running(harness: Harness) -> list[dict[str, Any]]:
    return [i for i in instances(harness) if i["State"]["Name"] not in ("terminated", "shutting-down")]


def tagged(item: dict[str, Any], cluster: str) -> bool:
    return any(
        t["Key"] == f"sigs.k8s.io/cluster-api-provider-aws/cluster/{cluster}" for t in item.get("Tags", [])
    )


def leftovers(harness: Harness) -> dict[str, list[str]]:
    """What a cluster leaves in AWS that a delete must remove (moto's default VPC aside)."""
    ec2 = harness.aws.ec2
    vpcs = [v["VpcId"] for v in ec2.call("DescribeVpcs")["Vpcs"] if not v.get("IsDefault")]
    nats = [
        n["NatGatewayId"]
        for n in ec2.call("DescribeNatGateways")["NatGateways"]
        if n["State"] not in ("deleted", "deleting")
    ]
    eips = [a["AllocationId"] for a in ec2.call("DescribeAddresses")["Addresses"]]
    lbs = [lb["LoadBalancerName"] for lb in harness.aws.elbv2.call("DescribeLoadBalancers")["LoadBalancers"]]
    return {
        "instances": [i["InstanceId"] for i in running(harness)],
        "vpcs": vpcs,
        "nat gateways": nats,
        "elastic ips": eips,
        "load balancers": lbs,
    }


# -- 1. management create ------------------------------------------------------------------------------------
def create_management(
    harness: Harness, state: Path, spec: ClusterFile, hooks: Sequence[NoopHookRegistrar] = ()
) -> tuple[AWSProvider, WorkflowResult]:
    provider = AWSProvider(lambda: (harness.pool, harness.engine))
    ctx = management.CreateContext(spec, provider, CoreComponents(), state, TIMEOUT)
    workflow = management.new_create_workflow(spec, provider, hooks=[ClusterFiles(state), *hooks])
    return provider, run(workflow, ctx, f"management-create-{spec.name}", state)


def test_management_create_pivots_and_the_management_controllers_adopt_without_aws_changes(
    harness: Harness, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with stand_in(tmp_path / "mgmt-api") as mgmt_kubeconfig:
        spec = load_cluster_file(cluster_file(tmp_path / "files", "mgmt", mgmt_kubeconfig))
        pivot = PivotCalls()
        _, result = create_management(harness, state, spec, hooks=[pivot])
        assert pivot.during == {}, f"the pivot changed AWS: {pivot.during}"
        assert sorted(pivot.instance_ids) == ["mgmt-cp-0", "mgmt-worker-0"]
        assert all(pivot.instance_ids.values()), pivot.instance_ids

        assert not (state / "bootstrap").exists(), "the bootstrap cluster's data outlived the create"
        assert (state / "clusters" / "mgmt" / "kubeconfig").is_file()
        assert (state / "clusters" / "mgmt" / "cluster.yaml").is_file()

        with KubeStore.from_kubeconfig(mgmt_kubeconfig) as store:
            assert store.get(Cluster, "mgmt", NS).spec.paused is not True, "the pivot left the cluster paused"
            store.get(AWSCluster, "mgmt", NS)
            for name in ("mgmt-cp-0", "mgmt-worker-0"):
                store.get(Machine, name, NS)
                assert store.get(AWSMachine, name, NS).status.instance_id == pivot.instance_ids[name]
            for secret in ("mgmt-bootstrap", "mgmt-kubeconfig"):
                store.get(Secret, secret, NS)
            store.get(ClusterConfig, "mgmt", NS)
            assert [d.name for d in store.list(DaemonSet, namespace="kube-system")] == ["demo-net"]
            deployments = store.list(Deployment)
            args = [
                arg
                for d in deployments
                for c in d.spec["template"]["spec"]["containers"]
                for arg in c.get("args", [])
            ]
            assert "--providers=aws" in args, f"no controller Deployment for aws: {args}"

            # The management cluster's controllers (the Deployment's stand-in) take the objects over as
            # they are: every one reconciled, nothing in AWS changed, the same instances.
            targets: list[KubeObject] = [
                *store.list(Cluster, namespace=NS),
                *store.list(AWSCluster, namespace=NS),
                *store.list(Machine, namespace=NS),
                *store.list(AWSMachine, namespace=NS),
            ]
            assert len(targets) == 6, [t.ref() for t in targets]
            adopted = converge(
                store, aws_controllers(store, harness.pool, harness.engine), targets, timeout=TIMEOUT
            )
            assert adopted.converged, (
                f"the management cluster's controllers did not converge: {adopted.states}"
            )
            assert {f"{k.kind}/{k.name}" for k in adopted.reconciled_keys} >= {
                f"{t.KIND}/{t.name}" for t in targets
            }, "an object was not reconciled after the pivot"
            assert adopted.calls.total(mutating=True) == 0, adopted.calls.mutating_operations()
            assert {m.name: m.status.instance_id for m in store.list(AWSMachine)} == pivot.instance_ids
    assert len(instances(harness)) == 2
    assert len(running(harness)) == 2
    assert "Install Networking" in result.ran


# -- 2. workload create, upgrade, delete; management upgrade, delete -----------------------------------------
def machine_history(store: KubeStore, since: str) -> list[tuple[str, bool, str | None]]:
    """Every Machine change after ``since``, in order: (name, being deleted, phase)."""
    return [
        (e.object.name, e.object.being_deleted, e.object.status.phase)
        for e in store.watch(Machine, resource_version=since, timeout=0.5)
    ]


def assert_new_before_old(history: list[tuple[str, bool, str | None]], new: str, old: str) -> None:
    ready_at = next(
        (i for i, (n, _, phase) in enumerate(history) if n == new and phase == "Provisioned"), None
    )
    deleting_at = next((i for i, (n, deleting, _) in enumerate(history) if n == old and deleting), None)
    assert ready_at is not None, f"{new} never Provisioned: {history}"
    assert deleting_at is not None, f"{old} never deleted: {history}"
    assert ready_at < deleting_at, f"{old} was deleted before {new} was Provisioned: {history}"


class BootstrapRollout(NoopHookRegistrar):
    """Records the Machine changes Upgrade Cluster makes on the bootstrap cluster of a management upgrade."""

    def __init__(self) -> None:
        self.since = ""
        self.history: list[tuple[str, bool, str | None]] = []

    def bind_upgrade_hooks(self, binder: Binder[Any]) -> None:
        binder.before(management.upgrade.UPGRADE_CLUSTER, self.start)
        binder.after(management.upgrade.UPGRADE_CLUSTER, self.record)

    def start(self, ctx: management.UpgradeContext) -> None:
        """Runs before Upgrade Cluster, with the cluster on the bootstrap cluster: notes where its history
        starts."""
        with ctx.bootstrap().store() as store:
            self.since = store.current_resource_version()

    def record(self, ctx: management.UpgradeContext) -> None:
        """Runs after Upgrade Cluster, before the pivot back: reads the Machine changes it made."""
        with ctx.bootstrap().store() as store:
            self.history = machine_history(store, self.since)


def assert_replaced_alone(
    store: KubeStore, since: str, calls: dict[str, int], cluster: str, rolled: str, kept: dict[str, str]
) -> str:
    """``rolled`` was replaced by one new machine, Provisioned before the old one was marked for deletion,
    with one instance launched and one terminated; the machines of ``kept`` keep their instances. The new
    machine's name."""
    assert calls == ROLLED_ONE_MACHINE, f"rolling {rolled} changed more than one instance in AWS: {calls}"
    machines = store.list(Machine, namespace=NS, label_selector=f"cluster.x-k8s.io/cluster-name={cluster}")
    new = [m.name for m in machines if m.metadata.labels.get(CONFIG_NAME_LABEL) == rolled]
    assert len(new) == 1, f"not one replacement of {rolled}: {[m.name for m in machines]}"
    assert new[0].startswith(f"{rolled}-"), new
    assert_new_before_old(machine_history(store, since), new[0], rolled)
    ids = {m.name: m.status.instance_id for m in store.list(AWSMachine, namespace=NS)}
    assert {n: ids.get(n) for n in kept} == kept, "a machine that did not change lost its instance"
    return new[0]


def test_workload_and_management_lifecycle_rolls_one_machine_and_deletes_everything(
    harness: Harness, tmp_path: Path
) -> None:
    state, files = tmp_path / "state", tmp_path / "files"
    with stand_in(tmp_path / "mgmt-api") as mgmt_api, stand_in(tmp_path / "work-api") as work_api:
        mgmt_spec = load_cluster_file(cluster_file(files, "mgmt", mgmt_api))
        provider, _ = create_management(harness, state, mgmt_spec)
        mgmt_kubeconfig = state / "clusters" / "mgmt" / "kubeconfig"
        mgmt = ClusterAccess("mgmt", mgmt_kubeconfig)
        core = CoreComponents()
        with management_controllers(mgmt_kubeconfig, mgmt_spec, provider), mgmt.store() as store:
            # Workload create.
            work_spec = load_cluster_file(cluster_file(files, "work", work_api))
            ctx: Any = workload.CreateContext(work_spec, provider, core, mgmt, state, TIMEOUT)
            run(
                workload.new_create_workflow(work_spec, provider, hooks=[ClusterFiles(state)]),
                ctx,
                "wc",
                state,
            )
            work_ids = {
                m.name: m.status.instance_id or ""
                for m in store.list(AWSMachine, namespace=NS)
                if m.name.startswith("work-")
            }
            assert sorted(work_ids) == ["work-cp-0", "work-worker-0"], work_ids
            assert all(work_ids.values()), work_ids
            with KubeStore.from_kubeconfig(work_api) as work_store:
                assert [d.name for d in work_store.list(DaemonSet, namespace="kube-system")] == ["demo-net"]
                assert work_store.get(ClusterConfig, "work", NS).spec.provider == "aws"
            assert (state / "clusters" / "work" / "cluster.yaml").is_file()

            # Workload upgrade: one worker's instance type changes.
            work_spec = load_cluster_file(
                cluster_file(
                    files, "work", work_api, [("instanceType: t3.medium", "instanceType: t3.xlarge")]
                )
            )
            since, before = store.current_resource_version(), mutating_calls()
            ctx = workload.UpgradeContext(work_spec, provider, core, mgmt, state, TIMEOUT)
            run(workload.new_upgrade_workflow(work_spec, provider), ctx, "wu", state)
            new = assert_replaced_alone(
                store,
                since,
                calls_since(before),
                "work",
                "work-worker-0",
                {"work-cp-0": work_ids["work-cp-0"]},
            )
            types = {i["InstanceId"]: i["InstanceType"] for i in running(harness)}
            assert types[store.get(AWSMachine, new, NS).status.instance_id or ""] == "t3.xlarge"

            # Workload delete.
            assert len([i for i in running(harness) if tagged(i, "work")]) == 2, "instances not tagged"
            ctx = workload.DeleteContext(work_spec, provider, core, mgmt, state, TIMEOUT)
            run(
                workload.new_delete_workflow(work_spec, provider, hooks=[ClusterFiles(state)]),
                ctx,
                "wd",
                state,
            )
            assert [i["InstanceId"] for i in running(harness) if tagged(i, "work")] == []
            assert [m.name for m in store.list(Machine, namespace=NS) if m.name.startswith("work")] == []
            assert not (state / "clusters" / "work").exists()

            # Management upgrade: the worker rolled from a bootstrap cluster, then pivoted back.
            mgmt_ids = {m.name: m.status.instance_id or "" for m in store.list(AWSMachine, namespace=NS)}
            mgmt_spec = load_cluster_file(
                cluster_file(
                    files, "mgmt", mgmt_api, [("instanceType: t3.medium", "instanceType: t3.xlarge")]
                )
            )
            since, before = store.current_resource_version(), mutating_calls()
            ctx = management.UpgradeContext(mgmt_spec, provider, core, state, TIMEOUT)
            rollout = BootstrapRollout()
            run(management.new_upgrade_workflow(mgmt_spec, provider, hooks=[rollout]), ctx, "mu", state)
            assert not (state / "bootstrap").exists()
            calls = calls_since(before)
            assert calls == ROLLED_ONE_MACHINE, f"the management upgrade changed more in AWS: {calls}"
            after = {m.name: m.status.instance_id for m in store.list(AWSMachine, namespace=NS)}
            assert after.pop("mgmt-cp-0") == mgmt_ids["mgmt-cp-0"], "the control plane machine was replaced"
            assert len(after) == 1, after
            new = next(iter(after))
            assert new.startswith("mgmt-worker-0-"), after
            assert_new_before_old(rollout.history, new, "mgmt-worker-0")
            types = {i["InstanceId"]: i["InstanceType"] for i in running(harness)}
            assert types[after[new] or ""] == "t3.xlarge"
            assert store.get(Cluster, "mgmt", NS).spec.paused is not True

            # Management delete.
            present = leftovers(harness)
            assert all(present.values()), (
                f"the management cluster lacks a resource the delete must remove: {present}"
            )
            ctx = management.DeleteContext(mgmt_spec, provider, core, state, TIMEOUT)
            run(
                management.new_delete_workflow(mgmt_spec, provider, hooks=[ClusterFiles(state)]),
                ctx,
                "md",
                state,
            )
    left = {kind: found for kind, found in leftovers(harness).items() if found}
    assert left == {}, f"the management delete left something in AWS: {left}"
    assert not (state / "clusters" / "mgmt").exists(), "Post Delete did not remove the cluster's files"
    assert not (state / "bootstrap").exists()


# -- 3. resume after a kill ----------------------------------------------------------------------------------
@pytest.mark.slow(minutes=2)
@pytest.mark.parametrize(
    ("killed_after", "when"),
    [
        # Checkpointed: the resumed run starts the bootstrap cluster's components again from what the
        # checkpoint records, or Create Management Cluster would wait for controllers that do not run.
        ("Install Bootstrap Components", "checkpointed"),
        # From a hook after the task: its work is done but not recorded, so the resumed run repeats it.
        ("Create Management Cluster", "hook"),
        ("Pivot to Management", "hook"),
    ],
)
def test_management_create_killed_after_a_task_resumes_and_launches_nothing_twice(
    harness: Harness, tmp_path: Path, killed_after: str, when: str
) -> None:
    state = tmp_path / "state"
    with stand_in(tmp_path / "mgmt-api") as mgmt_api:
        path = cluster_file(tmp_path / "files", "mgmt", mgmt_api)
        killed = subprocess.run(
            module_command(
                "tests.workflow.lifecycle_kill_program",
                str(state),
                str(path),
                harness.server.url,
                killed_after,
                when,
            ),
            env=program_env(),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert killed.returncode == -signal.SIGKILL, f"not killed: {killed.stdout}{killed.stderr[-3000:]}"
        spec = load_cluster_file(path)
        provider = AWSProvider(lambda: (harness.pool, harness.engine))
        workflow = management.new_create_workflow(spec, provider, hooks=[ClusterFiles(state)])
        names = workflow.task_names
        checkpoint = json.loads((state / "workflows" / f"{WORKFLOW_ID}.json").read_text())
        resumed_at = names.index(killed_after) + (1 if when == "checkpointed" else 0)
        assert checkpoint["completed"] == resumed_at, checkpoint

        ctx = management.CreateContext(spec, provider, CoreComponents(), state, TIMEOUT)
        try:
            result = run_workflow(workflow, ctx, workflow_id=WORKFLOW_ID, state_dir=state)
        finally:
            ctx.close()
        assert result.succeeded, f"the resumed create failed: {result.failure}"
        assert list(result.skipped) == names[:resumed_at]
        assert list(result.ran) == names[resumed_at:]

        launched = instances(harness)
        assert len(launched) == 2, f"instances launched twice: {[i['InstanceId'] for i in launched]}"
        assert [i["State"]["Name"] for i in launched] == ["running", "running"]
        made = leftovers(harness)
        assert {k: len(v) for k, v in made.items()} == {
            "instances": 2,
            "vpcs": 1,
            "nat gateways": 1,
            "elastic ips": 1,
            "load balancers": 1,
        }, made
        assert not (state / "bootstrap").exists()
        with KubeStore.from_kubeconfig(mgmt_api) as store:
            ids = {m.name: m.status.instance_id or "" for m in store.list(AWSMachine, namespace=NS)}
        assert sorted(ids.values()) == sorted(i["InstanceId"] for i in launched)


# -- 4. the CLI ----------------------------------------------------------------------------------------------
def capa_cluster_create(
    tmp_path: Path, state: Path, path: Path, url: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    command = ["--state", str(state / "capa.db"), "cluster", "create", "-f", str(path), "--management"]
    return subprocess.run(
        [sys.executable, "-m", "capa_app.cli", *command, "--aws-endpoint", url, *extra],
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 2,
        check=False,
        env=capa_env(tmp_path / "home"),
        cwd=tmp_path,
    )


def test_cli_create_reports_every_task_done_as_json(harness: Harness, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with stand_in(tmp_path / "mgmt-api") as mgmt_api:
        path = cluster_file(tmp_path / "files", "mgmt", mgmt_api)
        done = capa_cluster_create(tmp_path, state, path, harness.server.url, "-o", "json")
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout)
        assert report["succeeded"] is True
        assert report["workflowId"] == WORKFLOW_ID
        states = {t["name"]: t["state"] for t in report["tasks"]}
        names = management.new_create_workflow(
            load_cluster_file(path), AWSProvider(lambda: (harness.pool, harness.engine))
        ).task_names
        assert list(states) == names
        assert set(states.values()) == {"done"}, states
        assert Path(report["kubeconfig"]) == state / "clusters" / "mgmt" / "kubeconfig"
    assert len(running(harness)) == 2


def test_cli_create_that_fails_exits_1_naming_the_task_and_the_bundle(
    harness: Harness, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with stand_in(tmp_path / "mgmt-api") as mgmt_api:
        path = cluster_file(tmp_path / "files", "mgmt", mgmt_api, [("id: ami-785db401", "id: ami-12345678")])
        failed = capa_cluster_create(
            tmp_path, state, path, harness.server.url, "--timeout", "60s", "-o", "json"
        )
        assert failed.returncode == 1, failed.stderr[-3000:]
        errors = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
        assert errors, failed.stderr[-3000:]
        assert errors[-1].startswith("error: management create failed at Create Management Cluster: "), errors
        # Both machines name the missing AMI; the wait ends on whichever fails first.
        assert re.search(r"AWSMachine default/mgmt-(cp|worker)-0: failed", errors[-1]), errors
        bundles = [
            line.removeprefix("diagnostics: ")
            for line in failed.stderr.splitlines()
            if line.startswith("diagnostics: ")
        ]
        assert len(bundles) == 1, failed.stderr[-3000:]
        bundle = Path(bundles[0])
        assert bundle.parent == state / "diagnostics"
        assert sorted(p.name for p in bundle.iterdir()) == [
            "aws-calls.json",
            "failure.json",
            "log.json",
            "store.json",
        ]
        failure = json.loads((bundle / "failure.json").read_text())
        assert failure["task"] == "Create Management Cluster", failure
        calls = json.loads((bundle / "aws-calls.json").read_text())
        assert calls["byOutcome"].get("InvalidAMIID.NotFound"), calls["byOutcome"]
        assert "ec2:RunInstances" not in calls["byOperation"], (
            "an instance was launched from an AMI that is not there"
        )
        assert "mgmt-cp-0" in (bundle / "store.json").read_text()

        report = json.loads(failed.stdout)
        assert report["succeeded"] is False
        assert report["failure"]["task"] == "Create Management Cluster"
        assert report["bundle"] == str(bundle)
        assert [t["state"] for t in report["tasks"]][:5] == ["done", "done", "done", "failed", "pending"]
        # The checkpoint a second run resumes from: the three tasks done, the failed one not.
        checkpoint = json.loads((state / "workflows" / f"{WORKFLOW_ID}.json").read_text())
        assert checkpoint["completed"] == 3, checkpoint

        # Running the command again resumes: the three tasks are not run again, the failed one is.
        again = capa_cluster_create(
            tmp_path, state, path, harness.server.url, "--timeout", "60s", "-o", "json"
        )
        assert again.returncode == 1, again.stderr[-3000:]
        states = [t["state"] for t in json.loads(again.stdout)["tasks"]]
        assert states[:5] == ["resumed", "resumed", "resumed", "failed", "pending"], states
