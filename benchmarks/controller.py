"""capa-py controller benchmark: N clusters under one ``capa controller`` process, against one moto server.

    .venv/bin/python -m benchmarks.controller [--clusters N[,N...]] [--sync-period 60s] [--window 120s]
                                              [--settle 10s] [--store sqlite|kube|kube-apiserver]
                                              [--json PATH]

For each count of ``--clusters`` (default ``0,20,200``, in turn) it starts one moto server subprocess on
127.0.0.1 and one ``capa controller`` subprocess on a fresh store (``--sync-period`` as given, metrics on a
free loopback port, probes off): a SQLite file; with ``--store kube`` that file through ``capa serve`` and
a kubeconfig; with ``--store kube-apiserver`` a real etcd and kube-apiserver (the upstream peers that
``python -m tests.peers build`` builds from Go modules) with capa-py's CRDs and the admin kubeconfig. Then

1. applies N clusters at once (``capa apply --no-wait`` of a generated manifest: N copies of the example,
   each with its own names and its own VPC range) and waits until every AWSCluster and AWSMachine is ready:
   the time that took, and the AWS calls and reconciles the controller spent on it (from its ``/metrics``);
   0 clusters applies nothing (the controller idle on an empty store);
2. lets the controller run on the ready clusters for a measurement window (default two sync periods) and
   gives reconciles per minute by controller and AWS calls per minute, in total and by operation, mutating
   calls apart (a steady state should make none: printed, not asserted), and the calls of each resync
   burst;
3. reads the controller process's memory (VmRSS and VmHWM of /proc/PID/status) before the apply, once
   converged and at the end of the window, and the CPU time the controller, moto (and the store's server)
   used in each phase.

A summary table compares the counts. The report goes to stdout, progress to stderr. Nothing asserts a
time. Every process it starts is stopped on the way out, also on failure or Ctrl-C. See
``benchmarks/README.md`` for what each figure means.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import itertools
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
if __package__ in (None, ""):  # run by its path: the repository's root makes `benchmarks` importable
    sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from benchmarks.moto_env import MotoEnv  # noqa: E402
from benchmarks.run import environment, finish  # noqa: E402
from capa_app.cli.durations import parse_duration  # noqa: E402
from capa_py.api.aws import AWSCluster, AWSMachine  # noqa: E402
from capa_py.aws.accounting import is_mutating  # noqa: E402
from capa_py.store import ObjectStore, open_store  # noqa: E402

DEFAULT_TEMPLATE = REPO / "examples" / "aws-cluster-machines.yaml"
NAME_PREFIX = "bench"
POLL_SECONDS = 1.0
"""How often readiness is polled (read from the store file) while converging."""
MEMORY_SAMPLE_SECONDS = 5.0
BURST_SAMPLE_SECONDS = 1.0
STOP_SECONDS = 60.0
DEFAULT_COUNTS = "0,20,200"
STDERR_LIMIT = 6000


def progress(message: str) -> None:
    print(f"[controller-bench] {message}", file=sys.stderr, flush=True)


class BenchmarkFailed(RuntimeError):
    """A step that could not complete; the message says which and why."""


class Interrupted(BaseException):
    """SIGTERM received: unwound like Ctrl-C, so that every process is stopped."""


# -- the manifest: N copies of the example -------------------------------------------------------------------


def _template_name(documents: Sequence[Mapping[str, Any]]) -> str:
    for doc in documents:
        if doc.get("kind") == "Cluster":
            return str(doc["metadata"]["name"])
    raise ValueError("the template has no Cluster")


def _rename(value: Any, old: str, new: str) -> Any:
    """Every string equal to ``old`` or starting with ``old-`` (object names, references, labels) renamed."""
    if isinstance(value, dict):
        return {k: _rename(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rename(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(f"{old}-")):
        return new + value[len(old) :]
    return value


def _shift(cidr: str, offset: int) -> str:
    network = ipaddress.IPv4Network(cidr)
    return str(ipaddress.IPv4Network((int(network.network_address) + offset, network.prefixlen)))


def _vpc_range(documents: Sequence[Mapping[str, Any]]) -> ipaddress.IPv4Network:
    for doc in documents:
        if doc.get("kind") == "AWSCluster":
            return ipaddress.IPv4Network(doc["spec"]["network"]["vpc"]["cidrBlock"])
    raise ValueError("the template has no AWSCluster with spec.network.vpc.cidrBlock")


def max_clusters(template: Path = DEFAULT_TEMPLATE) -> int:
    """How many copies fit: consecutive VPC ranges of the template's size, within its private block."""
    vpc = _vpc_range(list(yaml.safe_load_all(template.read_text())))
    for block in map(ipaddress.IPv4Network, ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")):
        if vpc.subnet_of(block):
            return (int(block.broadcast_address) - int(vpc.network_address) + 1) // vpc.num_addresses
    return 1


def cluster_name(index: int) -> str:
    return f"{NAME_PREFIX}-{index:03d}"


def cluster_manifest(count: int, template: Path = DEFAULT_TEMPLATE) -> str:
    """``count`` copies of the template's cluster (every object of it), as one multi-document YAML.

    Copy ``i`` is named ``bench-<i>`` (every name and reference that was the template's cluster name, or
    started with it, is renamed) and its VPC and subnet ranges are the template's moved up by ``i`` VPC
    sizes, so no two clusters' VPCs overlap (10.0.0.0/16, 10.1.0.0/16, … for the example)."""
    documents = [d for d in yaml.safe_load_all(template.read_text()) if d]
    limit = max_clusters(template)
    if not 1 <= count <= limit:
        raise ValueError(f"between 1 and {limit} clusters fit the template's private address block")
    old = _template_name(documents)
    size = _vpc_range(documents).num_addresses
    out: list[dict[str, Any]] = []
    for index in range(count):
        for doc in documents:
            copy: dict[str, Any] = _rename(doc, old, cluster_name(index))
            network = copy.get("spec", {}).get("network") if copy.get("kind") == "AWSCluster" else None
            if network:
                network["vpc"]["cidrBlock"] = _shift(network["vpc"]["cidrBlock"], index * size)
                for subnet in network.get("subnets", []):
                    subnet["cidrBlock"] = _shift(subnet["cidrBlock"], index * size)
            out.append(copy)
    return yaml.safe_dump_all(out, sort_keys=False)


# -- processes -----------------------------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """No AWS_* settings of the user's: the controller can only reach the moto server. The checkout this
    benchmark belongs to comes first on the path: the ``capa`` console script would otherwise import the
    installed package, which may be another checkout (an editable install of a sibling worktree)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CAPA_"))}
    path = [str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "NO_COLOR": "1", "PYTHONPATH": os.pathsep.join(path)})
    return env


