"""benchmarks/startup.py runs every command it measures to success and reports wall and CPU seconds for each
(the figures themselves are not asserted: they are for reading)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.programs import module_command, program_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_measures_every_command(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = subprocess.run(
        module_command("benchmarks.startup", "--repeat", "1", "--json", str(out)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
        env=program_env(),
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert list(figures["commands"]) == [
        "capa --help",
        "capa --version",
        "capa get clusters (no store)",
        "capa get clusters (the example stored)",
        "capa apply -f examples/aws-cluster.yaml --no-wait",
    ]
    for name, figure in figures["commands"].items():
        assert figure["runs"] == 1, name
        assert figure["wallSeconds"]["median"] > 0, name
        assert figure["cpuSeconds"]["median"] > 0, name
        assert name in done.stdout, done.stdout


def test_a_command_that_fails_stops_the_benchmark_naming_it(tmp_path: Path) -> None:
    """``--source`` runs the other checkout's ``capa_app.cli``; when it fails (this one exits 1 at once),
    the benchmark says which command failed instead of printing figures of failures."""
    package = tmp_path / "capa_app" / "cli"
    package.mkdir(parents=True)
    (tmp_path / "capa_app" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("import sys\n\nsys.exit('not this capa')\n")
    done = subprocess.run(
        module_command("benchmarks.startup", "--repeat", "1", "--source", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=program_env(),
    )
    assert done.returncode == 1, done.stdout
    assert "capa_app.cli --state" in done.stderr, done.stderr
    assert "--help exited 1" in done.stderr, done.stderr
    assert "not this capa" in done.stderr, done.stderr


def test_every_benchmark_make_bench_runs_starts_as_make_bench_runs_it() -> None:
    # `make bench` runs each benchmark as a module of the benchmarks package (not by its path, which puts
    # benchmarks/ itself on sys.path): each must at least import and show its help that way.
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\nbench:") :].split("\n\n", 1)[0]
    modules = re.findall(r"-m (benchmarks\.\w+)", recipe)
    assert len(modules) >= 5, recipe
    for module in modules:
        shown = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=ROOT,
        )
        assert shown.returncode == 0, (module, shown.stderr)


def test_benchmarks_import_each_other_through_the_package() -> None:
    # A bare `import moto_env` works only when a script is run by its path; `make bench` runs modules.
    siblings = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    bare = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            bare += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] in siblings]
    assert bare == []
