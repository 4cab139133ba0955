"""Test programs (a crashing ``capa``, a self-killing workflow, a moto server with extras) run in a
subprocess as modules of the ``tests`` package: ``python -m tests.harness.crashing_capa ...``, with the
repository's root on the child's ``PYTHONPATH`` (pytest's ``pythonpath`` setting covers only its own
process)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_command(module: str, *args: str) -> list[str]:
    """The command running ``module`` (``tests.harness.crashing_capa``, say) with this interpreter."""
    return [sys.executable, "-m", module, *args]


def program_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (this process's environment when None) with the repository's root first on ``PYTHONPATH``,
    so that the child imports ``tests`` and ``capa_py`` from this checkout."""
    base = dict(os.environ if env is None else env)
    rest = [entry for entry in base.get("PYTHONPATH", "").split(os.pathsep) if entry and entry != str(ROOT)]
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *rest])
    return base