def capa_command() -> list[str]:
    beside = Path(sys.executable).parent / "capa"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "capa_app.cli"]


def run_capa(args: Sequence[str], timeout: float = 120.0) -> str:
    command = [*capa_command(), *args]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchmarkFailed(f"capa {' '.join(args)}: no answer within {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise BenchmarkFailed(
            f"capa {' '.join(args)}: exit status {done.returncode}\n{done.stderr[-STDERR_LIMIT:]}"
        )
    return done.stdout


class Background:
    """A long-running ``capa`` subprocess, its stdout lines collected as they come, its stderr to a file."""

    def __init__(self, name: str, args: Sequence[str], log: Path) -> None:
        self.name = name
        self.log = log
        self._stderr = log.open("w")
        self.process = subprocess.Popen(
            [*capa_command(), *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            env=child_env(),
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for_line(self, pattern: str, timeout: float) -> re.Match[str]:
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    found = compiled.search(line)
                    if found:
                        return found
                if self.process.poll() is not None and not self._reader.is_alive():
                    raise BenchmarkFailed(
                        f"capa {self.name} exited ({self.process.returncode})\n{self.tail()}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchmarkFailed(f"capa {self.name} never printed /{pattern}/\n{self.tail()}")
                self._changed.wait(min(left, 0.5))

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise BenchmarkFailed(f"capa {self.name} exited ({self.process.returncode})\n{self.tail()}")

    def tail(self) -> str:
        self._stderr.flush()
        text = self.log.read_text() if self.log.exists() else ""
        return f"its stderr (last {STDERR_LIMIT} characters):\n{text[-STDERR_LIMIT:]}"

    def stop(self) -> int | None:
        """SIGTERM, and SIGKILL if it has not exited after its graceful shutdown."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()
        return self.process.returncode


# -- what is measured ----------------------------------------------------------------------------------------


@dataclass
class Scrape:
    """One reading of the controller's ``/metrics``: the counters the figures need."""

    at: float
    reconciles: dict[tuple[str, str], float]
    """(controller, result) -> controller_runtime_reconcile_total"""
    aws: dict[str, float]
    """service:Operation -> aws_api_requests_total (every status code and error)"""
    aws_errors: dict[str, float]
    """error code -> aws_api_requests_total with that error_code"""
    sums: dict[str, float] = field(default_factory=dict)
    """``reconcile:<controller>``, ``queue:<queue>`` and ``aws`` -> the _sum of the histogram
    (controller_runtime_reconcile_time_seconds, workqueue_queue_duration_seconds,
    aws_api_request_duration_seconds)"""
    counts: dict[str, float] = field(default_factory=dict)
    """the same keys -> the histogram's _count"""


_HISTOGRAMS: dict[str, tuple[str, str | None]] = {
    "controller_runtime_reconcile_time_seconds": ("reconcile", "controller"),
    "workqueue_queue_duration_seconds": ("queue", "name"),
    "aws_api_request_duration_seconds": ("aws", None),
}


def scrape(url: str) -> Scrape:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except OSError as exc:
        raise BenchmarkFailed(f"cannot read the controller's metrics at {url}: {exc}") from exc
    at = time.monotonic()
    reconciles: dict[tuple[str, str], float] = {}
    aws: dict[str, float] = {}
    errors: dict[str, float] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            histogram = _HISTOGRAMS.get(sample.name.removesuffix("_sum").removesuffix("_count"))
            if histogram is not None and sample.name.endswith(("_sum", "_count")):
                prefix, label = histogram
                name = f"{prefix}:{labels.get(label, '')}" if label else prefix
                target = sums if sample.name.endswith("_sum") else counts
                target[name] = target.get(name, 0.0) + sample.value
            elif sample.name == "controller_runtime_reconcile_total":
                key = (labels.get("controller", ""), labels.get("result", ""))
                reconciles[key] = reconciles.get(key, 0.0) + sample.value
            elif sample.name == "aws_api_requests_total":
                op = f"{labels.get('service', '')}:{labels.get('operation', '')}"
                aws[op] = aws.get(op, 0.0) + sample.value
                if labels.get("error_code"):
                    errors[labels["error_code"]] = errors.get(labels["error_code"], 0.0) + sample.value
    return Scrape(at, reconciles, aws, errors, sums, counts)


def mean_seconds(new: Scrape, old: Scrape | None, key: str) -> float | None:
    """The mean of a histogram's observations between two readings (None when there were none)."""
    count = new.counts.get(key, 0.0) - (old.counts.get(key, 0.0) if old else 0.0)
    total = new.sums.get(key, 0.0) - (old.sums.get(key, 0.0) if old else 0.0)
    return round(total / count, 4) if count > 0 else None


def timing_figures(new: Scrape, old: Scrape | None) -> dict[str, Any]:
    """Mean reconcile time and mean wait in the queue, by controller; mean AWS request time."""
    controllers = sorted({k.split(":", 1)[1] for k in new.counts if k.startswith("reconcile:")})
    return {
        "byController": {
            c: {
                "reconcileSecondsMean": mean_seconds(new, old, f"reconcile:{c}"),
                "queueWaitSecondsMean": mean_seconds(new, old, f"queue:{c}"),
            }
            for c in controllers
        },
        "awsRequestSecondsMean": mean_seconds(new, old, "aws"),
    }


def _diff(new: Mapping[Any, float], old: Mapping[Any, float]) -> dict[Any, int]:
    return {k: round(v - old.get(k, 0.0)) for k, v in new.items() if round(v - old.get(k, 0.0))}


def mutating(operation: str) -> bool:
    return bool(is_mutating(operation.split(":", 1)[-1]))


def calls_figures(new: Scrape, old: Scrape | None) -> dict[str, Any]:
    by_operation = _diff(new.aws, old.aws if old else {})
    errors = _diff(new.aws_errors, old.aws_errors if old else {})
    return {
        "total": sum(by_operation.values()),
        "mutating": sum(n for op, n in by_operation.items() if mutating(op)),
        "byOperation": dict(sorted(by_operation.items())),
        "errors": dict(sorted(errors.items())),
    }


def reconcile_figures(new: Scrape, old: Scrape | None) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (controller, result), n in sorted(_diff(new.reconciles, old.reconciles if old else {}).items()):
        out.setdefault(controller, {})[result] = n
    return out


_STATUS_FIGURES = {
    "VmRSS": "rssKiB",
    "VmHWM": "peakRssKiB",
    "RssAnon": "anonKiB",
    "RssFile": "fileKiB",
    "Threads": "threads",
}


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process in KiB, the RSS split into anonymous memory (heap, stacks, malloc
    arenas) and mapped files (code, shared libraries), and its thread count (Linux /proc)."""
    figures: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in _STATUS_FIGURES:
                figures[_STATUS_FIGURES[key]] = int(value.split()[0])
    return figures


def breakdown_text(mem: Mapping[str, int]) -> str:
    if "threads" not in mem:
        return ""
    return f"; anonymous {mib(mem.get('anonKiB'))}, files {mib(mem.get('fileKiB'))}; {mem['threads']} threads"


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time a process has used so far (Linux /proc), in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_readings(pids: Mapping[str, int]) -> dict[str, float | None]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def cpu_figures(
    new: Mapping[str, float | None], old: Mapping[str, float | None], seconds: float
) -> dict[str, dict[str, float]]:
    """CPU seconds each process used between two readings, and its share of one core over that time."""
    out: dict[str, dict[str, float]] = {}
    for name, value in new.items():
        before = old.get(name)
        if value is not None and before is not None and seconds > 0:
            used = value - before
            out[name] = {"cpuSeconds": round(used, 1), "coreShare": round(used / seconds, 3)}
    return out


def cpu_text(cpu: Mapping[str, Mapping[str, float]]) -> str:
    return ", ".join(
        f"{name} {c['cpuSeconds']:.1f} s ({100 * c['coreShare']:.0f}% of a core)" for name, c in cpu.items()
    )


def not_ready(store: ObjectStore) -> dict[str, int]:
    """How many AWSClusters and AWSMachines there are, and how many are not ready yet. Read from the store
    file in this process: a ``capa get`` per poll would cost a CPU-second that the controller then lacks."""
    clusters = store.list(AWSCluster)
    machines = store.list(AWSMachine)
    return {
        "awsclusters": len(clusters),
        "awsclustersNotReady": sum(not o.status.ready for o in clusters),
        "awsmachines": len(machines),
        "awsmachinesNotReady": sum(not o.status.ready for o in machines),
    }


# -- report formatting ---------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> str:
    """Columns three spaces apart; the first left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[["" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        indent
        + "   ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in cells
    )


def section(title: str) -> None:
    print()
    print(title)
    print("=" * len(title))


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def mib(kib: int | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f} MiB"


def per_minute(count: float, seconds: float) -> float:
    return round(count * 60.0 / seconds, 1) if seconds > 0 else 0.0


def report_converge(figures: dict[str, Any]) -> None:
    conv = figures["converge"]
    calls = conv["calls"]
    clusters = figures["clusters"]
    section(f"1. {clusters} clusters applied at once: time to ready, AWS calls, reconciles")
    if not clusters:
        idle = figures.get("startupMemory", {})
        print(f"  no cluster applied: the controller idle on an empty store, RSS {mib(idle.get('rssKiB'))}")
        return
    print(
        f"  all {conv['awsclusters']} AWSClusters and {conv['awsmachines']} AWSMachines ready "
        f"{conv['seconds']:.1f} s after `capa apply --no-wait` returned (polled every {POLL_SECONDS:g} s)"
    )
    print(
        f"  AWS calls: {calls['total']} ({calls['mutating']} mutating, {calls['total'] - calls['mutating']} "
        f"reads); per cluster {calls['total'] / clusters:.1f} ({calls['mutating'] / clusters:.1f} mutating)"
    )
    if calls["errors"]:
        print("  calls answered with an error: " + ", ".join(f"{k} {v}" for k, v in calls["errors"].items()))
    timing = conv["timing"]["byController"]
    rows = [[c, sum(r.values()), r.get("success", 0), r.get("requeue", 0) + r.get("requeue_after", 0),
             r.get("error", 0), seconds_text(timing.get(c, {}).get("reconcileSecondsMean")),
             seconds_text(timing.get(c, {}).get("queueWaitSecondsMean"))]
            for c, r in conv["reconciles"].items()]  # fmt: skip
    print()
    headers = ["reconciles by controller", "total", "success", "requeue", "error", "mean time", "mean wait"]
    print(table(headers, rows))
    print(
        "  (mean time: of one reconcile; mean wait: in the work queue, from due to taken by a worker; "
        f"mean AWS request: {seconds_text(conv['timing']['awsRequestSecondsMean'])})"
    )
    print()
    print(operations_table(calls["byOperation"], None))
    mem = conv["memory"]
    print()
    idle = figures.get("startupMemory", {})
    print(
        f"  controller memory once converged: RSS {mib(mem.get('rssKiB'))}, "
        f"peak {mib(mem.get('peakRssKiB'))} (RSS {mib(idle.get('rssKiB'))} before the apply, with no object"
        f"{breakdown_text(idle)}){breakdown_text(mem)}"
    )
    serve_memory_line("once converged", conv)
    print(f"  CPU used while converging: {cpu_text(conv['cpu'])}")


def operations_table(by_operation: Mapping[str, int], seconds: float | None) -> str:
    operations = sorted(by_operation, key=lambda op: (not mutating(op), op))
    headers = ["AWS calls by operation", "mutating", "calls"] + (["per minute"] if seconds else [])
    rows: list[list[Any]] = [
        [op, "yes" if mutating(op) else "", by_operation[op]]
        + ([f"{per_minute(by_operation[op], seconds):.1f}"] if seconds else [])
        for op in operations
    ]
    total = sum(by_operation.values())
    rows.append(["total", "", total] + ([f"{per_minute(total, seconds):.1f}"] if seconds else []))
    return table(headers, rows)


def report_steady(figures: dict[str, Any]) -> None:
    steady = figures["steadyState"]
    seconds = steady["windowSeconds"]
    calls = steady["calls"]
    section(
        f"2. Steady state: {seconds:.0f} s with every cluster ready (sync period "
        f"{figures['syncPeriodSeconds']:g} s)"
    )
    reconciles, resync = steady["reconciles"], steady["resyncPerMinute"]
    timing = steady["timing"]["byController"]
    rows = [
        [c, sum(reconciles.get(c, {}).values()), f"{steady['reconcilesPerMinute'].get(c, 0.0):.1f}",
         f"{resync.get(c, 0.0):.1f}", seconds_text(timing.get(c, {}).get("reconcileSecondsMean"))]
        for c in dict.fromkeys([*resync, *reconciles])
    ]  # fmt: skip
    total = sum(sum(r.values()) for r in steady["reconciles"].values())
    rows.append(
        [
            "total",
            total,
            f"{per_minute(total, seconds):.1f}",
            f"{sum(steady['resyncPerMinute'].values()):.1f}",
            "",
        ]
    )
    headers = ["reconciles", "in window", "per minute", "resync alone would be", "mean time"]
    print(table(headers, rows))
    print()
    if calls["byOperation"]:
        print(operations_table(calls["byOperation"], seconds))
    else:
        print("  no AWS call in the window")
    print()
    print(
        f"  AWS calls per minute: {steady['awsCallsPerMinute']:.1f} in total, "
        f"{steady['mutatingCallsPerMinute']:.1f} mutating ({calls['mutating']} mutating calls in the window)"
    )
    resync = steady.get("callsPerResync")
    if resync:
        print(
            f"  AWS calls per resync (the window's calls over its {resync['resyncsInWindow']:g} sync "
            f"periods): {resync['total']:.1f} in total, {per_cluster_text(resync['perCluster'])}, "
            f"{resync['mutating']:.1f} mutating, {resync['operations']} operations"
        )
        if resync["byOperation"]:
            rows = [[op, f"{n:.1f}"] for op, n in sorted(resync["byOperation"].items(), key=lambda i: -i[1])]
            print(table(["calls per resync, by operation", "calls"], rows))
    bursts = steady.get("resyncBursts")
    if bursts:
        if bursts["complete"]:
            print(
                f"  AWS calls per resync burst (the window's {bursts['complete']} complete bursts): "
                f"{bursts['meanCalls']:.1f} on average, {per_cluster_text(bursts['perCluster'])}; each: "
                + ", ".join(str(c) for c in bursts["callsPerBurst"])
            )
        elif not bursts["bursts"]:
            print("  AWS calls per resync burst: none, no AWS call in the window")
        else:
            print("  AWS calls per resync burst: no complete burst in the window (make it longer)")
        if bursts["partialCalls"]:
            cut = ", ".join(str(c) for c in bursts["partialCalls"])
            print(f"  calls of bursts cut by the window's edges: {cut}")
    if calls["errors"]:
        print("  calls answered with an error: " + ", ".join(f"{k} {v}" for k, v in calls["errors"].items()))
    mem = steady["memory"]
    print(
        f"  controller memory at the end of the window: RSS {mib(mem.get('rssKiB'))}, peak "
        f"{mib(mem.get('peakRssKiB'))} (highest RSS sampled in the window {mib(mem.get('windowMaxRssKiB'))})"
        f"{breakdown_text(mem)}"
    )
    serve_memory_line("at the end of the window", steady)
    print(f"  CPU used in the window: {cpu_text(steady['cpu'])}")
    per_resync = steady.get("controllerCpuSecondsPerResync")
    if per_resync is not None:
        print(f"  controller CPU per resync (the window's over its sync periods): {per_resync:.2f} s")


def per_cluster_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} per cluster"


def serve_memory_line(when: str, figures: Mapping[str, Any]) -> None:
    for name, serve in figures.get("serverMemory", {}).items():
        print(f"  {name} memory {when}: RSS {mib(serve.get('rssKiB'))}, peak {mib(serve.get('peakRssKiB'))}")


# -- the benchmark -------------------------------------------------------------------------------------------


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises :class:`Interrupted`, SIGINT KeyboardInterrupt (even when started with SIGINT ignored,
    as a background job is), so that both unwind through the code that stops the processes."""
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_interrupted),
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def wait_until_ready(
    store: ObjectStore, controller: Background, deadline: float, timeout: float
) -> dict[str, int]:
    """Poll until every AWSCluster and AWSMachine is ready; the last counts. Progress when they change."""
    shown: dict[str, int] = {}
    while True:
        controller.check_alive()
        counts = not_ready(store)
        if counts["awsclusters"] and not counts["awsclustersNotReady"] + counts["awsmachinesNotReady"]:
            return counts
        if time.monotonic() > deadline:
            raise BenchmarkFailed(f"not converged after {timeout:.0f} s: {counts}\n{controller.tail()}")
        if counts != shown:
            progress(
                f"  {counts['awsclustersNotReady']}/{counts['awsclusters']} AWSClusters and "
                f"{counts['awsmachinesNotReady']}/{counts['awsmachines']} AWSMachines not ready yet"
            )
            shown = counts
        time.sleep(POLL_SECONDS)


STORES = {
    "sqlite": "the SQLite store (--state)",
    "kube": "the kube store (--kubeconfig) through capa serve",
    "kube-apiserver": "the kube store (--kubeconfig) on a real kube-apiserver and etcd",
}


@dataclass
class StoreSetup:
    """How every capa command of the run reaches the store, and the processes serving it (measured beside
    the controller)."""

    args: list[str]
    servers: dict[str, int] = field(default_factory=dict)
    """name -> pid of each process serving the store (none for SQLite)"""
    check_alive: Callable[[], None] = lambda: None
    open_reader: Callable[[], ObjectStore] | None = None
    """A store this process reads readiness from (the SQLite file unless set)."""


def start_store(kind: str, work: Path, state: Path, stack: contextlib.ExitStack) -> StoreSetup:
    """The global options that select the store for every capa command, and the processes serving it:
    ``capa serve`` on the SQLite file for ``kube``; etcd and kube-apiserver (the upstream peers built from
    Go modules, ``python -m tests.peers build``) for ``kube-apiserver``. capa-py's CRDs are applied to
    either."""
    if kind == "sqlite":
        return StoreSetup(["--state", str(state)])
    if kind == "kube-apiserver":
        return start_kube_apiserver(work, stack)
    kubeconfig = work / "capa.kubeconfig"
    progress("starting capa serve (the store over the Kubernetes API)")
    serve = Background(
        "serve",
        ["--state", str(state), "serve", "--port", "0", "--write-kubeconfig", str(kubeconfig)],
        work / "serve.stderr",
    )
    stack.callback(stop_process, serve, "capa serve")
    serve.wait_for_line(r"kubeconfig written to", timeout=60)
    crds = work / "crds.yaml"
    crds.write_text(run_capa(["manifests", "crds"]))
    run_capa(["--kubeconfig", str(kubeconfig), "apply", "-f", str(crds), "--no-wait"])
    return StoreSetup(["--kubeconfig", str(kubeconfig)], {"serve": serve.pid}, serve.check_alive)


def start_kube_apiserver(work: Path, stack: contextlib.ExitStack) -> StoreSetup:
    """etcd and kube-apiserver on loopback (no controller-manager: nothing here needs one), capa-py's CRDs
    Established, and the admin kubeconfig (system:masters) for the controller and the benchmark."""
    from capa_py.store.kube import KubeStore
    from tests.peers.build import GoMissing
    from tests.peers.cluster import PeerCluster, start
    from tests.peers.crds import install_capa_crds

    progress("starting etcd and kube-apiserver (the upstream peers)")
    try:
        cluster: PeerCluster = start(work / "peers", controller_manager=False)
    except (GoMissing, RuntimeError, OSError) as exc:
        raise BenchmarkFailed(f"the real kube-apiserver could not start: {exc}") from exc
    stack.callback(stop_peers, cluster)
    install_capa_crds(cluster)
    processes = {name: cluster.processes[name] for name in ("kube-apiserver", "etcd")}

    def check_alive() -> None:
        for name, process in processes.items():
            if process.poll() is not None:
                raise BenchmarkFailed(f"{name} exited ({process.returncode})")

    kubeconfig = cluster.admin_kubeconfig
    return StoreSetup(
        ["--kubeconfig", str(kubeconfig)],
        {name: process.pid for name, process in processes.items()},
        check_alive,
        lambda: KubeStore.from_kubeconfig(kubeconfig),
    )


def stop_peers(cluster: Any) -> None:
    progress("stopping kube-apiserver and etcd")
    cluster.stop()


def stop_process(process: Background, what: str) -> None:
    progress(f"stopping {what}")
    process.stop()


def measure(
    args: argparse.Namespace, clusters: int, work: Path, endpoint: str, moto_pid: int, figures: dict[str, Any]
) -> None:
    with contextlib.ExitStack() as stack:
        _measure(args, clusters, work, endpoint, moto_pid, figures, stack)


def _measure(
    args: argparse.Namespace,
    clusters: int,
    work: Path,
    endpoint: str,
    moto_pid: int,
    figures: dict[str, Any],
    stack: contextlib.ExitStack,
) -> None:
    state = work / "state.db"
    manifest = work / "clusters.yaml"
    if clusters:
        manifest.write_text(cluster_manifest(clusters, args.template))
    store = start_store(args.store, work, state, stack)

    def server_memory() -> dict[str, dict[str, dict[str, int]]]:
        return {"serverMemory": {n: memory(pid) for n, pid in store.servers.items()}} if store.servers else {}

    progress(f"starting capa controller (sync period {args.sync_period})")
    controller = Background(
        "controller",
        [
            *store.args, "controller", "--aws-endpoint", endpoint,
            "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0",
            "--sync-period", args.sync_period, "--graceful-shutdown-timeout", "10s",
        ],
        work / "controller.stderr",
    )  # fmt: skip
    stack.callback(lambda: figures.__setitem__("controllerExitStatus", controller.process.returncode))
    stack.callback(stop_process, controller, "capa controller")
    metrics_url = controller.wait_for_line(r"metrics: (http://\S+/metrics)", timeout=60).group(1)
    controller.wait_for_line(r"controllers running:", timeout=60)
    before = scrape(metrics_url)
    figures["startupMemory"] = memory(controller.pid)
    pids = {"controller": controller.pid, "moto": moto_pid, **store.servers}

    applied = time.monotonic()
    cpu_applied = cpu_readings(pids)
    counts = dict.fromkeys(("awsclusters", "awsclustersNotReady", "awsmachines", "awsmachinesNotReady"), 0)
    if clusters:
        progress(f"applying {clusters} clusters (capa apply --no-wait)")
        run_capa([*store.args, "apply", "-f", str(manifest), "--no-wait"], timeout=600.0)
        applied = time.monotonic()
        cpu_applied = cpu_readings(pids)
        # Readiness is read from the SQLite file (capa serve keeps its objects there) or the API server.
        reader = store.open_reader() if store.open_reader else open_store(state, create=False)
        try:
            counts = wait_until_ready(
                reader, controller, applied + args.converge_timeout, args.converge_timeout
            )
        finally:
            reader.close()
    converged_at = time.monotonic()
    converged = scrape(metrics_url)
    cpu_converged = cpu_readings(pids)
    figures["converge"] = {
        "seconds": round(converged_at - applied, 1),
        "awsclusters": counts["awsclusters"],
        "awsmachines": counts["awsmachines"],
        "calls": calls_figures(converged, before),
        "reconciles": reconcile_figures(converged, before),
        "timing": timing_figures(converged, before),
        "memory": memory(controller.pid),
        **server_memory(),
        "cpu": cpu_figures(cpu_converged, cpu_applied, converged_at - applied),
    }
    report_converge(figures)
    sys.stdout.flush()

    if args.settle > 0:
        progress(f"settling for {args.settle:g} s")
        time.sleep(args.settle)
    progress(f"steady state: measuring for {args.window:g} s")
    start = scrape(metrics_url)
    cpu_start = cpu_readings(pids)
    window_max = 0
    end_at = start.at + args.window
    samples = [(start.at, float(sum(start.aws.values())))]
    next_memory = start.at
    while (left := end_at - time.monotonic()) > 0:
        time.sleep(min(BURST_SAMPLE_SECONDS, left))
        controller.check_alive()
        store.check_alive()
        reading = scrape(metrics_url)
        samples.append((reading.at, float(sum(reading.aws.values()))))
        if reading.at >= next_memory:
            window_max = max(window_max, memory(controller.pid).get("rssKiB", 0))
            next_memory = reading.at + MEMORY_SAMPLE_SECONDS
    end = scrape(metrics_url)
    samples.append((end.at, float(sum(end.aws.values()))))
    cpu_end = cpu_readings(pids)
    seconds = end.at - start.at
    calls = calls_figures(end, start)
    reconciles = reconcile_figures(end, start)
    mem = memory(controller.pid)
    mem["windowMaxRssKiB"] = max(window_max, mem.get("rssKiB", 0))
    cpu = cpu_figures(cpu_end, cpu_start, seconds)
    figures["steadyState"] = {
        "windowSeconds": round(seconds, 1),
        "reconciles": reconciles,
        "reconcilesPerMinute": {c: per_minute(sum(r.values()), seconds) for c, r in reconciles.items()},
        "timing": timing_figures(end, start),
        "resyncPerMinute": resync_rates(manifest if clusters else None, args.sync_seconds),
        "calls": calls,
        "awsCallsPerMinute": per_minute(calls["total"], seconds),
        "mutatingCallsPerMinute": per_minute(calls["mutating"], seconds),
        "awsCallsPerMinuteByOperation": {
            op: per_minute(n, seconds) for op, n in calls["byOperation"].items()
        },
        "callsPerResync": per_resync(calls, seconds, args.sync_seconds, clusters),
        "resyncBursts": burst_figures(call_bursts(samples, quiet_gap(args.sync_seconds)), clusters),
        "memory": mem,
        **server_memory(),
        "cpu": cpu,
        "controllerCpuSecondsPerResync": cpu_per_resync(cpu, seconds, args.sync_seconds),
    }
    report_steady(figures)
    sys.stdout.flush()


@dataclass(frozen=True)
class Burst:
    """A run of AWS calls with no quiet gap inside: one resync of every object, as the controller made it."""

    start: float
    end: float
    calls: float
    complete: bool
    """False when the burst touches the window's first or last reading (it may go on outside)."""


def cpu_per_resync(
    cpu: Mapping[str, Mapping[str, float]], window: float, sync_seconds: float
) -> float | None:
    """The controller's CPU seconds in the window spread over the sync periods it holds: what one resync
    of every object costs it (None without a periodic resync)."""
    used = cpu.get("controller", {}).get("cpuSeconds")
    if used is None or sync_seconds <= 0 or window <= 0:
        return None
    return round(used * sync_seconds / window, 2)


def quiet_gap(sync_seconds: float) -> float:
    """The pause in calls that separates two resync bursts: a quarter of the sync period, at least 2 s."""
    return max(2.0, sync_seconds / 4) if sync_seconds > 0 else 2.0


def call_bursts(samples: Sequence[tuple[float, float]], gap: float) -> list[Burst]:
    """The bursts in readings ``(time, calls so far)``: calls seen between consecutive readings are one
    burst until ``gap`` seconds or more pass without a call. A burst is complete when the window shows a
    quiet ``gap`` before it and after it."""
    if not samples:
        return []
    bursts: list[Burst] = []
    start = end = calls = 0.0
    open_burst = starts_inside = False
    last_call_at = float("-inf")
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        made = c1 - c0
        if made <= 0:
            continue
        if open_burst and t0 - last_call_at >= gap:
            bursts.append(Burst(start, end, calls, starts_inside))
            open_burst = False
        if not open_burst:
            open_burst, start, calls = True, t0, 0.0
            starts_inside = t0 - samples[0][0] >= gap
        end = t1
        calls += made
        last_call_at = t1
    if open_burst:
        bursts.append(Burst(start, end, calls, starts_inside and samples[-1][0] - last_call_at >= gap))
    return bursts


def burst_figures(bursts: Sequence[Burst], clusters: int) -> dict[str, Any]:
    """Calls per resync as the window's complete bursts show them (partial ones are counted apart)."""
    complete = [b.calls for b in bursts if b.complete]
    return {
        "bursts": len(bursts),
        "complete": len(complete),
        "callsPerBurst": [round(c) for c in complete],
        "meanCalls": round(sum(complete) / len(complete), 1) if complete else None,
        "perCluster": round(sum(complete) / len(complete) / clusters, 2) if complete and clusters else None,
        "partialCalls": [round(b.calls) for b in bursts if not b.complete],
    }


def per_resync(
    calls: Mapping[str, Any], window: float, sync_seconds: float, clusters: int
) -> dict[str, Any] | None:
    """The window's calls spread over the resyncs it holds (window / sync period): what one resync of every
    object costs, in total, by operation and per cluster. None without a periodic resync."""
    if sync_seconds <= 0 or window <= 0:
        return None
    resyncs = window / sync_seconds
    return {
        "resyncsInWindow": round(resyncs, 2),
        "total": round(calls["total"] / resyncs, 1),
        "mutating": round(calls["mutating"] / resyncs, 1),
        "perCluster": round(calls["total"] / resyncs / clusters, 2) if clusters else None,
        "byOperation": {op: round(n / resyncs, 1) for op, n in calls["byOperation"].items()},
        "operations": len(calls["byOperation"]),
    }


def resync_rates(manifest: Path | None, sync_seconds: float) -> dict[str, float]:
    """Reconciles per minute the resync alone makes: every object once per sync period, per controller
    (none without a manifest: no cluster applied)."""
    if manifest is None:
        return {}
    kinds = {
        "Cluster": "cluster",
        "Machine": "machine",
        "AWSCluster": "awscluster",
        "AWSMachine": "awsmachine",
    }
    counts: dict[str, int] = {}
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc and doc.get("kind") in kinds:
            counts[kinds[doc["kind"]]] = counts.get(kinds[doc["kind"]], 0) + 1
    if sync_seconds <= 0:
        return dict.fromkeys(counts, 0.0)
    return {c: per_minute(n, sync_seconds) for c, n in sorted(counts.items())}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Reconciles and AWS calls per minute, and memory, of one capa controller process "
        "running N clusters against a local moto server."
    )
    parser.add_argument(
        "--clusters",
        default=DEFAULT_COUNTS,
        metavar="N[,N...]",
        help=f"clusters to apply, or a list of counts run in turn, each on a fresh moto server and store "
        f"(default {DEFAULT_COUNTS}; 0: the controller idle on an empty store)",
    )
    parser.add_argument(
        "--sync-period",
        default="60s",
        metavar="DURATION",
        help="the controller's --sync-period (default 60s)",
    )
    parser.add_argument(
        "--window",
        metavar="DURATION",
        help="steady-state measurement window (default: two sync periods, 2m with the default)",
    )
    parser.add_argument(
        "--settle",
        default="10s",
        metavar="DURATION",
        help="wait after convergence before the window starts (default 10s)",
    )
    parser.add_argument(
        "--converge-timeout", default="10m", metavar="DURATION", help="give up converging after (default 10m)"
    )
    parser.add_argument(
        "--store",
        choices=tuple(STORES),
        default="sqlite",
        help="sqlite: the controller on the SQLite file (default); kube: through capa serve and a "
        "kubeconfig; kube-apiserver: on a real kube-apiserver and etcd (the upstream peers)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument(
        "--template",
        type=Path,
        default=DEFAULT_TEMPLATE,
        metavar="FILE",
        help="the cluster to copy (default examples/aws-cluster-machines.yaml)",
    )
    args = parser.parse_args(argv)
    try:
        args.sync_seconds = parse_duration(args.sync_period)
        args.window = parse_duration(args.window) if args.window else 2 * args.sync_seconds
        args.settle = parse_duration(args.settle)
        args.converge_timeout = parse_duration(args.converge_timeout)
    except ValueError as exc:
        parser.error(str(exc))
    if args.window <= 0:
        parser.error("--window must be positive (a --sync-period of 0 needs an explicit --window)")
    limit = max_clusters(args.template)
    try:
        args.counts = cluster_counts(args.clusters, limit)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def cluster_counts(text: str, limit: int) -> list[int]:
    """``"0,20,200"`` -> ``[0, 20, 200]``, each between 0 and ``limit``."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or not all(0 <= n <= limit for n in counts):
        raise ValueError(f"--clusters must be counts between 0 and {limit}, separated by commas: {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    started = time.monotonic()
    figures: dict[str, Any] = {
        "counts": args.counts,
        "syncPeriodSeconds": args.sync_seconds,
        "environment": environment(store=args.store),
        "runs": [],
    }
    print("capa-py controller benchmark")
    print(
        f"  {', '.join(map(str, args.counts))} clusters in turn, each a copy of {args.template.name}, "
        "each count on a fresh moto server and store"
    )
    print(
        f"  python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"  capa controller --sync-period {args.sync_period}, on {STORES[args.store]}")
    status = 0
    with sigterm_unwinds():
        for clusters in args.counts:
            run: dict[str, Any] = {"clusters": clusters, "syncPeriodSeconds": args.sync_seconds}
            figures["runs"].append(run)
            status = run_count(args, clusters, run)
            if status:
                break
    report_summary(figures["runs"], args.sync_seconds)
    return finish(
        "controller benchmark", "controller-bench", figures, time.monotonic() - started, status, args.json
    )


def run_count(args: argparse.Namespace, clusters: int, figures: dict[str, Any]) -> int:
    """One count: a fresh moto server and store, the controller measured on them; the exit status."""
    started = time.monotonic()
    env: MotoEnv | None = None
    status = 0
    try:
        progress(f"{clusters} clusters: starting a moto server on 127.0.0.1")
        env = MotoEnv.start()
        print()
        print(f"# {clusters} clusters (moto server on {env.url})")
        with tempfile.TemporaryDirectory(prefix="capa-controller-bench-") as tmp:
            measure(args, clusters, Path(tmp), env.url, env.server.process.pid, figures)
    except BenchmarkFailed as exc:
        sys.stdout.flush()
        print(f"\nerror: {exc}", file=sys.stderr)
        figures["error"] = str(exc).splitlines()[0]
        status = 1
    except (KeyboardInterrupt, Interrupted):
        sys.stdout.flush()
        print("\ninterrupted", file=sys.stderr)
        figures["error"] = "interrupted"
        status = 130
    finally:
        if env is not None:
            env.stop()
    figures["seconds"] = round(time.monotonic() - started, 1)
    return status


def summary_row(run: Mapping[str, Any], sync_seconds: float) -> list[Any]:
    conv = run.get("converge", {})
    steady = run.get("steadyState", {})
    bursts = steady.get("resyncBursts") or {}
    resync = steady.get("callsPerResync") or {}
    mem = steady.get("memory", {})
    per_resync = steady.get("controllerCpuSecondsPerResync")
    return [
        run["clusters"],
        f"{conv['seconds']:.0f} s" if conv and run["clusters"] else "-",
        conv.get("calls", {}).get("total", "-") if conv else "-",
        "-" if bursts.get("meanCalls") is None else f"{bursts['meanCalls']:.1f}",
        "-" if not resync else f"{resync['total']:.1f}",
        mib(run.get("startupMemory", {}).get("rssKiB")),
        mib(conv.get("memory", {}).get("rssKiB")) if conv else "-",
        mib(mem.get("rssKiB")),
        "-" if per_resync is None else f"{per_resync:.2f} s",
        f"{run.get('seconds', 0):.0f} s",
    ]


def report_summary(runs: Sequence[Mapping[str, Any]], sync_seconds: float) -> None:
    """One line per count: what the issue asks to compare across 0, 20 and 200 clusters."""
    section("Summary")
    headers = [
        "clusters", "to ready", "calls to ready", "calls/burst", "calls/resync", "RSS idle",
        "RSS converged", "RSS end", "CPU/resync", "run took",
    ]  # fmt: skip
    print(table(headers, [summary_row(run, sync_seconds) for run in runs]))
    print(
        "  (calls/burst: the mean of the window's complete resync bursts; calls/resync: the window's calls "
        f"over its {sync_seconds:g} s sync periods; CPU/resync: the controller's, the same way)"
    )
    failed = [f"{r['clusters']}: {r['error']}" for r in runs if r.get("error")]
    if failed:
        print("  failed: " + "; ".join(failed))


if __name__ == "__main__":
    sys.exit(main())
