"""benchmarks/tink_agent.py runs every workflow of every real agent to Succeeded and reports its figures
(the figures themselves are not asserted: they are for reading)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "tink_agent.py"


def test_the_benchmark_runs_every_workflow_of_every_agent(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--agents",
            "3",
            "--workflows",
            "2",
            "--json",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads((tmp_path / "out.json").read_text())
    assert (figures["workflows"], figures["succeeded"]) == (6, 6)
    assert "workflows run per second" in done.stdout


def test_bad_options_are_refused() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--agents", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--agents must be between 1 and 65536" in done.stderr
