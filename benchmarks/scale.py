"""capa-py benchmark: client start-up, N clusters in one ``capa apply``, and applying one cluster among N.

    .venv/bin/python -m benchmarks.scale [--figure startup|clusters|apply-one ...] [--clusters 1,5,20]
                                         [--repeat N] [--quick] [--json PATH]

Starts one moto server subprocess on 127.0.0.1 (moto's bundled AMIs loaded) and measures:

* ``startup``: how long a client takes from process start to its first AWS call — ``capa apply`` and
  ``benchmarks/minimal.py``, both run through ``benchmarks/first_call.py``, which ends the process at that
  call — next to the interpreter alone and the imports alone;
* ``clusters``: for each N, N copies of the example cluster (distinct names and VPC ranges, as
  ``benchmarks/controller.py`` makes them) applied with one ``capa apply`` on a reset server and a fresh
  state file: AWS calls (total, mutating, per cluster), wall and converge time, the capa process's CPU
  (user + system, from ``os.wait4``) in total and per cluster, its peak memory (``ru_maxrss``), moto's CPU;
* ``apply-one``: with the largest N stored and ready, one more cluster's file applied: its calls, time and
  reconciles, next to the same file applied into an empty store on a reset server.

The report goes to stdout, progress to stderr; nothing asserts a time. Exit status 0, or 1 when a command
fails (its stderr is printed). See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

if __package__ in (None, ""):  # run by its path: the repository's root makes `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.controller import cluster_manifest, cpu_seconds, max_clusters
from benchmarks.moto_env import MotoEnv
from benchmarks.run import (
    BENCH,
    DEFAULT_MANIFEST,
    CommandFailed,
    calls_table,
    child_env,
    command_failed,
    environment,
    finish,
    key_values,
    section,
    table,
)

FIGURES = ("startup", "clusters", "apply-one")
DEFAULT_CLUSTERS = (1, 5, 20)
QUICK_CLUSTERS = (1, 2)
PROCESS_TIMEOUT = 1200.0


def progress(message: str) -> None:
    print(f"[scale] {message}", file=sys.stderr, flush=True)


# -- processes -----------------------------------------------------------------------------------------------


@dataclass
class Finished:
    """A process run to its end: wall time, CPU and peak memory from ``os.wait4``, its output."""

    wall: float
    user: float
    system: float
    max_rss_kib: int
    stdout: str
    stderr: str


def run_measured(what: str, command: Sequence[str], timeout: float = PROCESS_TIMEOUT) -> Finished:
    """Run ``command``; its own resource usage comes from ``wait4`` on its pid (not the children total)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen(
            list(command), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=child_env(), text=True
        )
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                process.kill()
                os.wait4(process.pid, 0)
                raise CommandFailed(f"{what}: no answer within {timeout:.0f} s", None, "")
            time.sleep(0.01)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if process.returncode != 0:
        raise CommandFailed(f"{what}: exit status {process.returncode}", process.returncode, stderr)
    return Finished(wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss, stdout, stderr)


def stats(values: Sequence[float]) -> dict[str, Any]:
    return {
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "runs": [round(v, 4) for v in values],
    }


# -- start-up ------------------------------------------------------------------------------------------------


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


IMPORTS = {
    "interpreter alone (python -c pass)": _python("pass"),
    "import capa_app.cli.main": _python("import capa_app.cli.main"),
    "import capa-py's AWS layer, its ec2 and elbv2 clients": _python(
        "from capa_py.aws.session import AWSClients, AWSSettings; "
        "c = AWSClients(AWSSettings(region='us-east-1', endpoint_url='http://127.0.0.1:9')); c.ec2; c.elbv2"
    ),
    "import boto3": _python("import boto3"),
    "import boto3, an ec2 and an elbv2 client": _python(
        "import boto3; s = boto3.session.Session(region_name='us-east-1', aws_access_key_id='x', "
        "aws_secret_access_key='x'); s.client('ec2'); s.client('elbv2')"
    ),
}


def first_call_seconds(what: str, command: Sequence[str], out: Path) -> tuple[float, str]:
    """Seconds from just before the process is started to its first AWS call, and that call's name."""
    out.unlink(missing_ok=True)
    started = time.time()
    run_measured(what, [sys.executable, str(BENCH / "first_call.py"), str(out), *command], timeout=120)
    if not out.exists():
        raise CommandFailed(f"{what}: made no AWS call", 0, "")
    noted = json.loads(out.read_text())
    return float(noted["firstCallAt"]) - started, str(noted["operation"])


