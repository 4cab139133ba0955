"""benchmarks/tink_server.py runs every workflow of every simulated agent to Succeeded and reports its
figures (the figures themselves are not asserted: they are for reading)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "tink_server.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )


def test_the_benchmark_runs_every_workflow_of_every_agent(tmp_path: Path) -> None:
    done = run("--agents", "3", "--workflows", "2", "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stderr
    figures = json.loads((tmp_path / "out.json").read_text())
    assert (figures["workflows"], figures["succeeded"]) == (6, 6)
    assert figures["events"] == 6 * 2 * 2, "a start and a success per action, two actions per workflow"
    assert "workflows dispatched (and run) per second" in done.stdout
    assert "event round trip: p50" in done.stdout
    assert figures["cpu_ms_per_workflow"] > 0
    # The same agents against a bare grpc.aio server: every workflow went through it too.
    assert figures["raw"]["dispatched_per_second"] > 0
    assert "raw grpc.aio server, same exchange" in done.stdout
    assert "tink server against raw" in done.stdout


def test_bad_options_are_refused() -> None:
    for args, message in (
        (("--agents", "0"), "--agents must be between"),
        (("--workflows", "0"), "at least 1"),
    ):
        done = run(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr
