"""Fixtures for move tests: two real SQLite stores, ``capa serve`` over a file of its own as a target, and
the shared fixtures of the controller and CLI tests (moto over HTTP, the in-process ``capa``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.store.sqlite import SQLiteStore
from tests.cli.conftest import cli, closed_endpoint, state  # noqa: F401 (shared fixtures)
from tests.controllers.conftest import example, harness, moto_with_amis  # noqa: F401 (shared fixtures)

ROOT = Path(__file__).resolve().parents[2]
SAFETY_TIMEOUT = 60.0


@pytest.fixture
def source(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "source.db")
    yield store
    store.close()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "target.db")
    yield store
    store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    """The kubeconfig of ``capa serve`` running in a process of its own over ``served/served.db``."""
    home = tmp_path / "served"
    home.mkdir()
    path = home / "kubeconfig"
    command = [
        sys.executable,
        "-m",
        "capa_py.cli",
        "--state",
        str(home / "served.db"),
        "serve",
        "--port",
        "0",
    ]
    server = subprocess.Popen(
        [*command, "--write-kubeconfig", str(path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + SAFETY_TIMEOUT
        while not path.exists():
            assert server.poll() is None, (
                f"capa serve exited: {server.stderr.read() if server.stderr else ''}"
            )
            assert time.monotonic() < deadline, "capa serve wrote no kubeconfig"
            time.sleep(0.05)
        yield path
    finally:
        server.terminate()
        server.wait(SAFETY_TIMEOUT)
        if server.stderr is not None:
            server.stderr.close()
