"""Fixtures for the CLI tests.

* ``cli``: runs ``capa --state <tmp>/state.db ARGS`` in-process with :class:`typer.testing.CliRunner` on
  :data:`capa_app.cli.main.app` (for commands that never reach AWS); the logging configuration each
  invocation binds to the runner's streams is put back afterwards, so no later test logs into a closed
  stream; the local AWS endpoint's record (``CAPA_LOCAL_AWS_DIR``) is the test's own;
* ``closed_endpoint``: an endpoint URL on a loopback port nothing listens on — any AWS call would fail
  there, slowly, after retries;
* ``cli_moto``: a moto server (with its default AMIs) for the few CLI tests that need controllers to run.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from typer.testing import CliRunner

from capa_app.cli.main import app
from tests.cli.cli_support import Cli, CliResult
from tests.harness.moto_server import MotoServer, start_moto_server


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def cli(state: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    for name in ("CAPA_STATE", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    # The local AWS endpoint's record: this test's, never the user's.
    monkeypatch.setenv("CAPA_LOCAL_AWS_DIR", str(state.parent / "local-aws"))
    saved_structlog = structlog.get_config()
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, state_path: Path | None = None) -> CliResult:
        argv = ["--state", str(state_path or state), *args]
        started = time.monotonic()
        result = runner.invoke(app, argv, input=input)
        return CliResult(
            argv, result.exit_code, result.stdout, result.stderr, time.monotonic() - started, result.exception
        )

    yield invoke
    structlog.configure(**saved_structlog)
    root.handlers[:] = saved_handlers
    root.setLevel(saved_level)


@pytest.fixture
def closed_endpoint() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def cli_moto() -> Iterator[MotoServer]:
    server = start_moto_server(load_default_amis=True)
    yield server
    server.stop()
