"""``capa`` starts without the heavy packages: registering the command line (all ``--help`` needs) imports
typer, rich, the standard library and light modules, never the AWS SDK, the API server, the Kubernetes
client or the object models; each command imports what it runs when it runs.

The import check runs in a fresh interpreter with ``-X importtime``: a module that leaked is named with the
chain of imports that brought it in. Every command group's ``--help`` still prints its usage, and every
command (down to ``capa apply --help``) still registers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.main import get_command

from tests.support.programs import module_command

ROOT = Path(__file__).resolve().parents[2]

HEAVY = (
    "boto3",
    "botocore",
    "aiohttp",
    "kubernetes",
    "grpc",
    "jsonschema",
    "cryptography",
    "pydantic",
    "structlog",
    "capa_py.apiserver",
    "capa_py.engine",
    "capa_py.api",
    "capa_py.store",
)
"""Packages ``import capa_app.cli.main`` must not load (a name covers its submodules)."""


def _import_tree(stderr: str) -> dict[str, str]:
    """Each module's importer, from ``-X importtime``'s lines: a module is listed after what it imported,
    one level deeper, so a module's importer is the next line one level up."""
    entries: list[tuple[int, str]] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or line.rstrip().endswith("| package"):
            continue
        name_field = line.split("|")[-1]
        depth = (len(name_field) - len(name_field.lstrip()) - 1) // 2
        entries.append((depth, name_field.strip()))
    importer: dict[str, str] = {}
    for index, (depth, name) in enumerate(entries):
        for later_depth, later_name in entries[index + 1 :]:
            if later_depth < depth:
                importer[name] = later_name
                break
    return importer


def _chain(module: str, importer: dict[str, str]) -> str:
    chain = [module]
    while chain[-1] in importer and len(chain) < 50:
        chain.append(importer[chain[-1]])
    return " <- ".join(chain)


def _leaks(modules: str) -> tuple[list[str], list[str]]:
    """The heavy modules a fresh interpreter has loaded after importing ``modules`` (comma-separated), and
    for each heavy package the chain of imports that brought its first module in."""
    script = f"import json, sys; import {modules}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(done.stdout)
    importer = _import_tree(done.stderr)
    leaked = [name for name in loaded if _heavy(name)]
    chains = []
    for heavy in HEAVY:
        mine = [name for name in leaked if name == heavy or name.startswith(heavy + ".")]
        # The first of the package's modules that a module outside it imported: who brought it in.
        entry = [name for name in mine if not importer.get(name, "").startswith(heavy)]
        if mine:
            chains.append(_chain((entry or mine)[0], importer))
    return leaked, chains


def _heavy(name: str) -> bool:
    return any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY)


def test_registering_the_command_line_imports_no_heavy_package() -> None:
    leaked, chains = _leaks("capa_app.cli.main")
    assert not leaked, "import capa_app.cli.main loaded heavy modules:\n" + "\n".join(chains)


def test_a_heavy_import_is_named_with_who_imported_it() -> None:
    """The check above can fail, and says why: what ``capa apply`` runs (imported when it runs) loads the
    controllers and the store, and the chains lead back to it."""
    leaked, chains = _leaks("capa_app.cli.main, capa_app.cli.apply_run")
    assert "capa_py.store" in leaked, leaked
    assert "boto3" in leaked, leaked
    assert any(chain.startswith("capa_py.store") for chain in chains), chains
    assert all(chain.endswith("<- capa_app.cli.apply_run") for chain in chains), chains


def _groups(app: typer.Typer) -> list[list[str]]:
    """The path of every command and group of the app, top level first."""
    root = get_command(app)
    paths: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        subcommands = getattr(command, "commands", {})
        for name, sub in sorted(subcommands.items()):
            paths.append([*path, name])
            walk(sub, [*path, name])

    walk(root, [])
    return paths


def _capa(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        module_command("capa_app.cli", *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_capa_help_prints_the_usage_of_every_command() -> None:
    from capa_app.cli.main import app

    done = _capa("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: "), done.stdout
    top = [path[0] for path in _groups(app) if len(path) == 1]
    assert {"apply", "get", "delete", "cluster", "tink", "serve", "controller"} <= set(top), top
    for name in top:
        assert f" {name} " in done.stdout, f"capa --help does not list {name}:\n{done.stdout}"


@pytest.mark.parametrize("group", ["cluster", "tink", "local", "ctrlkit", "iam"])
def test_each_command_group_prints_its_usage(group: str) -> None:
    from capa_app.cli.main import app

    groups = {path[0] for path in _groups(app) if len(path) > 1}
    assert group in groups, sorted(groups)
    done = _capa(group, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Usage: python -m capa_app.cli {group} "), done.stdout
    for path in _groups(app):
        if len(path) == 2 and path[0] == group:
            assert f" {path[1]} " in done.stdout, f"capa {group} --help does not list {path[1]}"


def test_every_command_registers_and_prints_its_options() -> None:
    """Each command's ``--help`` lists its options: their types and defaults are resolved at registration."""
    from typer.testing import CliRunner

    from capa_app.cli.main import app

    runner = CliRunner()
    paths = _groups(app)
    assert ["apply"] in paths, paths
    assert ["tink", "render"] in paths, paths
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, f"capa {' '.join(path)} --help: {result.output}"
        assert "Usage: " in result.stdout, result.stdout
