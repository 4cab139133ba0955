"""``capa tink hegel`` and ``capa controller --hegel-port`` as real processes over a SQLite store: a caller
connecting from its Hardware's DHCP address gets its metadata, SIGTERM stops the process, and bad flags
exit 2 naming the flag."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from capa_py.store import SQLiteStore
from capa_py.store.kube import KubeStore
from tests.cli.cli_support import Cli
from tests.cli.served import served_process
from tests.cli.test_cli_kube_store import kubeconfig  # noqa: F401
from tests.cli.test_controller_cmd import SAFETY_TIMEOUT, ControllerProcess
from tests.tinkerbell.test_hegel import USERDATA, call, hardware

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def hegel_process(tmp_path: Path, *store_args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``capa STORE-ARGS tink hegel --port 0 --trusted-proxies 127.0.0.7`` and the URL it serves."""
    args = [*store_args, "tink", "hegel", "--port", "0", "--trusted-proxies", "127.0.0.7"]
    with served_process(tmp_path, args, "hegel: ") as started:
        assert started[1].startswith("http://127.0.0.1:"), started[1]
        yield started


@pytest.fixture
def sqlite_hegel(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    with hegel_process(tmp_path, "--state", str(tmp_path / "state.db")) as started:
        yield started


def test_capa_tink_hegel_serves_the_store_until_sigterm(
    tmp_path: Path, sqlite_hegel: tuple[subprocess.Popen[str], str]
) -> None:
    proc, url = sqlite_hegel
    with SQLiteStore(tmp_path / "state.db") as store:
        store.create(hardware("machine1", "127.0.0.2", hostname="node-1", userdata=USERDATA))
    assert call(f"{url}/2009-04-04/meta-data/instance-id", "127.0.0.2")[:2] == (200, b"machine1")
    assert call(f"{url}/2009-04-04/user-data", "127.0.0.2")[:2] == (200, USERDATA.encode())
    assert call(f"{url}/2009-04-04/user-data", "127.0.0.3")[0] == 404
    forwarded = {"X-Forwarded-For": "127.0.0.2"}
    hostname = f"{url}/2009-04-04/meta-data/hostname"
    assert call(hostname, "127.0.0.7", headers=forwarded)[:2] == (200, b"node-1")
    assert call(hostname, "127.0.0.8", headers=forwarded)[0] == 404
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(SAFETY_TIMEOUT) == 0
    assert proc.stdout is not None
    assert proc.stdout.read().strip() == "stopped"


@pytest.mark.parametrize("command", [["tink", "hegel"], ["controller", "--hegel-port", "50061"]])
def test_a_bad_trusted_proxy_is_refused_with_exit_2(cli: Cli, command: list[str]) -> None:
    result = cli(*command, "--trusted-proxies", "127.0.0.0/8,10.0.0.1/8")
    assert result.exit_code == 2, result
    assert "--trusted-proxies: '10.0.0.1/8' is not a CIDR" in result.stderr


def test_capa_controller_serves_hegel_with_its_controllers(tmp_path: Path, closed_endpoint: str) -> None:
    state = tmp_path / "state.db"
    with SQLiteStore(state) as store:
        store.create(hardware("machine1", "127.0.0.2", userdata=USERDATA))
    port = _free_port()
    controller = ControllerProcess(state, closed_endpoint, "--hegel-port", str(port))
    try:
        assert controller.line("hegel: ") == f"hegel: http://127.0.0.1:{port}"
        controller.line("controllers running: ")
        url = f"http://127.0.0.1:{port}/2009-04-04"
        assert call(f"{url}/meta-data/", "127.0.0.2")[:2] == (200, b"instance-id\nlocal-ipv4")
        with SQLiteStore(state) as store:
            store.create(hardware("machine2", "127.0.0.3"))
        assert call(f"{url}/meta-data/instance-id", "127.0.0.3")[:2] == (200, b"machine2")
        controller.proc.send_signal(signal.SIGTERM)
        assert controller.wait() == 0, str(controller)
        # Stopped with the process: the port is free again.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0
    finally:
        controller.close()


def test_capa_controller_serves_no_hegel_by_default(tmp_path: Path, closed_endpoint: str) -> None:
    controller = ControllerProcess(tmp_path / "state.db", closed_endpoint)
    try:
        controller.line("controllers running: ")
        assert not controller.has_line("hegel: ")
        controller.proc.send_signal(signal.SIGTERM)
        assert controller.wait() == 0, str(controller)
    finally:
        controller.close()


def test_capa_tink_hegel_serves_the_api_server_store(tmp_path: Path, kubeconfig: Path) -> None:  # noqa: F811
    with KubeStore.from_kubeconfig(kubeconfig) as store:
        machine = hardware("kube-machine", "127.0.0.12", hostname="kube-node")
        machine.metadata.namespace = "hegel-kube"
        store.create(machine)
    with hegel_process(tmp_path, "--kubeconfig", str(kubeconfig)) as (proc, url):
        assert call(f"{url}/2009-04-04/meta-data/hostname", "127.0.0.12")[:2] == (200, b"kube-node")
        assert call(f"{url}/2009-04-04/meta-data/instance-id", "127.0.0.12")[:2] == (200, b"kube-machine")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(SAFETY_TIMEOUT) == 0


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["tink", "hegel", "--port", "70000"], "--port must be between 0 and 65535"),
        (["controller", "--hegel-port", "-1"], "--hegel-port must be between 0 and 65535"),
    ],
)
def test_a_port_out_of_range_is_refused_with_exit_2(cli: Cli, command: list[str], message: str) -> None:
    result = cli(*command)
    assert result.exit_code == 2, result
    assert message in result.stderr


def test_capa_controller_exits_1_when_the_hegel_port_is_taken(tmp_path: Path, closed_endpoint: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        controller = ControllerProcess(tmp_path / "state.db", closed_endpoint, "--hegel-port", str(port))
        try:
            assert controller.wait() == 1, str(controller)
            assert f"cannot serve hegel on 127.0.0.1:{port}" in controller.stderr()
            assert not controller.has_line("controllers running: ")
        finally:
            controller.close()
