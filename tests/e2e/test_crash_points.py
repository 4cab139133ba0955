"""Crash consistency of ``capa apply``, at every point where AWS has acted and capa may not have recorded it.

A clean apply of the example cluster is measured first: how many mutating AWS calls succeed (the crash
points). Then, for every N from 1 to that count, on a reset moto server and a fresh store, ``capa apply``
runs through ``tests/harness/crashing_capa.py`` and is SIGKILLed right after its N-th successful mutating
call returns; a second, fault-free ``capa apply`` must then finish the job: exit 0, exactly one of every
resource (tagged with the cluster *and* in total — an untagged duplicate counts), and no tagged resource
that no AWSCluster/AWSMachine status records.

Every crash point is tested in one test (the count is only known at run time), in two lanes that each
reuse one moto server (reset between crash points); the failures of all crash points are reported
together, each with the call it crashed after.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from capa_py.runtime.leader import LEASE_DURATION_ENV
from tests.e2e.e2e_support import (
    EXAMPLE,
    Capa,
    MotoInspector,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
)
from tests.harness.faults import CRASH_AFTER_MUTATING, FAULT_LOG, TRACE_MUTATING
from tests.harness.moto_server import MotoServer, start_moto_server

LANES = 2
APPLY = ("apply", "-f", str(EXAMPLE), "--timeout", "2m", "-o", "json")


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _mutating_calls(by_operation: dict[str, int]) -> int:
    from capa_py.aws.accounting import is_mutating

    return sum(n for op, n in by_operation.items() if is_mutating(op.split(":", 1)[1]))


def _measure(capa: Capa, log: Path) -> tuple[int, list[str]]:
    """Successful mutating calls of a clean apply, and which operation each was (in order)."""
    run = capa.run(*APPLY, faults={TRACE_MUTATING: "1", FAULT_LOG: str(log)})
    assert run.returncode == 0, f"the clean apply that measures the crash points failed:\n{run}"
    calls = run.json()["awsCalls"]
    traced = [entry["mutating"] for entry in _read_log(log) if "mutating" in entry]
    from_json = _mutating_calls(calls["byOperation"])
    assert from_json == calls["mutating"], f"awsCalls.mutating disagrees with byOperation: {calls}"
    assert len(traced) == from_json, (
        f"a clean apply made {from_json} mutating calls (awsCalls.byOperation) but only {len(traced)} "
        f"succeeded: a clean apply should not have failing mutating calls: {calls}"
    )
    return len(traced), traced


def _crash_then_recover(
    n: int, server: MotoServer, workdir: Path, inspector: MotoInspector, baseline: dict[str, int]
) -> tuple[list[str], str]:
    """Problems after crashing at point ``n`` and applying again; and what the crash followed."""
    server.reset()
    workdir.mkdir()
    # The killed apply keeps the store lease until its duration passes: keep that wait short.
    capa = Capa(state=workdir / "state.db", endpoint=server.url, env_extra={LEASE_DURATION_ENV: "3"})
    log = workdir / "faults.jsonl"
    crashed = capa.run(*APPLY, faults={CRASH_AFTER_MUTATING: str(n), FAULT_LOG: str(log)})
    crash = next((entry for entry in _read_log(log) if entry.get("fault") == "crash"), None)
    after = crash["after"] if crash else "?"
    if crashed.returncode != -signal.SIGKILL or crash is None:
        return [f"the apply was not killed at its mutating call {n} (it never made it):\n{crashed}"], after
    recovered = capa.run(*APPLY)
    if recovered.returncode != 0:
        return [f"the apply after the crash did not converge:\n{recovered}"], after
    document = recovered.json()
    not_ready = {ref: state for ref, state in document["states"].items() if state != "ready"}
    problems = [f"not ready after recovery: {not_ready}"] if not_ready else []
    # The statuses as the recovering apply printed them (`-o json` prints the final objects, as
    # `capa get … -o json` would; reading them from there saves two processes per crash point).
    owners = [o for o in document["objects"] if o["kind"] in ("AWSCluster", "AWSMachine")]
    if len(owners) != 4:
        problems.append(f"apply -o json printed {len(owners)} AWSCluster/AWSMachine objects, expected 4")
    recorded = recorded_ids(owners)
    problems += problems_with_cluster(inspector.inventory(), expected_counts(), baseline, recorded)
    return problems, after


def _lanes() -> int:
    """Crash points run in this many lanes at once, each with its own moto server (a capa process
    mostly waits, on moto or on requeue delays)."""
    return max(1, min(LANES, os.cpu_count() or 1))


@pytest.mark.slow(minutes=4)
@pytest.mark.timeout(1200)
def test_apply_killed_after_every_mutating_call_recovers_to_exactly_one_of_everything(
    e2e_moto: MotoServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    e2e_moto.reset()
    servers = [e2e_moto]
    inspectors = [MotoInspector(e2e_moto.url)]
    try:
        baseline = inspectors[0].inventory().counts("total")
        clean = tmp_path / "clean"
        clean.mkdir()
        crash_points, operations = _measure(
            Capa(state=clean / "state.db", endpoint=e2e_moto.url), clean / "log"
        )
        assert crash_points > 0, "a clean apply made no mutating call"

        pending: queue.SimpleQueue[int] = queue.SimpleQueue()
        for n in range(1, crash_points + 1):
            pending.put(n)
        failures: dict[int, tuple[str, list[str]]] = {}
        tested: list[int] = []
        crashed_after: collections.Counter[str] = collections.Counter()
        lock = threading.Lock()

        def lane(server: MotoServer, inspector: MotoInspector) -> None:
            while True:
                try:
                    n = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    problems, after = _crash_then_recover(
                        n, server, tmp_path / f"crash-{n:03d}", inspector, baseline
                    )
                except Exception as exc:  # a harness failure at one point must not hide the others
                    problems, after = [f"{type(exc).__name__}: {exc}"], "?"
                with lock:
                    tested.append(n)
                    crashed_after[after] += 1
                    if problems:
                        failures[n] = (after, problems)

        started = time.monotonic()
        for _ in range(_lanes() - 1):
            servers.append(start_moto_server(load_default_amis=True))
            inspectors.append(MotoInspector(servers[-1].url))
        threads = [
            threading.Thread(target=lane, args=(server, inspector), name=f"crash-lane-{i}")
            for i, (server, inspector) in enumerate(zip(servers, inspectors, strict=True))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for inspector in inspectors:
            inspector.close()
        for server in servers[1:]:
            server.stop()

    with capsys.disabled():
        print(
            f"\ncrash points tested: {len(tested)} (a clean apply makes {crash_points} mutating calls) in "
            f"{len(servers)} lane(s), {time.monotonic() - started:.0f}s; recovered cleanly: "
            f"{len(tested) - len(failures)}; failed: {len(failures)}\n"
            f"  killed right after: {', '.join(f'{op} x{k}' for op, k in sorted(crashed_after.items()))}"
        )
    assert sorted(tested) == list(range(1, crash_points + 1)), (
        f"tested crash points {sorted(tested)}, a clean apply has {crash_points}"
    )
    assert not failures, (
        f"{len(failures)} of {len(tested)} crash points did not recover cleanly:\n"
        + "\n".join(
            f"- killed after mutating call {n} ({after}; in the clean run: {operations[n - 1]}):\n    "
            + "\n    ".join(problems)
            for n, (after, problems) in sorted(failures.items())
        )
    )
