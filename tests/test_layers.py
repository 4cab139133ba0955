"""The layering contract (``[tool.importlinter]`` in pyproject.toml, run by ``make lint``): capa_app >
controllers > resources > capa_py, each importing only from its own layer or below.

It holds on the tree, and it bites: on a copy of the tree with one upward import planted (at module level,
or inside a function, where imports used to hide from cycles), ``lint-imports`` fails and names the import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("capa_app", "controllers", "resources", "capa_py")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the packages under ``root``, with ``root``'s pyproject.toml."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
            "--no-logo",
            str(root / "pyproject.toml"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def copy_tree(target: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))


def test_the_tree_keeps_the_layers() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "capa_app > controllers > resources > capa_py KEPT" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "expected"),
    [
        # A library module importing the command line at module level.
        (
            "capa_py/logging.py",
            "from capa_app.cli import output as _planted\n",
            "capa_py.logging -> capa_app.cli.output",
        ),
        # A resource class importing a controller inside a function, out of sight of import time.
        (
            "resources/__init__.py",
            "\n\ndef _planted() -> object:\n    from controllers import observe\n\n    return observe\n",
            "resources -> controllers.observe",
        ),
    ],
)
def test_an_upward_import_breaks_the_contract(
    tmp_path: Path, module: str, planted: str, expected: str
) -> None:
    copy_tree(tmp_path)
    assert lint_imports(tmp_path).returncode == 0, "the copy keeps the layers before the import is planted"
    with (tmp_path / module).open("a") as handle:
        handle.write(planted)
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "capa_app > controllers > resources > capa_py BROKEN" in result.stdout
    assert expected in result.stdout