def measure_startup(env: MotoEnv, work: Path, manifest: Path, repeat: int) -> dict[str, Any]:
    out = work / "startup" / "first-call.json"
    out.parent.mkdir(parents=True)
    minimal = [
        "script",
        str(BENCH / "minimal.py"),
        "--endpoint",
        env.url,
        "--manifest",
        str(manifest),
        "--json",
    ]
    first: dict[str, list[float]] = {"capa": [], "minimal": []}
    operation: dict[str, str] = {}
    imports: dict[str, list[float]] = {name: [] for name in IMPORTS}
    for i in range(1, repeat + 1):
        progress(f"start-up: run {i}/{repeat}")
        state = work / "startup" / f"run-{i}" / "state.db"  # a fresh store each time
        state.parent.mkdir()
        capa = [
            "capa",
            "--state",
            str(state),
            "apply",
            "-f",
            str(manifest),
            "--aws-endpoint",
            env.url,
            "-o",
            "json",
        ]
        for side, command in (("minimal", minimal), ("capa", capa)):
            seconds, operation[side] = first_call_seconds(f"{side} until its first call", command, out)
            first[side].append(seconds)
        for name, command in IMPORTS.items():
            imports[name].append(run_measured(name, command, timeout=120).wall)
    med = statistics.median
    return {
        "repeat": repeat,
        "firstCall": {
            side: {"seconds": stats(first[side]), "operation": operation[side]}
            for side in ("capa", "minimal")
        },
        "ratio": round(med(first["capa"]) / med(first["minimal"]), 3),
        "processSeconds": {name: stats(values) for name, values in imports.items()},
    }


def report_startup(figures: dict[str, Any]) -> None:
    startup = figures["startup"]
    section(f"A. Client start-up: process start to the first AWS call ({startup['repeat']} runs each)")
    first = startup["firstCall"]

    def row(label: str, s: dict[str, Any], extra: str = "") -> list[str]:
        return [label, f"{s['min']:.3f}", f"{s['median']:.3f}", extra]

    rows = [
        row("capa apply, until its first call", first["capa"]["seconds"], first["capa"]["operation"]),
        row("minimal.py, until its first call", first["minimal"]["seconds"], first["minimal"]["operation"]),
        *[row(f"whole process: {name}", s) for name, s in startup["processSeconds"].items()],
    ]
    print(table(["seconds", "min", "median", "first call"], rows, align="lrrl"))
    print()
    print(f"  capa / minimal (medians, until the first call): {startup['ratio']:.2f}x")


# -- N clusters in one apply ---------------------------------------------------------------------------------


class Capa:
    """``capa apply`` runs through ``capa_probe.py`` (the console script's function, plus the reconcile
    counts), each a new process against the moto server."""

    def __init__(self, url: str, timeout: str) -> None:
        self.url = url
        self.timeout = timeout

    def apply(self, what: str, state: Path, manifest: Path) -> dict[str, Any]:
        out = state.parent / f"reconciles-{time.monotonic_ns()}.json"
        command = [
            sys.executable, str(BENCH / "capa_probe.py"), str(out),
            "--state", str(state), "apply", "-f", str(manifest), "--aws-endpoint", self.url,
            "-o", "json", "--timeout", self.timeout,
        ]  # fmt: skip
        done = run_measured(what, command)
        try:
            document: dict[str, Any] = json.loads(done.stdout)
        except json.JSONDecodeError as exc:
            raise CommandFailed(f"{what}: printed no JSON document", 0, done.stderr) from exc
        states = document.get("states", {})
        return {
            "calls": document["awsCalls"],
            "wallSeconds": round(done.wall, 3),
            "convergeSeconds": document.get("elapsedSeconds"),
            "cpu": {
                "userSeconds": round(done.user, 3),
                "systemSeconds": round(done.system, 3),
                "totalSeconds": round(done.user + done.system, 3),
            },
            "peakRssKiB": done.max_rss_kib,
            "reconciles": json.loads(out.read_text()) if out.exists() else None,
            "objects": len(states),
            "ready": sum(s == "ready" for s in states.values()),
            "converged": document.get("converged"),
        }


