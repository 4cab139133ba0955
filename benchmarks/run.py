"""capa-py benchmark: AWS API calls and wall time for the example cluster, against one local moto server.

    .venv/bin/python -m benchmarks.run [--repeat N] [--json PATH] [--manifest FILE] [--no-delete]

Starts one moto server subprocess on 127.0.0.1 and measures, against it:

1. the calls ``capa apply`` makes to create the example cluster, next to the minimal number of calls that
   creation needs (``benchmarks/minimal.py``, a plain boto3 script, derives and makes them), with the
   ratios — and checks that both created the same resources;
2. the calls of a steady-state reconcile: a second ``capa apply`` of the same manifest;
3. the wall time of ``capa apply`` (the whole command, process start included) against the minimal
   script, N times each with the server reset before every run, and moto's own throughput, so that server
   cost and client cost can be told apart;
4. ``capa delete --wait``: its time, its calls, its reconciles and what it left behind.

The report goes to stdout as each figure is measured, progress to stderr. Nothing here asserts a time.
Exit status 0 on success; 1 when a command fails (its stderr is printed) or when capa-py and the minimal
script did not create the same resources. See ``benchmarks/README.md`` for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import moto

if __package__ in (None, ""):  # run by its path: the repository's root makes `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.moto_env import MOTO_LEFTOVERS, MotoEnv
from capa_py.aws.accounting import is_mutating

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
DEFAULT_MANIFEST = REPO / "examples" / "aws-cluster-machines.yaml"
STDERR_LIMIT = 8000
PROCESS_TIMEOUT = 300.0
"""Seconds before a command is given up on (capa's own --timeout should end it well before)."""


class CommandFailed(RuntimeError):
    def __init__(self, what: str, returncode: int | None, stderr: str) -> None:
        super().__init__(what)
        self.what = what
        self.returncode = returncode
        self.stderr = stderr


def progress(message: str, tag: str = "bench") -> None:
    print(f"[{tag}] {message}", file=sys.stderr, flush=True)


def environment(**extra: Any) -> dict[str, Any]:
    """The machine a benchmark ran on (Python, platform, CPUs), and what else the benchmark names."""
    return {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        **extra,
    }


def command_failed(exc: CommandFailed, figures: dict[str, Any]) -> int:
    """Print a failed command and the tail of its stderr, note it in the figures; the exit status (1)."""
    sys.stdout.flush()
    stderr = exc.stderr or ""
    print(f"\nerror: {exc.what}", file=sys.stderr)
    if len(stderr) > STDERR_LIMIT:
        print(f"(the last {STDERR_LIMIT} characters of its stderr)", file=sys.stderr)
        stderr = stderr[-STDERR_LIMIT:]
    print(stderr, file=sys.stderr, end="" if stderr.endswith("\n") else "\n")
    figures["error"] = {"command": exc.what, "returncode": exc.returncode}
    return 1


def finish(
    name: str, tag: str, figures: dict[str, Any], seconds: float, status: int, path: Path | None
) -> int:
    """The last line of a benchmark (how long it took, whether it failed), and its figures as JSON."""
    figures["benchmarkSeconds"] = round(seconds, 1)
    print(f"\n{name} {'finished' if status == 0 else 'FAILED'} after {figures['benchmarkSeconds']:.0f} s")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
        progress(f"figures written to {path}", tag)
    return status


# -- commands ------------------------------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """capa and the minimal script get no AWS_* settings (no profile, credentials or endpoint override):
    they talk to the moto server only, with emulator credentials."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def capa_executable() -> str:
    beside = Path(sys.executable).parent / "capa"
    if beside.exists():
        return str(beside)
    found = shutil.which("capa")
    if found is None:
        raise SystemExit("cannot find the capa command: run `make setup` first")
    return found


@dataclass
class Run:
    wall: float
    stdout: str
    stderr: str
    reconciles: dict[str, int] | None = None


def run_process(what: str, command: Sequence[str]) -> Run:
    started = time.perf_counter()
    try:
        done = subprocess.run(
            list(command),
            capture_output=True,
            text=True,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            timeout=PROCESS_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise CommandFailed(f"{what}: no answer within {PROCESS_TIMEOUT:.0f} s", None, stderr) from exc
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise CommandFailed(f"{what}: exit status {done.returncode}", done.returncode, done.stderr)
    return Run(wall, done.stdout, done.stderr)


class Capa:
    """``capa`` commands against the moto server, each in a new process."""

    def __init__(self, url: str, manifest: Path, timeout: str) -> None:
        self.url = url
        self.manifest = manifest
        self.timeout = timeout
        self.executable = capa_executable()

    def _args(self, state: Path, command: str) -> list[str]:
        args = ["--state", str(state), command, "-f", str(self.manifest), "--aws-endpoint", self.url]
        if command == "apply":
            return [*args, "-o", "json", "--timeout", self.timeout]
        return [*args, "--wait", "--timeout", self.timeout]

    def run(self, what: str, state: Path, command: str) -> Run:
        """The ``capa`` console script itself, as a user runs it (the timed runs)."""
        return run_process(what, [self.executable, *self._args(state, command)])

    def probe(self, what: str, state: Path, command: str) -> Run:
        """The same command through ``capa_probe.py``, which also reports the reconcile counts."""
        out = state.parent / f"reconciles-{command}-{time.monotonic_ns()}.json"
        line = [sys.executable, str(BENCH / "capa_probe.py"), str(out), *self._args(state, command)]
        result = run_process(what, line)
        if out.exists():
            result.reconciles = {k: int(v) for k, v in json.loads(out.read_text()).items()}
        return result


def apply_document(run: Run) -> dict[str, Any]:
    try:
        document: dict[str, Any] = json.loads(run.stdout)
    except json.JSONDecodeError as exc:
        raise CommandFailed("capa apply -o json printed no JSON document", 0, run.stderr) from exc
    return document


_CALLS_LINE = re.compile(r"^AWS calls: (\d+) \((\d+) mutating\)", re.MULTILINE)
_CALL_ROW = re.compile(r"^(\w+:\w+)\s+(\d+)\s*$", re.MULTILINE)


def delete_calls(run: Run) -> dict[str, Any]:
    """The calls ``capa delete --wait`` prints (it has no JSON output)."""
    match = _CALLS_LINE.search(run.stdout)
    by_operation = {op: int(n) for op, n in _CALL_ROW.findall(run.stdout)}
    total = int(match.group(1)) if match else sum(by_operation.values())
    mutating = int(match.group(2)) if match else sum(n for op, n in by_operation.items() if mutating_op(op))
    return {"total": total, "mutating": mutating, "byOperation": by_operation}


def run_minimal(url: str, manifest: Path) -> tuple[Run, dict[str, Any]]:
    line = [
        sys.executable,
        str(BENCH / "minimal.py"),
        "--endpoint",
        url,
        "--manifest",
        str(manifest),
        "--json",
    ]
    run = run_process("minimal.py", line)
    return run, json.loads(run.stdout)


# -- report formatting ---------------------------------------------------------------------------------------


def table(
    headers: Sequence[str] | None, rows: Sequence[Sequence[Any]], align: str = "", indent: str = "  "
) -> str:
    """Columns three spaces apart. ``align`` has one letter per column, ``l`` or ``r``; by default the first
    column is left-aligned and the others (numbers) right-aligned. No header line when ``headers`` is None."""
    columns = len(headers) if headers is not None else max(len(r) for r in rows)
    align = align or "l" + "r" * (columns - 1)
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    if headers is not None:
        cells.insert(0, [str(h) for h in headers])
    widths = [max(len(row[i]) for row in cells) for i in range(columns)]
    lines = []
    for row in cells:
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align, strict=True)]
        lines.append(indent + "   ".join(parts).rstrip())
    return "\n".join(lines)


