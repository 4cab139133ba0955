"""moto servers as subprocesses on loopback, for tests that talk to "AWS" over real HTTP.

A test talks to the server with a real boto3 client (real wire format, real error parsing), exactly as
capa-py talks to AWS; only the endpoint URL differs. Two flavours:

* plain moto, with moto's gaps — it ignores ``ClientToken`` (run as ``tests/harness/moto_autoscaling.py``,
  which every flavour installs: the instance refresh calls moto 5.2.5 lacks, the lifecycle hook fields it
  drops);
* moto with ``ClientToken`` honoured (``tests/harness/moto_tokens.py`` run as the server program);
* either of them with AWS-like delays: NAT gateways, load balancers and instances not ready for a while
  after their creation (``delays=Delays(...)``: ``tests/harness/moto_delays.py`` as the server program).

:func:`start_moto_server` picks a free port, starts the subprocess bound to 127.0.0.1, waits until it
answers and returns a :class:`MotoServer` with ``url``, ``reset()`` and ``stop()``. Server output goes to a
log file whose tail is shown when the server fails to start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.harness.moto_delays import Delays
from tests.peers.cluster import die_with_parent
from tests.support.eventually import eventually
from tests.support.programs import module_command, program_env

HOST = "127.0.0.1"
# The server needs none of these; keeping them out means no credential ever reaches a test server.
_STRIPPED_ENV_PREFIXES = ("AWS_",)


class MotoServerError(RuntimeError):
    """The moto server did not start or did not answer."""


@dataclass
class MotoServer:
    """A running moto server subprocess."""

    url: str
    port: int
    honours_tokens: bool
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] = field(repr=False)
    delays: Delays | None = None
    """The AWS-like delays the server applies, or None for moto's own instant states."""

    def reset(self) -> None:
        """Forget every resource (and every remembered client token) in every account and region."""
        request = urllib.request.Request(f"{self.url}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 200:
                raise MotoServerError(f"moto reset answered HTTP {response.status}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 1.0) -> None:
        """Terminate the server; kill it if it lingers (its request threads wait on clients' kept-alive
        connections)."""
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        self._log.close()
        with suppress(OSError):
            self.log_path.unlink()

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""


def free_port() -> int:
    """A port free on loopback right now (the server may still lose a race for it; start retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _command(port: int, honour_tokens: bool, delays: Delays | None = None) -> list[str]:
    if delays is not None:
        tokens = ["--honour-tokens"] if honour_tokens else []
        return module_command("tests.harness.moto_delays", "--port", str(port), *delays.arguments(), *tokens)
    if honour_tokens:
        return module_command("tests.harness.moto_tokens", "--port", str(port))
    return module_command("tests.harness.moto_autoscaling", "--port", str(port))


def _server_env(load_default_amis: bool) -> dict[str, str]:
    env = program_env({k: v for k, v in os.environ.items() if not k.startswith(_STRIPPED_ENV_PREFIXES)})
    env["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "true" if load_default_amis else "false"
    return env


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/moto-api/data.json", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _start_once(
    honour_tokens: bool, load_default_amis: bool, timeout: float, delays: Delays | None
) -> MotoServer:
    port = free_port()
    log_fd, log_name = tempfile.mkstemp(prefix="moto-server-", suffix=".log")
    log = os.fdopen(log_fd, "wb")
    process = subprocess.Popen(
        _command(port, honour_tokens, delays),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_server_env(load_default_amis),
        # A test process killed outright (an interrupted run's worker) takes its servers with it.
        preexec_fn=die_with_parent,  # noqa: PLW1509  (only prctl, safe between fork and exec)
    )
    server = MotoServer(
        f"http://{HOST}:{port}", port, honour_tokens, process, Path(log_name), log, delays=delays
    )

    def answers() -> bool:
        if not server.alive():
            tail = server.log_tail()
            server.stop()
            raise MotoServerError(f"moto server on port {port} exited at start:\n{tail}")
        return _answers(server.url)

    try:
        eventually(answers, f"moto server on port {port}", timeout=timeout, interval=0.1)
    except AssertionError as exc:
        tail = server.log_tail()
        server.stop()
        raise MotoServerError(
            f"moto server on port {port} did not answer within {timeout:.0f}s:\n{tail}"
        ) from exc
    return server


def start_moto_server(
    *,
    honour_tokens: bool = False,
    load_default_amis: bool = False,
    timeout: float = 30.0,
    attempts: int = 3,
    delays: Delays | None = None,
) -> MotoServer:
    """Start a moto server subprocess on a free loopback port and wait until it answers.

    ``load_default_amis`` off (the default) leaves out moto's ~1300 bundled AMIs, which moto rebuilds on the
    first EC2 call after every reset (about 0.1 s each time); tests register the images they launch.
    ``delays`` makes NAT gateways, load balancers and instances report their not-ready state for that long
    after their creation (``tests/harness/moto_delays.py``).
    """
    error: MotoServerError | None = None
    for _ in range(attempts):
        try:
            return _start_once(honour_tokens, load_default_amis, timeout, delays)
        except MotoServerError as exc:  # most likely a lost race for the port: try another
            error = exc
    assert error is not None
    raise error


@contextmanager
def running_moto_server(
    *, honour_tokens: bool = False, load_default_amis: bool = False
) -> Iterator[MotoServer]:
    """A moto server for the duration of the block."""
    server = start_moto_server(honour_tokens=honour_tokens, load_default_amis=load_default_amis)
    try:
        yield server
    finally:
        server.stop()