def measure_clusters(
    env: MotoEnv, capa: Capa, work: Path, template: Path, counts: Sequence[int]
) -> tuple[list[dict[str, Any]], Path | None]:
    """One apply per N; returns the figures and the state file of the largest N (its clusters are left on
    the server, ready)."""
    results: list[dict[str, Any]] = []
    last_state: Path | None = None
    for n in counts:
        progress(f"clusters: {n} in one capa apply")
        env.reset()
        state = work / f"clusters-{n}" / "state.db"
        state.parent.mkdir(parents=True)
        manifest = state.parent / "clusters.yaml"
        manifest.write_text(cluster_manifest(n, template))
        moto_before = cpu_seconds(env.server.process.pid)
        figures = capa.apply(f"capa apply ({n} clusters)", state, manifest)
        moto_after = cpu_seconds(env.server.process.pid)
        calls = figures["calls"]
        figures.update(
            clusters=n,
            callsPerCluster=round(calls["total"] / n, 1),
            mutatingPerCluster=round(calls["mutating"] / n, 1),
            cpuSecondsPerCluster=round(figures["cpu"]["totalSeconds"] / n, 3),
            motoCpuSeconds=(
                round(moto_after - moto_before, 2)
                if moto_after is not None and moto_before is not None
                else None
            ),
        )
        results.append(figures)
        last_state = state
    return results, last_state


def mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.0f} MiB"


def report_clusters(figures: dict[str, Any]) -> None:
    runs = figures["clusters"]
    section("B. N clusters in one capa apply (a reset server and a fresh state file for each N)")
    rows = [
        [
            r["clusters"],
            r["calls"]["total"],
            r["calls"]["mutating"],
            f"{r['callsPerCluster']:.1f}",
            f"{r['wallSeconds']:.1f}",
            f"{r['convergeSeconds']:.1f}" if r["convergeSeconds"] is not None else "-",
            f"{r['cpu']['totalSeconds']:.1f}",
            f"{r['cpuSecondsPerCluster']:.2f}",
            mib(r["peakRssKiB"]),
            "-" if r["motoCpuSeconds"] is None else f"{r['motoCpuSeconds']:.1f}",
            f"{r['ready']}/{r['objects']}",
        ]
        for r in runs
    ]
    headers = ["N", "calls", "mutating", "calls/cluster", "wall s", "converge s", "CPU s", "CPU s/cluster",
               "peak RSS", "moto CPU s", "ready"]  # fmt: skip
    print(table(headers, rows))
    print("  (CPU: user + system of the capa process; peak RSS: its ru_maxrss; moto CPU: the server's)")
    if len(runs) > 1:
        first, last = runs[0], runs[-1]
        print(
            f"  N={last['clusters']} against N={first['clusters']}, per cluster: CPU "
            f"{_x(_ratio(last['cpuSecondsPerCluster'], first['cpuSecondsPerCluster']))}, calls "
            f"{_x(_ratio(last['callsPerCluster'], first['callsPerCluster']))} (the issue's target: flat)"
        )
    if runs:
        print()
        print("Calls by operation:")
        print(calls_table({f"N={r['clusters']}": r["calls"]["byOperation"] for r in runs}))


# -- one more cluster among N --------------------------------------------------------------------------------


def one_cluster_file(template: Path, index: int, path: Path) -> str:
    """Copy ``index`` of the template's cluster alone (the same names and ranges as in a manifest of
    ``index + 1`` copies), written to ``path``; returns its cluster name."""
    per_cluster = len([d for d in yaml.safe_load_all(template.read_text()) if d])
    documents = list(yaml.safe_load_all(cluster_manifest(index + 1, template)))[-per_cluster:]
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return str(next(d["metadata"]["name"] for d in documents if d["kind"] == "Cluster"))


def measure_apply_one(
    env: MotoEnv, capa: Capa, work: Path, template: Path, stored: int, state: Path | None
) -> dict[str, Any]:
    if state is None:
        progress(f"apply-one: storing {stored} clusters first")
        _, state = measure_clusters(env, capa, work / "apply-one", template, [stored])
        assert state is not None
    one = work / "one-cluster.yaml"
    name = one_cluster_file(template, stored, one)
    progress(f"apply-one: {name} into the store of {stored} ready clusters")
    into_stored = capa.apply(f"capa apply ({name}, {stored} stored)", state, one)
    progress(f"apply-one: {name} into an empty store, on a reset server")
    env.reset()
    empty = work / "apply-one-empty" / "state.db"
    empty.parent.mkdir(parents=True)
    into_empty = capa.apply(f"capa apply ({name}, nothing stored)", empty, one)

    def ratio(key: str, get: Any) -> float | None:
        a, b = get(into_stored), get(into_empty)
        return round(a / b, 3) if a is not None and b else None

    return {
        "stored": stored,
        "cluster": name,
        "intoStored": into_stored,
        "intoEmpty": into_empty,
        "ratio": {
            "calls": ratio("calls", lambda f: f["calls"]["total"]),
            "wall": ratio("wall", lambda f: f["wallSeconds"]),
            "cpu": ratio("cpu", lambda f: f["cpu"]["totalSeconds"]),
        },
    }