def key_values(rows: Sequence[tuple[str, Any]], indent: str = "  ") -> str:
    return table(None, [[f"{k}:", v] for k, v in rows], align="ll", indent=indent)


def section(title: str) -> None:
    print()
    print(title)
    print("=" * len(title))


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def mutating_op(operation: str) -> bool:
    return bool(is_mutating(operation.split(":", 1)[1]))


def calls_text(calls: dict[str, Any]) -> str:
    return f"{calls['total']} ({calls['mutating']} mutating, {calls['total'] - calls['mutating']} reads)"


def reconciles_text(reconciles: dict[str, int] | None) -> str:
    if reconciles is None:
        return "unknown (capa_probe.py could not hook the converge loop)"
    parts = ", ".join(f"{name} {n}" for name, n in sorted(reconciles.items()))
    return f"{sum(reconciles.values())} ({parts})"


def calls_table(columns: dict[str, dict[str, int]]) -> str:
    """Calls by operation, one column per run: mutating operations first, then reads."""
    names = list(columns)
    operations = sorted({op for c in columns.values() for op in c}, key=lambda op: (not mutating_op(op), op))
    rows = [
        [op, "yes" if mutating_op(op) else "", *(columns[n].get(op, 0) for n in names)] for op in operations
    ]
    rows.append(["total", "", *(sum(columns[n].values()) for n in names)])
    return table(["operation", "mutating", *names], rows)


