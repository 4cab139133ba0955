"""The embedded AWS endpoint: a moto server on 127.0.0.1 for users without an AWS account.

``--aws-endpoint local`` starts it on demand and leaves it running between commands, so ``apply``,
``get``, ``resources``, ``audit`` and ``delete`` run as separate processes and see the same AWS. Its port
and pid live next to the state file (``local-aws.json``), its log in ``local-aws.log``; ``capa local
status`` and ``capa local stop`` manage it. A file lock keeps two commands from starting two servers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from capa_py.logging import get_logger

_log = get_logger("aws.local")
STATE_FILE = "local-aws.json"
LOG_FILE = "local-aws.log"
LOCK_FILE = "local-aws.lock"


@dataclass(frozen=True)
class LocalEndpoint:
    url: str
    port: int
    pid: int
    started_at: float


class LocalEndpointError(RuntimeError):
    """The local endpoint did not start or did not answer; its log says why."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _answers(url: str, timeout: float = 1.0) -> bool:
    # /moto-api/config is a few bytes; /moto-api/data.json serialises every resource the server holds
    # (megabytes, over a second once a cluster exists), which made a busy endpoint look dead.
    try:
        with urllib.request.urlopen(f"{url}/moto-api/config", timeout=timeout) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_endpoint(state_dir: Path) -> LocalEndpoint | None:
    """The recorded endpoint if its process is alive and answers, else None."""
    path = state_dir / STATE_FILE
    try:
        data = json.loads(path.read_text())
        endpoint = LocalEndpoint(
            str(data["url"]), int(data["port"]), int(data["pid"]), float(data["startedAt"])
        )
    except (OSError, ValueError, KeyError):
        return None
    if _alive(endpoint.pid) and _answers(endpoint.url):
        return endpoint
    return None


def ensure_endpoint(state_dir: Path, startup_timeout: float = 60.0) -> LocalEndpoint:
    """The running local endpoint, started if needed."""
    with _locked(state_dir):
        existing = read_endpoint(state_dir)
        if existing is not None:
            return existing
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with open(state_dir / LOG_FILE, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "false"},
            )
        deadline = time.monotonic() + startup_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise LocalEndpointError(
                    f"the local AWS endpoint exited at start (code {process.returncode}); "
                    f"see {state_dir / LOG_FILE}"
                )
            if _answers(url, timeout=0.5):
                endpoint = LocalEndpoint(url, port, process.pid, time.time())
                (state_dir / STATE_FILE).write_text(
                    json.dumps(
                        {"url": url, "port": port, "pid": process.pid, "startedAt": endpoint.started_at}
                    )
                )
                _log.info("started the local AWS endpoint", url=url, pid=process.pid)
                return endpoint
            time.sleep(0.1)
        process.kill()
        raise LocalEndpointError(f"the local AWS endpoint did not answer within {startup_timeout:g}s")


def stop_endpoint(state_dir: Path, timeout: float = 10.0) -> bool:
    """Stop the local endpoint; returns whether one was running."""
    with _locked(state_dir):
        path = state_dir / STATE_FILE
        try:
            pid = int(json.loads(path.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return False
        path.unlink(missing_ok=True)
        if not _alive(pid):
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        return True