def reconciles_text(reconciles: dict[str, int] | None) -> str:
    if reconciles is None:
        return "unknown"
    return (
        f"{sum(reconciles.values())} (" + ", ".join(f"{k} {v}" for k, v in sorted(reconciles.items())) + ")"
    )


def report_apply_one(figures: dict[str, Any]) -> None:
    one = figures["applyOne"]
    stored, empty = one["intoStored"], one["intoEmpty"]
    section(
        f"C. Applying one cluster's file ({one['cluster']}) with {one['stored']} clusters stored and ready"
    )
    rows = [
        ["AWS calls", stored["calls"]["total"], empty["calls"]["total"], _x(one["ratio"]["calls"])],
        ["mutating calls", stored["calls"]["mutating"], empty["calls"]["mutating"], ""],
        ["wall seconds", f"{stored['wallSeconds']:.1f}", f"{empty['wallSeconds']:.1f}",
         _x(one["ratio"]["wall"])],
        ["capa CPU seconds", f"{stored['cpu']['totalSeconds']:.1f}", f"{empty['cpu']['totalSeconds']:.1f}",
         _x(one["ratio"]["cpu"])],
        ["objects in the answer", stored["objects"], empty["objects"], ""],
    ]  # fmt: skip
    print(table(["", f"{one['stored']} stored", "empty store", "ratio"], rows))
    print()
    print(
        key_values(
            [
                (f"reconciles, {one['stored']} stored", reconciles_text(stored["reconciles"])),
                ("reconciles, empty store", reconciles_text(empty["reconciles"])),
            ]
        )
    )
    print()
    print("Calls by operation:")
    print(calls_table({"stored": stored["calls"]["byOperation"], "empty": empty["calls"]["byOperation"]}))


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


# -- main ----------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--figure",
        action="append",
        choices=FIGURES,
        help="measure only this figure (repeatable; default: all three)",
    )
    parser.add_argument(
        "--clusters", default=None, metavar="N,N,...", help="cluster counts for 'clusters' (default 1,5,20)"
    )
    parser.add_argument("--repeat", type=int, default=None, help="start-up runs of each side (default 5)")
    parser.add_argument(
        "--quick", action="store_true", help="small figures for a quick look: --clusters 1,2 --repeat 2"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument("--template", type=Path, default=DEFAULT_MANIFEST, help="default: the example")
    parser.add_argument("--capa-timeout", default="15m", help="--timeout of each capa apply (default 15m)")
    args = parser.parse_args(argv)
    args.figures = tuple(f for f in FIGURES if f in (args.figure or FIGURES))
    try:
        counts = (
            tuple(int(n) for n in args.clusters.split(","))
            if args.clusters
            else (QUICK_CLUSTERS if args.quick else DEFAULT_CLUSTERS)
        )
    except ValueError:
        parser.error("--clusters takes comma-separated numbers, e.g. 1,5,20")
    limit = max_clusters(args.template) - 1  # one more copy is applied by apply-one
    if not counts or not all(1 <= n <= limit for n in counts):
        parser.error(f"--clusters must be between 1 and {limit}")
    args.counts = counts
    args.repeat = args.repeat if args.repeat is not None else (2 if args.quick else 5)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.template = args.template.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    figures: dict[str, Any] = {
        "environment": environment(figures=list(args.figures), template=str(args.template))
    }
    status = 0
    progress("starting a moto server on 127.0.0.1")
    env = MotoEnv.start()
    try:
        print("capa-py scale benchmark")
        print(f"  one moto server on {env.url}; python {platform.python_version()}, {os.cpu_count()} CPUs")
        capa = Capa(env.url, args.capa_timeout)
        with tempfile.TemporaryDirectory(prefix="capa-scale-") as tmp:
            work = Path(tmp)
            if "startup" in args.figures:
                env.reset()
                figures["startup"] = measure_startup(env, work, args.template, args.repeat)
                report_startup(figures)
                sys.stdout.flush()
            state = None
            if "clusters" in args.figures:
                figures["clusters"], state = measure_clusters(env, capa, work, args.template, args.counts)
                report_clusters(figures)
                sys.stdout.flush()
            if "apply-one" in args.figures:
                stored = max(args.counts)
                figures["applyOne"] = measure_apply_one(env, capa, work, args.template, stored, state)
                report_apply_one(figures)
    except CommandFailed as exc:
        status = command_failed(exc, figures)
    finally:
        env.stop()
    return finish("scale benchmark", "scale", figures, time.perf_counter() - started, status, args.json)


if __name__ == "__main__":
    sys.exit(main())
