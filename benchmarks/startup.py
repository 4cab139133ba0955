"""How long ``capa`` takes to start: wall and CPU seconds of whole ``capa`` processes that do little else.

Run: ``.venv/bin/python -m benchmarks.startup [--repeat N] [--source DIR] [--json PATH]``. Prints, per
command, the median (and the fastest run) of ``--repeat`` runs (7 by default) after one untimed run that
warms the file cache; asserts nothing. No AWS, no server: each command runs as its own process in a fresh
temporary directory, with no ``AWS_*`` or ``CAPA_*`` variable of the user's.

The commands:

* ``capa --help`` and ``capa --version``: registering the command line, nothing else;
* ``capa get clusters`` with no store yet (it says so and creates none), and with a store holding the
  example cluster (``examples/aws-cluster.yaml``): the object models and the store are loaded;
* ``capa apply -f examples/aws-cluster.yaml --no-wait`` into a fresh store: loading and validating the
  manifest and storing it, without controllers or AWS.

CPU seconds are the child's user and system time (``getrusage`` of the children, measured around each run).
``--source DIR`` runs ``python -m capa_app.cli`` from another checkout of capa-py (its root first on
``PYTHONPATH``) instead of this one's ``capa``: the same figures for an older version, to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "aws-cluster.yaml"


@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...]
    store: str
    """``none`` (no store file), ``example`` (a store holding the example) or ``fresh`` (none, created by
    the command itself)."""


COMMANDS = (
    Command("capa --help", ("--help",), "none"),
    Command("capa --version", ("--version",), "none"),
    Command("capa get clusters (no store)", ("get", "clusters"), "none"),
    Command("capa get clusters (the example stored)", ("get", "clusters"), "example"),
    Command(
        "capa apply -f examples/aws-cluster.yaml --no-wait",
        ("apply", "-f", str(EXAMPLE), "--no-wait"),
        "fresh",
    ),
)


def _capa(source: Path | None) -> list[str]:
    if source is not None:
        return [sys.executable, "-m", "capa_app.cli"]
    beside = Path(sys.executable).parent / "capa"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "capa_app.cli"]


def _env(source: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CAPA_"))}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "NO_COLOR": "1"})
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run(argv: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one process; exits naming the command when it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        list(argv), capture_output=True, text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL, check=False
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(command: Command, repeat: int, source: Path | None) -> dict[str, Any]:
    capa, env = _capa(source), _env(source)
    walls: list[float] = []
    cpus: list[float] = []
    for index in range(repeat + 1):  # the first run warms the file cache and is not counted
        with tempfile.TemporaryDirectory(prefix="capa-startup-") as directory:
            work = Path(directory)
            state = ["--state", str(work / "state.db")]
            if command.store == "example":
                _run([*capa, *state, "apply", "-f", str(EXAMPLE), "--no-wait"], env, source or work)
            wall, cpu = _run([*capa, *state, *command.args], env, source or work)
        if index:
            walls.append(wall)
            cpus.append(cpu)
    return {
        "runs": repeat,
        "wallSeconds": {"median": statistics.median(walls), "min": min(walls)},
        "cpuSeconds": {"median": statistics.median(cpus), "min": min(cpus)},
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed runs of each command (default 7)")
    parser.add_argument("--source", type=Path, help="run python -m capa_app.cli from this checkout instead")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    source = args.source.resolve() if args.source is not None else None
    print(f"capa start-up: median (fastest) of {args.repeat} runs, seconds", flush=True)
    print(f"  {'command':<55} {'wall':>15} {'cpu':>15}")
    figures: dict[str, Any] = {}
    for command in COMMANDS:
        figure = measure(command, args.repeat, source)
        figures[command.name] = figure
        wall, cpu = figure["wallSeconds"], figure["cpuSeconds"]
        wall_text = f"{wall['median']:>7.3f} ({wall['min']:.3f})"
        cpu_text = f"{cpu['median']:>7.3f} ({cpu['min']:.3f})"
        print(f"  {command.name:<55} {wall_text} {cpu_text}", flush=True)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"source": str(source or ROOT), "commands": figures}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