def runs_text(values: Sequence[float]) -> str:
    return "  ".join(f"{v:.2f}" for v in values)


def stats(values: Sequence[float]) -> dict[str, Any]:
    return {
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "runs": [round(v, 4) for v in values],
    }


# -- figures 1 and 2: calls to create, and for a steady-state reconcile --------------------------------------


def measure_create(env: MotoEnv, capa: Capa, work: Path, manifest: Path) -> dict[str, Any]:
    progress("figure 1: capa apply (create)")
    env.reset()
    state = work / "create" / "state.db"
    state.parent.mkdir(parents=True)
    created = capa.probe("capa apply (create)", state, "apply")
    create_doc = apply_document(created)
    capa_inventory = env.inventory()
    progress("figure 2: capa apply again (steady state)")
    steady = capa.probe("capa apply (steady state)", state, "apply")
    steady_doc = apply_document(steady)
    progress("figure 1: minimal.py")
    env.reset()
    minimal_run, minimal = run_minimal(env.url, manifest)
    minimal_inventory = env.inventory()
    capa_calls, min_calls = create_doc["awsCalls"], minimal["calls"]
    return {
        "create": {
            "capa": {
                "calls": capa_calls,
                "reconciles": created.reconciles,
                "convergeSeconds": create_doc["elapsedSeconds"],
                "wallSeconds": round(created.wall, 3),
                "states": create_doc["states"],
                "inventory": capa_inventory,
            },
            "minimal": {
                "calls": min_calls,
                "derivation": minimal["derivation"],
                "mismatches": minimal["mismatches"],
                "apiSeconds": minimal["elapsedSeconds"],
                "wallSeconds": round(minimal_run.wall, 3),
                "inventory": minimal_inventory,
            },
            "sameResources": capa_inventory == minimal_inventory,
            "ratio": {
                "total": round(capa_calls["total"] / min_calls["total"], 3),
                "mutating": round(capa_calls["mutating"] / min_calls["mutating"], 3),
            },
        },
        "steadyState": {
            "calls": steady_doc["awsCalls"],
            "reconciles": steady.reconciles,
            "convergeSeconds": steady_doc["elapsedSeconds"],
            "wallSeconds": round(steady.wall, 3),
        },
    }


