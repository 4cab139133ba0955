"""benchmarks/startup.py runs every command it measures to success and reports wall and CPU seconds for each
(the figures themselves are not asserted: they are for reading)."""

from __future__ import annotations

import json
import subprocess
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
