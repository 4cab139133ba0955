"""The embedded AWS endpoint: a moto server on 127.0.0.1 for users without an AWS account.

``--aws-endpoint local`` starts it on demand and leaves it running between commands, so ``apply``,
``get``, ``resources``, ``audit`` and ``delete`` run as separate processes and see the same AWS. There is
one per user, whatever the state file: its record (``local-aws.json``: url, port, pid, an id per start) and
its log (``local-aws.log``) live in :func:`endpoint_dir` — ``$CAPA_LOCAL_AWS_DIR`` when set, else
``$XDG_RUNTIME_DIR/capa-py``, else ``~/.local/state/capa-py``. ``capa local status`` and ``capa local stop``
manage it from any directory. A file lock keeps two commands from starting two servers.

A record is trusted only while its process is alive, runs the moto server and answers: a stale record
whose pid another process has since taken is never signalled.
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
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from capa_py.logging import get_logger

_log = get_logger("aws.local")
STATE_FILE = "local-aws.json"
LOG_FILE = "local-aws.log"
LOCK_FILE = "local-aws.lock"
DIR_VARIABLE = "CAPA_LOCAL_AWS_DIR"
"""Where the endpoint's record and log live, instead of the user's runtime or state directory."""


def endpoint_dir() -> Path:
    """The directory of this user's local endpoint record and log."""
    override = os.environ.get(DIR_VARIABLE)
    if override:
        return Path(override).expanduser()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "capa-py"
    return Path.home() / ".local" / "state" / "capa-py"


@dataclass(frozen=True)
class LocalEndpoint:
    url: str
    port: int
    pid: int
    started_at: float
    id: str = ""
    """Different on every start: a store made on one endpoint knows when it has been replaced."""


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
    # A zombie (exited, not yet reaped by its parent) is gone for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _runs_moto(pid: int) -> bool:
    """Whether ``pid`` is a moto server (where ``/proc`` says; elsewhere its answering is the test)."""
    if not Path("/proc/self").exists():
        return True
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"moto.server" in command


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
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(state_dir / LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _recorded(state_dir: Path) -> LocalEndpoint | None:
    try:
        data = json.loads((state_dir / STATE_FILE).read_text())
        return LocalEndpoint(
            str(data["url"]),
            int(data["port"]),
            int(data["pid"]),
            float(data["startedAt"]),
            str(data.get("id") or ""),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_endpoint(state_dir: Path | None = None) -> LocalEndpoint | None:
    """The recorded endpoint if its process is alive, is a moto server and answers, else None."""
    endpoint = _recorded(state_dir or endpoint_dir())
    if endpoint is not None and _alive(endpoint.pid) and _runs_moto(endpoint.pid) and _answers(endpoint.url):
        return endpoint
    return None


def ensure_endpoint(state_dir: Path | None = None, startup_timeout: float = 60.0) -> LocalEndpoint:
    """The running local endpoint, started if needed."""
    state_dir = state_dir or endpoint_dir()
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
                endpoint = LocalEndpoint(url, port, process.pid, time.time(), uuid.uuid4().hex)
                (state_dir / STATE_FILE).write_text(
                    json.dumps(
                        {
                            "url": url,
                            "port": port,
                            "pid": process.pid,
                            "startedAt": endpoint.started_at,
                            "id": endpoint.id,
                        }
                    )
                )
                _log.info("started the local AWS endpoint", url=url, pid=process.pid)
                return endpoint
            time.sleep(0.1)
        process.kill()
        process.wait()
        raise LocalEndpointError(f"the local AWS endpoint did not answer within {startup_timeout:g}s")


def stop_endpoint(state_dir: Path | None = None, timeout: float = 10.0) -> LocalEndpoint | None:
    """Stop the local endpoint; returns the one stopped, or None when none was running (a record whose
    process is gone, or is no moto server, is dropped and its process left alone)."""
    state_dir = state_dir or endpoint_dir()
    with _locked(state_dir):
        endpoint = _recorded(state_dir)
        if endpoint is None:
            return None
        if not _alive(endpoint.pid) or not _runs_moto(endpoint.pid):
            (state_dir / STATE_FILE).unlink(missing_ok=True)
            return None
        os.kill(endpoint.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(endpoint.pid):
            time.sleep(0.1)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(endpoint.pid, os.WNOHANG)
        if _alive(endpoint.pid):
            os.kill(endpoint.pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and _alive(endpoint.pid):
                time.sleep(0.1)
        if _alive(endpoint.pid):
            raise LocalEndpointError(f"the local AWS endpoint (pid {endpoint.pid}) did not stop")
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        return endpoint
