"""One reconciler per store through the real CLI: concurrent applies, a held, a killed and a lost lease.

Every ``capa`` here is a subprocess on the test's moto server with its own store file, run through the
fault wrapper (with no fault unless one is named) so that it runs this checkout's code; the lease is read
from the store file directly, as another process would.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from capa_py.api.coordination import Lease, now_micro
from capa_py.runtime.leader import LEASE_DURATION_ENV, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE
from capa_py.store import Conflict, NotFound, SQLiteStore
from tests.e2e.e2e_support import (
    CRASHING_CAPA,
    EXAMPLE,
    Capa,
    MotoInspector,
    Run,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
    wait_for,
)
from tests.harness.faults import CRASH_AFTER_MUTATING, FAIL_OP
from tests.harness.moto_server import MotoServer

pytestmark = pytest.mark.slow(minutes=2)

APPLY = ("apply", "-f", str(EXAMPLE), "--timeout", "3m", "-o", "json")
# Every CreateVpc answered as throttled: the apply holds the lease and keeps retrying, creating nothing.
STUCK = {FAIL_OP: "CreateVpc:RequestLimitExceeded"}
HOLDER_TIMEOUT = 120.0  # safety bound on waits for another process, never the expected duration


def start(capa: Capa, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """``capa --state … ARGS --aws-endpoint …`` in the background (through the fault wrapper)."""
    argv = ["--state", str(capa.state), *args, "--aws-endpoint", str(capa.endpoint)]
    return subprocess.Popen(
        [sys.executable, *CRASHING_CAPA, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=capa.env(env),
        cwd=capa.state.parent,
        stdin=subprocess.DEVNULL,
    )


def finish(process: subprocess.Popen[str], args: tuple[str, ...], timeout: float = 300.0) -> Run:
    stdout, stderr = process.communicate(timeout=timeout)
    return Run(list(args), process.returncode, stdout, stderr, 0.0)


def read_lease(state: Path) -> Lease | None:
    with SQLiteStore(state) as store:
        try:
            return store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE)
        except NotFound:
            return None


def renew_now(state: Path) -> None:
    """Set the lease's renewTime to now, as its holder's renewal would, leaving the holder as it is."""
    with SQLiteStore(state) as store:
        while True:
            lease = store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE)
            spec = lease.spec.model_copy(update={"renew_time": now_micro()})
            try:
                store.update(lease.model_copy(update={"spec": spec}))
                return
            except Conflict:
                continue


def held_by(state: Path, pid: int) -> bool:
    lease = read_lease(state)
    return lease is not None and lease.holder.startswith(f"capa apply pid {pid} on ")


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.communicate(timeout=HOLDER_TIMEOUT)


def test_two_concurrent_applies_on_one_store_make_exactly_one_of_everything(
    e2e_moto: MotoServer, tmp_path: Path
) -> None:
    expected = expected_counts()
    waits = 0
    for attempt in range(3):
        e2e_moto.reset()
        workdir = tmp_path / f"attempt-{attempt}"
        workdir.mkdir()
        capa = Capa(state=workdir / "state.db", endpoint=e2e_moto.url)
        inspector = MotoInspector(e2e_moto.url)
        try:
            baseline = inspector.inventory().counts("total")
            processes = [start(capa, *APPLY) for _ in range(2)]
            runs = [finish(p, APPLY) for p in processes]
            waits += sum("waiting for the store lease held by capa apply pid " in r.stderr for r in runs)
            for run in runs:
                assert run.returncode == 0, f"attempt {attempt}: a concurrent apply failed:\n{run}"
                assert run.json()["converged"] is True, f"attempt {attempt}: not converged:\n{run}"
            recorded = recorded_ids(capa.get("awsclusters") + capa.get("awsmachines"))
            problems = problems_with_cluster(inspector.inventory(), expected, baseline, recorded)
            assert not problems, f"attempt {attempt}, two concurrent applies:\n" + "\n".join(problems)
        finally:
            inspector.close()
        audit = capa.run("audit", "--aws-endpoint", e2e_moto.url, faults={})
        assert audit.returncode == 0, f"attempt {attempt}: the audit found leaks:\n{audit}"
        lease = read_lease(capa.state)
        assert lease is not None, "the applies ran controllers without a lease"
        assert lease.holder == "", f"the lease was not released: {lease.to_dict()}"
    # Started together, the second apply reaches the lease while the first converges (seconds): at least
    # once in three attempts it must have waited, or the attempts did not overlap and proved nothing.
    assert waits >= 1, "in no attempt did one apply wait for the other's lease"


def test_with_no_wait_for_lock_apply_and_delete_exit_1_naming_the_holder(capa: Capa) -> None:
    holder = start(capa, *APPLY, env=STUCK)
    try:
        assert wait_for(lambda: held_by(capa.state, holder.pid), timeout=HOLDER_TIMEOUT), (
            f"the first apply never took the store lease: {read_lease(capa.state)}"
        )
        expected = f"held by capa apply pid {holder.pid} on "
        for args in (
            (*APPLY, "--no-wait-for-lock"),
            ("delete", "-f", str(EXAMPLE), "--wait", "--timeout", "1m", "--no-wait-for-lock"),
        ):
            refused = capa.run(*args, faults={})
            assert refused.returncode == 1, f"expected exit 1 while the lease is held:\n{refused}"
            assert (
                "error: the store lease capa-py-system/capa-py-controller is " + expected in refused.stderr
            ), f"the refusal should name the holder:\n{refused}"
            assert "renewed " in refused.stderr, refused
            assert held_by(capa.state, holder.pid), "a refused command took or released the lease"
        assert holder.poll() is None, "the holder exited while it should still be reconciling"
    finally:
        stop(holder)


def test_a_holder_killed_with_sigkill_is_taken_over_after_its_lease_duration(
    capa: Capa, inspector: MotoInspector
) -> None:
    baseline = inspector.inventory().counts("total")
    duration = {LEASE_DURATION_ENV: "10"}
    # SIGKILLed by its own fault hook after the 6th mutating call: mid-way through the cluster.
    crashing = start(capa, *APPLY, env={**duration, CRASH_AFTER_MUTATING: "6"})
    crashed = finish(crashing, APPLY)
    assert crashed.returncode == -signal.SIGKILL, f"the first apply should have been killed:\n{crashed}"
    left = read_lease(capa.state)
    assert left is not None, "the killed apply never took the lease"
    assert left.holder.startswith(f"capa apply pid {crashing.pid} on "), f"lease after the kill: {left}"
    assert left.spec.lease_duration_seconds == 10
    # As if the killed holder had renewed just before it died: the second apply must then find the lease
    # unexpired however long it takes to start on a loaded machine (the killed one last renewed up to a
    # third of the duration before the kill, and a slow start could outlast the rest).
    renew_now(capa.state)

    second = capa.run(*APPLY, faults=duration)
    assert second.returncode == 0, f"the apply after the kill did not converge:\n{second}"
    assert f"waiting for the store lease held by capa apply pid {crashing.pid} on " in second.stderr, (
        f"the second apply should say whose lease it waits for:\n{second}"
    )
    assert second.stderr.count("waiting for the store lease") == 1, second.stderr
    after = read_lease(capa.state)
    assert after is not None
    assert after.holder == "", f"the second apply did not release the lease: {after}"
    assert after.spec.lease_transitions == 1, "one transition: from the killed holder to the second apply"

    recorded = recorded_ids(capa.get("awsclusters") + capa.get("awsmachines"))
    problems = problems_with_cluster(inspector.inventory(), expected_counts(), baseline, recorded)
    assert not problems, "after a killed holder and a second apply:\n" + "\n".join(problems)


def test_a_holder_that_loses_its_lease_stops_and_exits_1_saying_so(capa: Capa) -> None:
    holder = start(capa, *APPLY, env={**STUCK, LEASE_DURATION_ENV: "3"})
    try:
        assert wait_for(lambda: held_by(capa.state, holder.pid), timeout=HOLDER_TIMEOUT), (
            f"the apply never took the store lease: {read_lease(capa.state)}"
        )
        # Another process takes the record over (as one whose clock says the lease expired would).
        with SQLiteStore(capa.state) as store:
            while True:
                lease = store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE)
                now = now_micro()
                spec = lease.spec.model_copy(
                    update={
                        "holder_identity": "intruder",
                        "acquire_time": now,
                        "renew_time": now,
                        "lease_duration_seconds": 60,
                    }
                )
                try:
                    store.update(lease.model_copy(update={"spec": spec}))
                    break
                except Conflict:
                    continue  # the holder renewed in between: read again
        run = finish(holder, APPLY, timeout=HOLDER_TIMEOUT * 2)
    finally:
        stop(holder)
    assert run.returncode == 1, f"an apply that lost its lease must exit 1:\n{run}"
    assert (
        "error: lost the store lease capa-py-system/capa-py-controller (held by intruder now); "
        "stopped reconciling" in run.stderr
    ), run
    lease_now = read_lease(capa.state)
    assert lease_now is not None
    assert lease_now.holder == "intruder", "the apply that lost the lease overwrote the new holder"
