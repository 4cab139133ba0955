"""A ``capa`` server subprocess (``capa tink hegel``, ``capa tink server``) for CLI tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.e2e_support import capa_env

SAFETY_TIMEOUT = 60.0


@contextmanager
def served_process(
    tmp_path: Path, args: list[str], announced: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``capa ARGS``, once its first stdout line starts with ``announced``: the process and what follows
    that prefix (the address it serves). Killed on the way out if still running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "capa_py.cli", *args],
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
