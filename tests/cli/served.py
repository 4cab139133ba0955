"""``capa`` server subprocesses for tests: ``capa serve`` writing its kubeconfig, and servers that announce
their address on stdout (``capa tink hegel``, ``capa tink server``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.e2e_support import capa_env
from tests.support.eventually import eventually

SAFETY_TIMEOUT = 60.0
ROOT = Path(__file__).resolve().parents[2]


def bare_kubeconfig(url: str) -> dict[str, object]:
    """A kubeconfig naming ``url`` and no credentials (for a server that is not there)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bare", "cluster": {"server": url}}],
        "users": [{"name": "bare", "user": {}}],
        "contexts": [{"name": "bare", "context": {"cluster": "bare", "user": "bare"}}],
        "current-context": "bare",
    }


@contextmanager
def capa_serve(home: Path) -> Iterator[Path]:
    """``capa serve`` on a free port over ``home/served.db``, in a process of its own: the kubeconfig it
    writes (``home/kubeconfig``) once it serves. Terminated on the way out."""
    path = home / "kubeconfig"
    state = str(home / "served.db")
    command = [sys.executable, "-m", "capa_app.cli", "--state", state, "serve", "--port", "0"]
    server = subprocess.Popen(
        [*command, "--write-kubeconfig", str(path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def written() -> bool:
            if server.poll() is not None:
                said = server.stderr.read() if server.stderr else ""
                raise RuntimeError(f"capa serve exited: {said}")
            return path.exists()

        eventually(written, "capa serve writing its kubeconfig", timeout=SAFETY_TIMEOUT, interval=0.05)
        yield path
    finally:
        server.terminate()
        server.wait(SAFETY_TIMEOUT)
        if server.stderr is not None:
            server.stderr.close()


@contextmanager
def served_process(
    tmp_path: Path, args: list[str], announced: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``capa ARGS``, once its first stdout line starts with ``announced``: the process and what follows
    that prefix (the address it serves). Killed on the way out if still running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "capa_app.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        env=capa_env(tmp_path / "home"),
        cwd=tmp_path,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(announced), line
        yield proc, line[len(announced) :].strip()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(SAFETY_TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()
