"""``capa tink server`` and ``capa controller --tink-server-port`` as real processes: an agent (the
generated client, with its Hardware's token) gets a workflow prepared in the store, one without credentials
is refused unless ``--allow-unauthenticated-agents``, SIGTERM stops the process, bad flags exit 2 naming
the flag, a taken port exits 1; and the same over ``capa serve`` with ``--kubeconfig``. ``capa tink
agent-credentials`` issues the tokens."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from capa_py.api.tinkerbell import Hardware
from capa_py.operations import apply_objects
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.queue import ObjectKey
from capa_py.store import SQLiteStore
from capa_py.store.kube import KubeStore
from capa_py.store.protocol import ObjectStore
from capa_py.tinkerbell.agentauth import issue_token
from capa_py.tinkerbell.proto import workflow_pb2 as pb
from capa_py.tinkerbell.proto import workflow_pb2_grpc as pb_grpc
from controllers.tinkerbell import WorkflowController
from tests.cli.cli_support import Cli
from tests.cli.served import served_process
from tests.cli.test_cli_kube_store import kubeconfig  # noqa: F401
from tests.cli.test_controller_cmd import SAFETY_TIMEOUT, ControllerProcess
from tests.e2e.e2e_support import capa_env
from tests.tinkerbell.server_world import bearer, hardware, template, workflow

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server_process(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``capa ARGS tink server --port 0`` and the address it serves."""
    with served_process(tmp_path, [*args, "tink", "server", "--port", "0"], "tink server: ") as started:
        assert started[1].startswith("127.0.0.1:"), started[1]
        yield started


def prepare(store: ObjectStore, namespace: str = "default", credentials: bool = True) -> str | None:
    """A Hardware, a Template and a Workflow ``wf`` for it, prepared by the workflow controller; returns
    the token issued for the Hardware's agent (None without ``credentials``)."""
    machine = hardware("hw1", "aa:bb:cc:dd:ee:01", namespace=namespace)
    tpl = template()
    tpl.metadata.namespace = namespace
    wf = workflow("wf", "hw1", namespace=namespace)
    wf.spec.template_ref.namespace = namespace
    apply_objects(store, [machine, tpl, wf])
    WorkflowController(store, EventRecorder(store)).reconcile(ObjectKey("Workflow", namespace, "wf"))
    if not credentials:
        return None
    return issue_token(store, store.get(Hardware, "hw1", namespace))[1]


def first_command(address: str, agent_id: str, token: str | None) -> pb.GetWorkflowsResponse:
    """The first command on a stream opened with ``token``; a token the server has not seen yet (its
    watches lag the write a moment) is retried, as an agent retries, while it is PERMISSION_DENIED."""
    deadline = time.monotonic() + SAFETY_TIMEOUT
    with grpc.insecure_channel(address) as channel:
        while True:
            stream = pb_grpc.WorkflowServiceStub(channel).GetWorkflows(
                pb.GetWorkflowsRequest(agent_id=agent_id), timeout=SAFETY_TIMEOUT, metadata=bearer(token)
            )
            try:
                command: pb.GetWorkflowsResponse = next(stream)
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.PERMISSION_DENIED or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            stream.cancel()
            return command


