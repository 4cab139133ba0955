"""What the SQLite store costs at 10k objects: selector lists, indexed and by full scan; get, list, create.

Run: ``.venv/bin/python -m benchmarks.store [--objects N] [--repeat N] [--json PATH]``. Prints medians (and
the fastest run) of each operation; asserts nothing. No AWS, no server: one store file in a temp directory.

The store holds ``--objects`` Clusters (10000 by default) in one namespace, labelled so that a selector
matches 1 (``bench/id=42``), 100 (``bench/group=g7``) or every object (``bench/all=yes``), and one selector
joins the broadest and the narrowest requirement. Each label list is timed twice:

* **indexed** — ``store.list(Cluster, label_selector=...)``: the label index finds the rows;
* **scan** — what a list did before the index: read every Cluster's document, ``json.loads`` it, match the
  selector in Python, validate the matches (the same code path the store still takes for a field selector
  on an unindexed field, which this runs through a separate read-only connection).

Then ``get`` of one object, ``list`` of every object, a create into the full store, the owner-uid lookup
(``metadata.ownerReferences.uid=<uid>``) against the same scan, and — the measurement behind how the store
hands out independent objects — per example kind, ``model_copy(deep=True)`` of a parsed object against
validating its stored JSON again.

Last, **watch latency across processes**: another process creates Clusters one by one, each stamped with
the time it was written, while this one watches; the figure is how long each took to arrive. And the **idle
cost**: CPU time a process watching five kinds of an unchanging store uses in ten seconds, per minute.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import yaml  # noqa: E402

from capa_py.api import Cluster  # noqa: E402
from capa_py.api.meta import KubeObject  # noqa: E402
from capa_py.api.registry import REGISTRY  # noqa: E402
from capa_py.logging import configure_logging  # noqa: E402
from capa_py.store import LabelSelector, SQLiteStore  # noqa: E402

EXAMPLE = Path(_ROOT) / "examples" / "aws-cluster-machines.yaml"
NAMESPACE = "bench"
_ROUNDS = 200  # copies (or validations) per timed run of the copy figure


def timed(action: Callable[[], object], repeat: int) -> list[float]:
    samples: list[float] = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return samples


def figure(samples: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(samples) * 1000, "min_ms": min(samples) * 1000}


def show(label: str, samples: list[float], note: str = "") -> dict[str, float]:
    result = figure(samples)
    print(f"  {label:<44} median {result['median_ms']:9.3f} ms   min {result['min_ms']:9.3f} ms  {note}")
    return result


def populate(store: SQLiteStore, count: int) -> Cluster:
    owner = store.create(Cluster.model_validate({"metadata": {"name": "owner", "namespace": NAMESPACE}}))
    for index in range(count):
        cluster = Cluster.model_validate(
            {
                "metadata": {
                    "name": f"c-{index:05d}",
                    "namespace": NAMESPACE,
                    "labels": {"bench/all": "yes", "bench/group": f"g{index % 100}", "bench/id": str(index)},
                }
            }
        )
        if index == 42:
            cluster.metadata.owner_references = [owner.owner_reference(controller=True)]
        store.create(cluster)
    return owner


def scan_list(path: Path, selector: str) -> list[Cluster]:
    """The list as the store made it before the label index: every document parsed, then filtered."""
    parsed = LabelSelector.parse(selector)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT doc FROM objects WHERE api_version=? AND kind=? AND namespace=? ORDER BY namespace, name",
            (Cluster.API_VERSION, Cluster.KIND, NAMESPACE),
        ).fetchall()
    finally:
        conn.close()
    found: list[Cluster] = []
    for (text,) in rows:
        doc = json.loads(text)
        if parsed.matches(doc.get("metadata", {}).get("labels", {})):
            found.append(Cluster.model_validate(doc))
    return found


def _copies(obj: KubeObject) -> None:
    for _ in range(_ROUNDS):
        obj.model_copy(deep=True)


def _validations(model: type[KubeObject], text: str) -> None:
    for _ in range(_ROUNDS):
        model.model_validate_json(text)


def copy_or_validate(store: SQLiteStore, repeat: int) -> dict[str, dict[str, float]]:
    """Per kind of the example manifest: deep-copying a parsed object vs validating its JSON again."""
    results: dict[str, dict[str, float]] = {}
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        if not doc or doc["kind"] in results:
            continue
        model = REGISTRY.for_gvk(doc["apiVersion"], doc["kind"])
        doc["metadata"]["namespace"] = "copy-bench"
        obj = store.create(model.model_validate(doc))
        text = json.dumps(obj.to_dict())
        copy_s = timed(partial(_copies, obj), repeat)
        validate_s = timed(partial(_validations, model, text), repeat)
        copy_us = statistics.median(copy_s) / _ROUNDS * 1e6
        validate_us = statistics.median(validate_s) / _ROUNDS * 1e6
        print(
            f"  {doc['kind']:<14} model_copy(deep=True) {copy_us:7.1f} us   "
            f"model_validate_json {validate_us:7.1f} us   ({len(text)} bytes)"
        )
        results[doc["kind"]] = {"deep_copy_us": copy_us, "validate_json_us": validate_us}
    return results


WATCH_WRITES = 100
WATCH_GAP = 0.02  # seconds between two of the writer's creates
IDLE_SECONDS = 10.0


def stamped_writes(path: str, count: int, gap: float) -> None:
    """Another process: create ``count`` Clusters, each stamped with the wall-clock time of its write."""
    with SQLiteStore(path) as store:
        for i in range(count):
            time.sleep(gap)
            cluster = {"metadata": {"name": f"w-{i}", "namespace": "watch", "annotations": {}}}
            cluster["metadata"]["annotations"]["bench/written-at"] = repr(time.time())  # type: ignore[index]
            store.create(Cluster.model_validate(cluster))


def idle_watcher(path: str, seconds: float, result: Any) -> None:
    """Another process: watch five kinds of a store nobody writes for ``seconds``; report its CPU time."""
    from capa_py.api import AWSCluster, AWSMachine, Machine, Secret

    with SQLiteStore(path) as store:
        stop = threading.Event()
        threads = [
            threading.Thread(target=lambda k=kind: list(store.watch(k, resource_version="1", stop=stop)))
            for kind in (Cluster, Machine, AWSCluster, AWSMachine, Secret)
        ]
        for thread in threads:
            thread.start()
        time.sleep(1.0)  # settled: every watch has read the table once
        before = os.times()
        time.sleep(seconds)
        after = os.times()
        stop.set()
        for thread in threads:
            thread.join()
    result.put((after.user - before.user) + (after.system - before.system))


def watch_figures(tmp: Path) -> dict[str, Any]:
    """Cross-process watch latency and a watcher's idle CPU (see the module's docstring)."""
    spawn = multiprocessing.get_context("spawn")
    path = tmp / "watch.db"
    figures: dict[str, Any] = {}
    with SQLiteStore(path) as store:
        start = store.current_resource_version()
        writer = spawn.Process(target=stamped_writes, args=(str(path), WATCH_WRITES, WATCH_GAP))
        writer.start()
        latencies: list[float] = []
        for event in store.watch(Cluster, "watch", resource_version=start, timeout=120):
            written = float(event.object.metadata.annotations["bench/written-at"])
            latencies.append(time.time() - written)
            if len(latencies) == WATCH_WRITES:
                break
        writer.join(60)
        listening = store.change_signal().listening
    how = "signalled" if listening else "polled (no change signal here)"
    print(f"watch latency across processes ({WATCH_WRITES} creates {WATCH_GAP * 1000:.0f} ms apart, {how})")
    latencies.sort()
    figures["watch_latency_ms"] = {
        "p50": round(statistics.median(latencies) * 1000, 2),
        "p99": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
        "max": round(latencies[-1] * 1000, 2),
        "signalled": listening,
    }
    lat = figures["watch_latency_ms"]
    print(f"  p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, max {lat['max']:.2f} ms")
    result = spawn.Queue()
    idle = spawn.Process(target=idle_watcher, args=(str(path), IDLE_SECONDS, result))
    idle.start()
    cpu = result.get(timeout=120)
    idle.join(60)
    figures["idle_watch_cpu_seconds_per_minute"] = round(cpu * 60 / IDLE_SECONDS, 3)
    print(
        f"  a process watching 5 kinds of an unchanging store: {cpu * 60 / IDLE_SECONDS:.3f} CPU-seconds "
        "per minute"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write the figures to this file as JSON")
    args = parser.parse_args()
    configure_logging()
    report: dict[str, Any] = {"objects": args.objects}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        with SQLiteStore(path) as store:
            print(f"populating {args.objects} Clusters ...", file=sys.stderr)
            started = time.perf_counter()
            owner = populate(store, args.objects)
            print(f"  populated in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            print(f"SQLite store, {args.objects} Clusters in one namespace ({args.repeat} runs each)")
            print("label selector lists: indexed vs full scan")
            lists: dict[str, Any] = {}
            for selector, expected in (
                ("bench/id=42", 1),
                ("bench/group=g7", args.objects // 100),
                ("bench/all=yes", args.objects),
                ("bench/all=yes,bench/id=42", 1),
            ):
                found = store.list(Cluster, NAMESPACE, label_selector=selector)
                scanned = scan_list(path, selector)
                if [c.name for c in found] != [c.name for c in scanned] or len(found) != expected:
                    raise SystemExit(f"{selector}: the index and the scan disagree")
                repeat = args.repeat if expected < args.objects else max(3, args.repeat // 4)
                lists[selector] = {
                    "matching": expected,
                    "indexed": show(
                        f"{selector} ({expected} match) indexed",
                        timed(partial(store.list, Cluster, NAMESPACE, label_selector=selector), repeat),
                    ),
                    "scan": show(
                        f"{selector} ({expected} match) scan",
                        timed(partial(scan_list, path, selector), max(3, repeat // 4)),
                    ),
                }
            report["label_lists"] = lists
            print("owner and field lookups")
            owner_selector = f"metadata.ownerReferences.uid={owner.metadata.uid}"
            report["owner_uid_list"] = show(
                "metadata.ownerReferences.uid (1 match)",
                timed(lambda: store.list(Cluster, NAMESPACE, field_selector=owner_selector), args.repeat),
            )
            by_name = "metadata.name=c-00042"
            report["name_field_list"] = show(
                by_name, timed(lambda: store.list(Cluster, NAMESPACE, field_selector=by_name), args.repeat)
            )
            report["unindexed_field_list"] = show(
                "spec.paused=true (unindexed: scans)",
                timed(lambda: store.list(Cluster, NAMESPACE, field_selector="spec.paused=true"), 3),
            )
            print("other operations")
            report["get"] = show(
                "get one Cluster", timed(lambda: store.get(Cluster, "c-00042", NAMESPACE), args.repeat * 10)
            )
            report["list_all"] = show(
                f"list all {args.objects + 1} Clusters", timed(lambda: store.list(Cluster, NAMESPACE), 3)
            )
            counter = iter(range(10**9))

            def create_one() -> None:
                index = next(counter)
                store.create(
                    Cluster.model_validate(
                        {
                            "metadata": {
                                "name": f"new-{index}",
                                "namespace": NAMESPACE,
                                "labels": {"bench/all": "yes", "bench/group": f"g{index % 100}"},
                            }
                        }
                    )
                )

            report["create"] = show("create one Cluster (3 labels)", timed(create_one, args.repeat * 10))
            print("independent copies: deep copy of a parsed object vs validating the stored JSON")
            report["copy_or_validate"] = copy_or_validate(store, 5)
        report["watch"] = watch_figures(Path(tmp))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