def report_create(figures: dict[str, Any], manifest: Path) -> None:
    create = figures["create"]
    capa, minimal = create["capa"], create["minimal"]
    capa_calls, min_calls = capa["calls"], minimal["calls"]
    shown = manifest.relative_to(REPO) if manifest.is_relative_to(REPO) else manifest
    section(f"1. API calls to create the cluster of {shown}: capa apply vs the minimum")

    print("Minimum, derived from the manifest (benchmarks/minimal.py makes exactly these calls):")
    rows = [[s["what"], s["operation"], s["count"]] for s in minimal["derivation"]]
    rows.append(["total", "", sum(s["count"] for s in minimal["derivation"])])
    print(table(["what", "operation", "calls"], rows, align="llr"))
    if minimal["mismatches"]:
        print(
            f"  WARNING: minimal.py's calls differ from this derivation: {'; '.join(minimal['mismatches'])}"
        )

    print()
    print("Calls by operation:")
    print(calls_table({"capa": capa_calls["byOperation"], "minimal": min_calls["byOperation"]}))
    print()
    reads = (capa_calls["total"] - capa_calls["mutating"], min_calls["total"] - min_calls["mutating"])
    print(
        table(
            ["", "capa", "minimal", "capa / minimal"],
            [
                [
                    "all calls",
                    capa_calls["total"],
                    min_calls["total"],
                    ratio(capa_calls["total"], min_calls["total"]),
                ],
                [
                    "mutating calls",
                    capa_calls["mutating"],
                    min_calls["mutating"],
                    ratio(capa_calls["mutating"], min_calls["mutating"]),
                ],
                ["reads", reads[0], reads[1], ratio(*reads)],
            ],
        )
    )
    errors = {k: v for k, v in capa_calls.get("byOutcome", {}).items() if k != "ok"}
    ready = sum(s == "ready" for s in capa["states"].values())
    print()
    print(
        key_values(
            [
                (
                    "capa calls answered with an error",
                    f"{sum(errors.values())}"
                    + (f" ({', '.join(f'{k} {v}' for k, v in sorted(errors.items()))})" if errors else ""),
                ),
                ("capa reconciles", reconciles_text(capa["reconciles"])),
                ("capa objects ready", f"{ready}/{len(capa['states'])}"),
            ]
        )
    )

    print()
    print("What each created (read back from the server afterwards; these reads are not counted):")
    capa_inv, min_inv = capa["inventory"], minimal["inventory"]
    rows = [
        [k, capa_inv.get(k), min_inv.get(k), "" if capa_inv.get(k) == min_inv.get(k) else "<- DIFFERS"]
        for k in dict.fromkeys([*capa_inv, *min_inv])
    ]
    print(table(["resource", "capa", "minimal", ""], rows, align="lrrl"))
    verdict = (
        "the same resources" if create["sameResources"] else "NOT the same resources: the ratios are off"
    )
    print(f"  -> {verdict}")


def report_steady(figures: dict[str, Any]) -> None:
    steady = figures["steadyState"]
    calls = steady["calls"]
    section("2. API calls for a steady-state reconcile (capa apply again, the cluster already ready)")
    print(calls_table({"calls": calls["byOperation"]}))
    print()
    print(
        key_values(
            [
                ("calls", calls_text(calls)),
                ("reconciles", reconciles_text(steady["reconciles"])),
                (
                    "converge time",
                    f"{steady['convergeSeconds']:.2f} s (whole command {steady['wallSeconds']:.2f} s)",
                ),
            ]
        )
    )
    if calls["mutating"]:
        print(
            f"  NOTE: a steady-state reconcile should change nothing, yet it made {calls['mutating']} "
            "mutating calls"
        )


# -- figure 3: wall time -------------------------------------------------------------------------------------


