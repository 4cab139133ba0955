"""``capa controller`` as a real process: converging the example against a moto server, metrics and probes
over HTTP, SIGTERM, and leader election between two processes on one SQLite file."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from capa_py.api import AWSCluster, Machine
from capa_py.api.coordination import Lease
from capa_py.runtime.leader import STORE_LEASE_NAME, STORE_LEASE_NAMESPACE
from capa_py.store import NotFound, SQLiteStore
from tests.e2e.e2e_support import CRASHING_CAPA, EXAMPLE, Capa, MotoInspector, capa_env, wait_for
from tests.harness.moto_server import MotoServer

pytestmark = pytest.mark.slow

SAFETY_TIMEOUT = 60.0
"""Only turns a hang into a failure; nothing waits for it on a healthy machine."""
CONVERGE_TIMEOUT = 120.0
SHORT_LEASE = [
    "--leader-elect",
    "--leader-elect-lease-duration",
    "3s",
    "--leader-elect-renew-deadline",
    "2s",
    "--leader-elect-retry-period",
    "0.5s",
]


class ControllerProcess:
    """One ``capa --state STATE controller …`` subprocess; its stdout lines are collected as they come."""

    def __init__(
        self, state: Path, endpoint: str | None, *args: str, faults: Mapping[str, str] | None = None
    ) -> None:
        """``endpoint``: the ``--aws-endpoint`` to give (None: none at all)."""
        self.state = state
        self.stderr_path = state.parent / f"controller-{len(list(state.parent.glob('controller-*')))}.err"
        program = [*CRASHING_CAPA] if faults else ["-m", "capa_app.cli"]
        argv = [
            sys.executable,
            *program,
            "--state",
            str(state),
            "controller",
            *(["--aws-endpoint", endpoint] if endpoint is not None else []),
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--health-probe-bind-address",
            "127.0.0.1:0",
            *args,
        ]
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            env=capa_env(state.parent / "home", faults),
            cwd=state.parent,
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def line(self, prefix: str, timeout: float = SAFETY_TIMEOUT) -> str:
        """The first stdout line starting with ``prefix`` (waiting for it)."""

        def found() -> str | None:
            return next((line for line in self.lines if line.startswith(prefix)), None)

        with self._cond:
            self._cond.wait_for(lambda: found() is not None or self.proc.poll() is not None, timeout)
            line = found()
        assert line is not None, f"no line starting with {prefix!r}\n{self}"
        return line

    def has_line(self, prefix: str) -> bool:
        with self._cond:
            return any(line.startswith(prefix) for line in self.lines)

    @property
    def metrics_url(self) -> str:
        return self.line("metrics: ").split()[1]

    @property
    def probe_base(self) -> str:
        return self.line("health probes: ").split()[2].rsplit("/", 1)[0]

    def metric(self, metric: str, /, **labels: str) -> float | None:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == metric and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return None

    def wait(self, timeout: float = SAFETY_TIMEOUT) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    def stderr(self) -> str:
        if not self._stderr.closed:  # after close() the file holds everything written
            self._stderr.flush()
        return self.stderr_path.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(SAFETY_TIMEOUT)
        self._reader.join(SAFETY_TIMEOUT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()

    def __str__(self) -> str:
        return (
            f"exit {self.proc.poll()}\n--- stdout ---\n"
            + "\n".join(self.lines)
            + f"\n--- stderr ---\n{self.stderr()[-4000:]}"
        )


@pytest.fixture
def processes() -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for process in started:
        process.close()


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def lease_holder(state: Path) -> str | None:
    with SQLiteStore(state) as store:
        try:
            return store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE).holder
        except NotFound:
            return None


def inventory_total(endpoint: str) -> int:
    inspector = MotoInspector(endpoint)
    try:
        return sum(inspector.inventory().counts("tagged").values())
    finally:
        inspector.close()


def test_controller_converges_applied_objects_serves_metrics_tears_down_and_stops_on_sigterm(
    tmp_path: Path, cli_moto: MotoServer, processes: list[ControllerProcess]
) -> None:
    cli_moto.reset()
    state = tmp_path / "state.db"
    capa = Capa(state=state, endpoint=cli_moto.url)
    # The first two CreateVpc calls are throttled: the call is retried, and the metrics say so.
    throttled = {"CAPA_TEST_FAIL_OP": "CreateVpc:RequestLimitExceeded:2"}
    controller = ControllerProcess(state, cli_moto.url, faults=throttled)
    processes.append(controller)
    controller.line("controllers running: ")
    # Stored while the controller runs, one object after another, as kubectl or a GitOps tool would.
    capa.ok("apply", "-f", str(EXAMPLE), "--no-wait")

    def converged() -> bool:
        with SQLiteStore(state) as store:
            clusters = store.list(AWSCluster)
            machines = store.list(Machine)
        return (
            len(clusters) == 1
            and clusters[0].status.ready
            and len(machines) == 3
            and all(m.status.phase in ("Provisioned", "Running") for m in machines)
        )

    assert wait_for(converged, timeout=CONVERGE_TIMEOUT), f"the example did not converge\n{controller}"
    assert http_status(f"{controller.probe_base}/readyz") == 200
    assert http_status(f"{controller.probe_base}/healthz") == 200
    assert (
        controller.metric("controller_runtime_reconcile_total", controller="awscluster", result="success")
        or 0
    ) >= 1
    created_vpcs = controller.metric(
        "aws_api_requests_total",
        controller="awscluster",
        service="ec2",
        operation="CreateVpc",
        status_code="200",
    )
    assert created_vpcs == 1, "one VPC created, counted under the AWSCluster controller"
    throttles = controller.metric(
        "aws_api_requests_total",
        controller="awscluster",
        operation="CreateVpc",
        status_code="503",
        error_code="RequestLimitExceeded",
    )
    assert throttles == 2
    vpc_retries = {"controller": "awscluster", "service": "ec2", "operation": "CreateVpc"}
    assert controller.metric("aws_api_call_retries_count", **vpc_retries) == 1, "one call…"
    assert controller.metric("aws_api_call_retries_sum", **vpc_retries) == 2, "…retried twice"
    assert (controller.metric("workqueue_adds_total", name="awsmachine") or 0) >= 3
    assert (
        controller.metric(
            "aws_api_request_duration_seconds_count", controller="awsmachine", operation="RunInstances"
        )
        == 3
    )

    # Deleting is reconciled too: the objects go once their AWS resources are gone.
    capa.ok("delete", "-f", str(EXAMPLE))

    def gone() -> bool:
        with SQLiteStore(state) as store:
            return not store.list(AWSCluster) and not store.list(Machine)

    assert wait_for(gone, timeout=CONVERGE_TIMEOUT), f"the example was not torn down\n{controller}"
    assert inventory_total(cli_moto.url) == 0, "every tagged AWS resource is gone"

    controller.proc.send_signal(signal.SIGTERM)
    assert controller.wait() == 0, f"SIGTERM must end the process cleanly\n{controller}"
    assert controller.lines[-1] == "stopped"


def test_sigterm_releases_the_lease_of_a_leader(
    tmp_path: Path, closed_endpoint: str, processes: list[ControllerProcess]
) -> None:
    state = tmp_path / "state.db"
    leader = ControllerProcess(state, closed_endpoint, *SHORT_LEASE)
    processes.append(leader)
    leader.line("leading: ")
    assert f"pid {leader.proc.pid} " in (lease_holder(state) or "")
    assert leader.metric("leader_election_master_status", name=STORE_LEASE_NAME) == 1
    leader.proc.send_signal(signal.SIGTERM)
    assert leader.wait() == 0, str(leader)
    assert lease_holder(state) == "", "a clean exit releases the lease"


def test_two_processes_one_leads_and_the_other_takes_over_after_sigkill(
    tmp_path: Path, closed_endpoint: str, processes: list[ControllerProcess]
) -> None:
    state = tmp_path / "state.db"
    first = ControllerProcess(state, closed_endpoint, *SHORT_LEASE)
    processes.append(first)
    first.line("leading: ")
    first.line("controllers running: ")

    second = ControllerProcess(state, closed_endpoint, *SHORT_LEASE)
    processes.append(second)
    second.line("waiting for the store lease ")
    readyz = f"{second.probe_base}/readyz"
    assert wait_for(lambda: http_status(readyz) == 200, SAFETY_TIMEOUT), (
        "a waiting candidate syncs its caches"
    )
    assert second.metric("leader_election_master_status", name=STORE_LEASE_NAME) == 0
    assert not second.has_line("controllers running"), "a candidate does not reconcile"

    first.proc.send_signal(signal.SIGKILL)
    first.wait()
    second.line("leading: ")
    second.line("controllers running: ")
    assert f"pid {second.proc.pid} " in (lease_holder(state) or "")
    assert second.metric("leader_election_master_status", name=STORE_LEASE_NAME) == 1
    second.proc.send_signal(signal.SIGTERM)
    assert second.wait() == 0, str(second)


def test_a_leader_that_loses_the_lease_stops_and_exits_1(
    tmp_path: Path, closed_endpoint: str, processes: list[ControllerProcess]
) -> None:
    state = tmp_path / "state.db"
    leader = ControllerProcess(state, closed_endpoint, *SHORT_LEASE)
    processes.append(leader)
    leader.line("leading: ")
    # Someone else writes itself into the record (as after a partition): the next renewal sees it.
    with SQLiteStore(state) as store:
        lease = store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE)
        lease.spec.holder_identity = "someone else"
        store.update(lease)
    assert leader.wait() == 1, str(leader)
    assert "lost the store lease" in leader.stderr()
    assert lease_holder(state) == "someone else", "a process that lost the lease does not release it"


def test_invalid_flags_exit_2(tmp_path: Path, closed_endpoint: str) -> None:
    capa = Capa(state=tmp_path / "state.db")
    for args in (
        ["--core-controllers", "maybe"],
        ["--metrics-bind-address", "nowhere"],
        ["--sync-period", "soon"],
        ["--awsmachine-concurrency", "0"],
        ["--leader-elect", "--leader-elect-lease-duration", "2.5s"],
    ):
        result = capa.run("controller", "--aws-endpoint", closed_endpoint, *args, endpoint=False)
        assert result.returncode == 2, str(result)
    assert not (tmp_path / "state.db").exists(), "invalid input never creates the store"


def test_providers_flag_names_what_is_wrong(tmp_path: Path) -> None:
    capa = Capa(state=tmp_path / "state.db")
    for args, message in (
        (["--providers", "gcp"], "--providers: unknown provider 'gcp'; choose from aws, tinkerbell"),
        (["--providers", ","], "--providers: no provider named"),
        (["--providers", "aws", "--hegel-port", "5"], "--hegel-port needs the tinkerbell provider"),
        (["--providers", "aws", "--tink-server-port", "5"], "--tink-server-port needs the tinkerbell"),
    ):
        result = capa.run("controller", *args, endpoint=False)
        assert result.returncode == 2, str(result)
        assert message in result.stderr, str(result)
    assert not (tmp_path / "state.db").exists(), "invalid input never creates the store"


@pytest.mark.parametrize(
    ("providers", "running"),
    [
        (
            "tinkerbell",
            "cluster, machine, machinedeployment, machineset, workflow, tinkerbellcluster, tinkerbellmachine",
        ),
        (
            "aws",
            "cluster, machine, machinedeployment, machineset, machinepool, awscluster, awsmachine, "
            "awsmachinepool",
        ),
    ],
)
def test_providers_choose_the_controllers(
    tmp_path: Path, closed_endpoint: str, providers: str, running: str
) -> None:
    """Only the tinkerbell provider: no AWS endpoint or credentials are asked for."""
    endpoint = closed_endpoint if providers == "aws" else None
    process = ControllerProcess(tmp_path / "state.db", endpoint, "--providers", providers)
    try:
        assert process.line("controllers running: ") == f"controllers running: {running}"
        process.proc.send_signal(signal.SIGTERM)
        assert process.wait() == 0, str(process)
    finally:
        process.close()


def _store_clusters(state: Path, *specs: tuple[str, str, dict[str, str]]) -> None:
    from capa_py.api import Cluster

    with SQLiteStore(state) as store:
        for name, namespace, labels in specs:
            store.create(
                Cluster.model_validate({"metadata": {"name": name, "namespace": namespace, "labels": labels}})
            )


def _reconciled(state: Path, name: str, namespace: str) -> bool:
    """Whether the core Cluster controller has acted on the Cluster (its finalizer and a phase)."""
    from capa_py.api import Cluster

    with SQLiteStore(state) as store:
        cluster = store.get(Cluster, name, namespace)
    return bool(cluster.metadata.finalizers) and cluster.status.phase is not None


def test_namespace_and_watch_filter_scope_what_is_reconciled(
    tmp_path: Path, closed_endpoint: str, processes: list[ControllerProcess]
) -> None:
    state = tmp_path / "state.db"
    mine = {"cluster.x-k8s.io/watch-filter": "mine"}
    _store_clusters(
        state,
        ("in", "team-a", mine),
        ("unlabelled", "team-a", {}),
        ("other-namespace", "team-b", mine),
    )
    controller = ControllerProcess(state, closed_endpoint, "--namespace", "team-a", "--watch-filter", "mine")
    processes.append(controller)
    controller.line("controllers running: ")
    assert wait_for(lambda: _reconciled(state, "in", "team-a"), timeout=SAFETY_TIMEOUT), str(controller)
    # A Cluster stored now and reconciled shows the process has been at work all along; the ones out of
    # scope were never even seen.
    _store_clusters(state, ("later", "team-a", mine))
    assert wait_for(lambda: _reconciled(state, "later", "team-a"), timeout=SAFETY_TIMEOUT), str(controller)
    assert not _reconciled(state, "unlabelled", "team-a")
    assert not _reconciled(state, "other-namespace", "team-b")
    controller.proc.send_signal(signal.SIGTERM)
    assert controller.wait() == 0, str(controller)


def test_core_controllers_stay_off_when_cluster_api_core_owns_the_cluster_crd(
    tmp_path: Path, closed_endpoint: str, processes: list[ControllerProcess]
) -> None:
    from capa_py.api.apiextensions import CustomResourceDefinition

    state = tmp_path / "state.db"
    _store_clusters(state, ("demo", "default", {}))
    with SQLiteStore(state) as store:
        store.create(
            CustomResourceDefinition.model_validate(
                {
                    "metadata": {
                        "name": "clusters.cluster.x-k8s.io",
                        "labels": {"cluster.x-k8s.io/provider": "cluster-api"},
                    },
                    "spec": {
                        "group": "cluster.x-k8s.io",
                        "names": {"plural": "clusters", "kind": "Cluster"},
                        "versions": [{"name": "v1beta1", "served": True, "storage": True}],
                    },
                }
            )
        )
    controller = ControllerProcess(state, closed_endpoint)
    processes.append(controller)
    providers = "awscluster, awsmachine, awsmachinepool, workflow, tinkerbellcluster, tinkerbellmachine"
    assert controller.line("controllers running: ") == f"controllers running: {providers}"
    on = ControllerProcess(tmp_path / "other.db", closed_endpoint, "--core-controllers", "on")
    processes.append(on)
    assert (
        on.line("controllers running: ")
        == f"controllers running: cluster, machine, machinedeployment, machineset, machinepool, {providers}"
    )
    for process in (controller, on):
        process.proc.send_signal(signal.SIGTERM)
        assert process.wait() == 0, str(process)
    assert not _reconciled(state, "demo", "default")


def test_a_leader_elected_controller_waits_while_capa_apply_holds_the_lease(
    tmp_path: Path, closed_endpoint: str, processes: list[ControllerProcess]
) -> None:
    from capa_py.runtime.leader import LeaderElector, LeaseTiming, holder_identity

    state = tmp_path / "state.db"
    with SQLiteStore(state) as store:
        # What `capa apply --wait` does while its controllers run.
        apply = LeaderElector(store, holder_identity("capa apply"), timing=LeaseTiming.for_duration(3))
        apply.acquire(wait=False)
        apply.start_renewing()
        try:
            controller = ControllerProcess(state, closed_endpoint, *SHORT_LEASE)
            processes.append(controller)
            assert "held by capa apply pid" in controller.line("waiting for the store lease ")
            assert not controller.has_line("controllers running")
        finally:
            apply.release()
    controller.line("leading: ")
    controller.line("controllers running: ")
    controller.proc.send_signal(signal.SIGTERM)
    assert controller.wait() == 0, str(controller)
