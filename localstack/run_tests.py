"""Start LocalStack on loopback (no Docker), run the AWS tests against it, stop it whatever happens.

Run by ``localstack/run-tests.sh`` with the Python of ``.venv-localstack`` (3.13, where localstack-core
runs outside its container image); the tests themselves run with the project's own ``.venv``, given by
``--project-python``: LocalStack ships its own fork of moto (``moto-ext``, importable as ``moto``), which
cannot share a virtualenv with the project's ``moto[server]``.

LocalStack gets a temporary directory for its files and its log; the log's tail is printed, and the
directory kept, when LocalStack fails to start or a test fails. Arguments after ``--`` go to pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType
from typing import Any

HOST = "127.0.0.1"
DEFAULT_PORT = 4566
"""LocalStack's usual port, taken when free; ``capa`` picks the ``localstack`` profile for it."""
SERVICES = ("ec2", "iam", "secretsmanager", "ssm", "route53", "s3")
"""EC2 for everything capa-py makes; IAM for the instance profile one instance test creates; Secrets Manager
and SSM Parameter Store for the machines' bootstrap data; Route 53 for the API server's hosted zone and
record; S3 for buckets."""
TEST_PATHS = ("tests/resources", "tests/localstack")
START_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0
"""After SIGTERM; LocalStack's shutdown has been seen to hang at 'Stopping all services'."""
ROOT = Path(__file__).resolve().parent.parent


def say(message: str) -> None:
    print(f"localstack-test: {message}", flush=True)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will: TIME_WAIT is free
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def choose_port() -> int:
    wanted = os.environ.get("LOCALSTACK_PORT")
    if wanted:
        if not port_is_free(int(wanted)):
            # LocalStack would not say so: its gateway fails to bind, and it reports ready all the same.
            raise RuntimeError(f"LOCALSTACK_PORT={wanted}: the port is taken on {HOST}")
        return int(wanted)
    if port_is_free(DEFAULT_PORT):
        return DEFAULT_PORT
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def localstack_env(port: int, workdir: Path) -> dict[str, str]:
    # No AWS_* variable of the developer's reaches LocalStack (it needs none).
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            "OVERRIDE_IN_DOCKER": "0",  # run on the host, not as in its container
            "GATEWAY_LISTEN": f"{HOST}:{port}",
            # The default gateway server (twisted) binds every interface whatever GATEWAY_LISTEN says;
            # hypercorn binds the address given.
            "GATEWAY_SERVER": "hypercorn",
            "DNS_ADDRESS": "0",  # no DNS server (it would listen on port 53 of every interface)
            "SERVICES": ",".join(SERVICES),
            "EAGER_SERVICE_LOADING": "1",  # load EC2 before reporting ready, not on the first test's call
            "FILESYSTEM_ROOT": str(workdir / "filesystem"),
            "PERSISTENCE": "0",
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "DISABLE_EVENTS": "1",  # no analytics
            # As the moto harness does: without moto's ~1200 bundled AMIs, each new account (one per
            # test) starts in 0.1 s instead of 0.3 s; tests register the images they launch.
            "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
        }
    )
    return env


def health(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{url}/_localstack/health", timeout=2) as response:
            data = json.loads(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def ready(report: dict[str, Any] | None) -> bool:
    services = (report or {}).get("services", {})
    return all(services.get(name) in ("available", "running") for name in SERVICES)


def listening_addresses(pid: int) -> list[str]:
    """Where the LocalStack process tree listens (TCP and UDP), as ``host:port``."""
    import psutil  # a dependency of localstack-core

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    found: list[str] = []
    for process in processes:
        try:
            connections = process.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for conn in connections:
            listening = conn.status == psutil.CONN_LISTEN or (
                conn.type == socket.SOCK_DGRAM and not conn.raddr
            )
            if listening and conn.laddr:
                found.append(f"{conn.laddr.ip}:{conn.laddr.port}")
    return sorted(set(found))


class LocalStack:
    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self.workdir = workdir
        self.log_path = workdir / "localstack.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.version = "unknown"

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "localstack.runtime.main"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=localstack_env(self.port, self.workdir),
                cwd=self.workdir,
                start_new_session=True,  # its own process group: stopped as a whole, spared the terminal's ^C
            )

    def wait_ready(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"LocalStack exited at start (exit code {self.process.returncode})")
            report = health(self.url)
            if ready(report):
                assert report is not None
                self.version = str(report.get("version", "unknown"))
                return
            time.sleep(0.2)
        raise RuntimeError(f"LocalStack did not report {', '.join(SERVICES)} ready within {timeout:.0f}s")

    def check_loopback_only(self) -> None:
        assert self.process is not None
        addresses = listening_addresses(self.process.pid)
        exposed = [a for a in addresses if not a.startswith(("127.", "[::1]", "::1:"))]
        if exposed:
            raise RuntimeError(f"LocalStack listens beyond loopback: {', '.join(exposed)}")
        say(f"LocalStack listens on {', '.join(addresses) or '(nothing found)'} only")

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        started = time.monotonic()
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            say(f"LocalStack still running {STOP_TIMEOUT:.0f}s after SIGTERM: killing it")
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_TIMEOUT)
        except ProcessLookupError:
            pass
        say(f"LocalStack stopped in {time.monotonic() - started:.1f}s")

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--project-python", required=True, help="the Python of the project's .venv")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _terminate)

    try:
        port = choose_port()
    except RuntimeError as exc:
        say(f"error: {exc}")
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="capa-localstack-"))
    localstack = LocalStack(port, workdir)
    failed = True
    code = 1
    try:
        started = time.monotonic()
        localstack.start()
        localstack.wait_ready(START_TIMEOUT)
        start_seconds = time.monotonic() - started
        say(f"LocalStack {localstack.version} ready on {localstack.url} in {start_seconds:.1f}s")
        localstack.check_loopback_only()

        env = dict(os.environ, CAPA_TEST_AWS_ENDPOINT=localstack.url)
        command = [args.project_python, "-m", "pytest", "-q", "-rsx", *TEST_PATHS, *args.pytest_args]
        say(f"running: CAPA_TEST_AWS_ENDPOINT={localstack.url} {' '.join(command[1:])}")
        started = time.monotonic()
        code = subprocess.call(command, cwd=ROOT, env=env)
        test_seconds = time.monotonic() - started
        say(
            f"LocalStack {localstack.version}: started in {start_seconds:.1f}s, tests took "
            f"{test_seconds:.1f}s, pytest exit code {code}"
        )
        failed = code != 0
    except RuntimeError as exc:
        say(f"error: {exc}")
    finally:
        localstack.stop()
        if failed:
            say(f"LocalStack log ({localstack.log_path}), last lines:")
            print(localstack.log_tail(), flush=True)
            say(f"kept {workdir} for inspection")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