def measure_time(
    env: MotoEnv, capa: Capa, work: Path, manifest: Path, repeat: int, throughput_calls: int
) -> tuple[dict[str, Any], Path]:
    """Returns the figures and the state file of the last capa run (whose cluster is left on the server)."""
    progress(f"figure 3: moto throughput ({throughput_calls} DescribeVpcs)")
    env.reset()
    reads = env.throughput(throughput_calls)
    capa_wall: list[float] = []
    capa_converge: list[float] = []
    capa_calls: list[dict[str, Any]] = []
    min_wall: list[float] = []
    min_api: list[float] = []
    min_calls: list[dict[str, Any]] = []
    state = work
    for i in range(1, repeat + 1):
        progress(f"figure 3: run {i}/{repeat}: minimal.py")
        env.reset()
        run, document = run_minimal(env.url, manifest)
        min_wall.append(run.wall)
        min_api.append(float(document["elapsedSeconds"]))
        min_calls.append(document["calls"])
        progress(f"figure 3: run {i}/{repeat}: capa apply")
        env.reset()
        state = work / f"timed-{i}" / "state.db"
        state.parent.mkdir(parents=True)
        run = capa.run(f"capa apply (timed run {i})", state, "apply")
        document = apply_document(run)
        capa_wall.append(run.wall)
        capa_converge.append(float(document["elapsedSeconds"]))
        capa_calls.append(document["awsCalls"])
    med = statistics.median
    mix_rate = med(c["total"] for c in min_calls) / med(min_api)
    capa_rate = med(c["total"] for c in capa_calls) / med(capa_converge)
    capa_reads = med(c["total"] - c["mutating"] for c in capa_calls)
    capa_mutating = med(c["mutating"] for c in capa_calls)
    server_estimate = capa_reads * reads["msPerCall"] / 1000 + capa_mutating / mix_rate
    figures = {
        "repeat": repeat,
        "capa": {
            "wallSeconds": stats(capa_wall),
            "convergeSeconds": stats(capa_converge),
            "startupSeconds": stats([w - c for w, c in zip(capa_wall, capa_converge, strict=True)]),
            "calls": [c["total"] for c in capa_calls],
            "mutatingCalls": [c["mutating"] for c in capa_calls],
        },
        "minimal": {
            "wallSeconds": stats(min_wall),
            "apiSeconds": stats(min_api),
            "startupSeconds": stats([w - a for w, a in zip(min_wall, min_api, strict=True)]),
            "calls": [c["total"] for c in min_calls],
            "mutatingCalls": [c["mutating"] for c in min_calls],
        },
        "ratio": {
            "wall": round(med(capa_wall) / med(min_wall), 3),
            "awsWork": round(med(capa_converge) / med(min_api), 3),
        },
        "throughput": {
            "describeVpcs": reads,
            "minimalCallsPerSecond": round(mix_rate, 1),
            "capaCallsPerSecond": round(capa_rate, 1),
            "capaServerSecondsEstimate": round(server_estimate, 3),
        },
    }
    return figures, state


def report_time(figures: dict[str, Any]) -> None:
    wall = figures["wallTime"]
    capa, minimal, rates = wall["capa"], wall["minimal"], wall["throughput"]
    section(f"3. Wall time: {wall['repeat']} run(s) each, the server reset and warmed up before every run")

    def row(label: str, s: dict[str, Any]) -> list[str]:
        return [label, f"{s['min']:.2f}", f"{s['median']:.2f}", runs_text(s["runs"])]

    print(
        table(
            ["seconds", "min", "median", "runs"],
            [
                row("capa apply: whole command", capa["wallSeconds"]),
                row("  converge (the AWS work)", capa["convergeSeconds"]),
                row("  the rest (start-up, imports, store, exit)", capa["startupSeconds"]),
                row("minimal.py: whole command", minimal["wallSeconds"]),
                row("  API calls", minimal["apiSeconds"]),
                row("  the rest (start-up, imports, exit)", minimal["startupSeconds"]),
            ],
            align="lrrl",
        )
    )
    print()
    print(
        table(
            ["capa / minimal, medians", ""],
            [
                ["whole command", f"{wall['ratio']['wall']:.2f}x"],
                ["AWS work (converge / API calls)", f"{wall['ratio']['awsWork']:.2f}x"],
            ],
        )
    )
    print()
    print(
        key_values(
            [
                ("calls per capa run", ", ".join(map(str, capa["calls"]))),
                ("calls per minimal run", ", ".join(map(str, minimal["calls"]))),
            ]
        )
    )
    reads = rates["describeVpcs"]
    print()
    print("moto's throughput, to tell server cost from client cost:")
    print(
        table(
            ["", "calls/s", "ms/call"],
            [
                [
                    f"DescribeVpcs, {reads['calls']} sequential calls from one client",
                    f"{reads['callsPerSecond']:.0f}",
                    f"{reads['msPerCall']:.1f}",
                ],
                [
                    "minimal.py's calls (mostly creates), sequential",
                    f"{rates['minimalCallsPerSecond']:.0f}",
                    f"{1000 / rates['minimalCallsPerSecond']:.1f}",
                ],
                [
                    "capa apply's calls over its converge time (4 workers)",
                    f"{rates['capaCallsPerSecond']:.0f}",
                    f"{1000 / rates['capaCallsPerSecond']:.1f}",
                ],
            ],
        )
    )
    print()
    print(
        f"  Server time estimate for one capa create: its reads at the DescribeVpcs cost plus its mutating\n"
        f"  calls at minimal.py's cost = {rates['capaServerSecondsEstimate']:.2f} s of the "
        f"{capa['convergeSeconds']['median']:.2f} s converge (median); the rest is capa-py's own work\n"
        f"  (reconcile logic, store writes, queueing) and any requeue delays."
    )