def test_capa_tink_server_dispatches_from_the_store_until_sigterm(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    with SQLiteStore(state) as store:
        token = prepare(store)
    with server_process(tmp_path, "--state", str(state)) as (proc, address):
        with pytest.raises(grpc.RpcError) as refused:
            first_command(address, "AA:BB:CC:DD:EE:01", None)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        command = first_command(address, "AA:BB:CC:DD:EE:01", token)
        assert command.start_workflow.workflow.workflow_id == "default/wf"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(SAFETY_TIMEOUT) == 0
        assert proc.stdout is not None
        assert proc.stdout.read().strip() == "stopped"
    with SQLiteStore(state) as store:
        assert store.get(type(workflow("wf", "hw1")), "wf", "default").status.state == "Scheduled"


def test_allow_unauthenticated_agents_serves_hardware_without_credentials(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    with SQLiteStore(state) as store:
        prepare(store, credentials=False)
    with server_process(tmp_path, "--state", str(state)) as (proc, address):
        with pytest.raises(grpc.RpcError) as refused:
            first_command(address, "hw1", None)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(SAFETY_TIMEOUT) == 0
    allowing = ("--state", str(state), "tink", "server", "--port", "0", "--allow-unauthenticated-agents")
    with served_process(tmp_path, list(allowing), "tink server: ") as (proc, address):
        assert first_command(address, "hw1", None).start_workflow.workflow.workflow_id == "default/wf"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(SAFETY_TIMEOUT) == 0


def test_capa_tink_server_serves_the_api_server_store(tmp_path: Path, kubeconfig: Path) -> None:  # noqa: F811
    with KubeStore.from_kubeconfig(kubeconfig) as store:
        token = prepare(store, namespace="tink-kube")
    with server_process(tmp_path, "--kubeconfig", str(kubeconfig)) as (proc, address):
        command = first_command(address, "hw1", token)
        assert command.start_workflow.workflow.workflow_id == "tink-kube/wf"
        assert [a.id for a in command.start_workflow.workflow.actions] == ["a", "b"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(SAFETY_TIMEOUT) == 0


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["tink", "server", "--port", "70000"], "--port must be between 0 and 65535"),
        (["tink", "server", "--bind", "not an address"], "--bind: 'not an address' is not an IP address"),
        (["controller", "--tink-server-bind", "-x"], "--tink-server-bind: '-x' is not an IP address"),
        (["tink", "server", "--rejection-backoff", "soon"], "--rejection-backoff: not a duration"),
        (["tink", "server", "--rejection-backoff", "0s"], "--rejection-backoff must be positive"),
        (
            ["tink", "server", "--rejection-backoff", "1m", "--rejection-backoff-max", "30s"],
            "--rejection-backoff-max must not be less than --rejection-backoff",
        ),
        (["tink", "server", "--tls-cert", "cert.pem"], "--tls-cert and --tls-key go together"),
        (["tink", "server", "--tls-client-ca", "ca.pem"], "--tls-client-ca needs --tls-cert and --tls-key"),
        (
            ["controller", "--tink-server-port", "1", "--tink-server-tls-client-ca", "ca.pem"],
            "--tink-server-tls-client-ca needs --tink-server-tls-cert and --tink-server-tls-key",
        ),
        (["controller", "--tink-server-port", "-1"], "--tink-server-port must be between 0 and 65535"),
        (
            ["controller", "--tink-server-rejection-backoff-max", "x"],
            "--tink-server-rejection-backoff-max: not a duration",
        ),
        (
            ["controller", "--tink-server-port", "1", "--tink-server-tls-key", "key.pem"],
            "--tink-server-tls-cert and --tink-server-tls-key go together",
        ),
    ],
)
def test_bad_server_flags_exit_2_naming_the_flag(cli: Cli, command: list[str], message: str) -> None:
    result = cli(*command)
    assert result.exit_code == 2, result
    assert message in result.stderr


def test_a_certificate_that_does_not_load_exits_2_naming_the_flag(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate")
    (tmp_path / "key.pem").write_text("not a key")
    result = cli(
        "tink", "server", "--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")
    )
    assert result.exit_code == 2, result
    assert "--tls-cert" in result.stderr
    assert "not a PEM certificate" in result.stderr


def test_a_taken_port_exits_1(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "capa_app.cli", "--state", str(tmp_path / "s.db"),
             "tink", "server", "--port", str(port)],
            capture_output=True,
            text=True,
            env=capa_env(tmp_path / "home"),
            timeout=SAFETY_TIMEOUT,
            check=False,
        )  # fmt: skip
    assert result.returncode == 1, result
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use" in result.stderr


def test_capa_controller_serves_the_workflow_service_and_its_metrics(
    tmp_path: Path, closed_endpoint: str
) -> None:
    state = tmp_path / "state.db"
    port = _free_port()
    controller = ControllerProcess(state, closed_endpoint, "--tink-server-port", str(port))
    try:
        assert controller.line("tink server: ") == f"tink server: 127.0.0.1:{port}"
        metrics_url = controller.line("metrics: ").split()[1]
        controller.line("controllers running: ")
        with SQLiteStore(state) as store:
            machine, tpl, wf = hardware("hw1", "aa:bb:cc:dd:ee:01"), template(), workflow("wf", "hw1")
            apply_objects(store, [machine, tpl, wf])
            token = issue_token(store, store.get(Hardware, "hw1", "default"))[1]
        # The controller in the process prepares the workflow; the server in the same process sends it.
        command = first_command(f"127.0.0.1:{port}", "hw1", token)
        assert command.start_workflow.workflow.workflow_id == "default/wf"
        with urllib.request.urlopen(metrics_url, timeout=SAFETY_TIMEOUT) as response:
            text = response.read().decode()
        assert "tink_server_dispatches_total 1.0" in text
        assert "tink_server_connected_agents" in text
        controller.proc.send_signal(signal.SIGTERM)
        assert controller.wait() == 0, str(controller)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, "stopped with the process"
    finally:
        controller.close()


def test_capa_controller_serves_no_workflow_service_by_default(tmp_path: Path, closed_endpoint: str) -> None:
    controller = ControllerProcess(tmp_path / "state.db", closed_endpoint)
    try:
        controller.line("controllers running: ")
        assert not controller.has_line("tink server: ")
        controller.proc.send_signal(signal.SIGTERM)
        assert controller.wait() == 0, str(controller)
    finally:
        controller.close()