# -- figure 4: delete ----------------------------------------------------------------------------------------


def measure_delete(env: MotoEnv, capa: Capa, state: Path) -> dict[str, Any]:
    progress("figure 4: capa delete --wait")
    run = capa.probe("capa delete --wait", state, "delete")
    inventory = env.inventory()
    return {
        "wallSeconds": round(run.wall, 3),
        "calls": delete_calls(run),
        "reconciles": run.reconciles,
        "leftBehind": {k: v for k, v in inventory.items() if v and k not in MOTO_LEFTOVERS},
        "motoLeftovers": {k: inventory.get(k, 0) for k in MOTO_LEFTOVERS},
    }


def report_delete(figures: dict[str, Any]) -> None:
    delete = figures["delete"]
    calls = delete["calls"]
    section("4. capa delete --wait (the cluster of the last timed capa run)")
    print(calls_table({"calls": calls["byOperation"]}))
    print()
    print(
        key_values(
            [
                ("calls", calls_text(calls)),
                ("reconciles", reconciles_text(delete["reconciles"])),
                ("wall time", f"{delete['wallSeconds']:.2f} s (whole command, requeue delays included)"),
                (
                    "left behind on the server",
                    ", ".join(f"{k} {v}" for k, v in delete["leftBehind"].items()) or "nothing",
                ),
                (
                    "kept by moto, not by capa",
                    ", ".join(f"{k.rsplit(': ', 1)[-1]} {v}" for k, v in delete["motoLeftovers"].items())
                    + " (network interfaces AWS deletes with their owner)",
                ),
            ]
        )
    )


# -- main ----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each side (default 3)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument(
        "--manifest", type=Path, default=DEFAULT_MANIFEST, help="default: examples/aws-cluster-machines.yaml"
    )
    parser.add_argument("--no-delete", action="store_true", help="skip figure 4 (capa delete --wait)")
    parser.add_argument("--throughput-calls", type=int, default=100, metavar="N", help="default 100")
    parser.add_argument("--capa-timeout", default="90s", help="--timeout for each capa command (default 90s)")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.throughput_calls < 1:
        parser.error("--repeat and --throughput-calls must be at least 1")
    manifest = args.manifest.resolve()
    figures: dict[str, Any] = {}
    status = 0
    started = time.perf_counter()
    progress("starting a moto server on 127.0.0.1")
    env = MotoEnv.start()
    try:
        capa = Capa(env.url, manifest, args.capa_timeout)
        figures["environment"] = {
            "moto": moto.__version__,
            "python": platform.python_version(),
            "platform": f"{platform.system()} {platform.machine()}",
            "cpus": os.cpu_count(),
            "repeat": args.repeat,
            "manifest": str(manifest),
        }
        print("capa-py benchmark")
        print(
            key_values(
                [
                    ("AWS endpoint", f"one moto {moto.__version__} server on {env.url}, for every figure"),
                    (
                        "python",
                        f"{platform.python_version()} on {platform.system()} {platform.machine()}, "
                        f"{os.cpu_count()} CPUs",
                    ),
                    ("timed runs", args.repeat),
                ]
            )
        )
        with tempfile.TemporaryDirectory(prefix="capa-bench-") as tmp:
            work = Path(tmp)
            figures.update(measure_create(env, capa, work, manifest))
            report_create(figures, manifest)
            report_steady(figures)
            sys.stdout.flush()
            figures["wallTime"], state = measure_time(
                env, capa, work, manifest, args.repeat, args.throughput_calls
            )
            report_time(figures)
            sys.stdout.flush()
            if not args.no_delete:
                figures["delete"] = measure_delete(env, capa, state)
                report_delete(figures)
        if not figures["create"]["sameResources"]:
            print("\nerror: capa-py and minimal.py did not create the same resources", file=sys.stderr)
            status = 1
    except CommandFailed as exc:
        status = command_failed(exc, figures)
    finally:
        env.stop()
    return finish("benchmark", "bench", figures, time.perf_counter() - started, status, args.json)


if __name__ == "__main__":
    sys.exit(main())
