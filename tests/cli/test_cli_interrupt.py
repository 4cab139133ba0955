"""Ctrl-C during ``capa apply``: exit 130, the store lease released, one line saying how to resume.

The apply is a real ``capa`` subprocess (through the fault wrapper) reconciling against a moto server that
answers every ``CreateVpc`` as throttled, so it stays in its reconcile holding the lease; SIGINT reaches it
either inside a store transaction (``CAPA_TEST_SIGINT_AT_READ``: sent as the main thread's ``BEGIN``
returns, the moment that once left the transaction open and the lease held by a dead process) or from the
test, as a terminal's Ctrl-C would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from capa_py.runtime.leader import LEASE_DURATION_ENV
from tests.e2e.e2e_support import CRASHING_CAPA, EXAMPLE, Capa, Run, wait_for
from tests.harness.faults import FAIL_OP
from tests.harness.moto_server import MotoServer, start_moto_server
from tests.harness.store_faults import SIGINT_AT_READ

# Every CreateVpc answered as throttled: the apply holds the lease and keeps retrying.
STUCK = {FAIL_OP: "CreateVpc:RequestLimitExceeded"}
RESUME = "interrupted: run the same command again to continue; it picks up where it stopped"


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto_server(load_default_amis=True)
    yield server
    server.stop()


@pytest.fixture
def capa(tmp_path: Path, moto: MotoServer) -> Capa:
    moto.reset()  # nothing another test's store made there
    state = tmp_path / "run" / "state.db"
    state.parent.mkdir()
    # A lease left held by a killed process would block the next command for this long: long enough
    # that a test reading the lease right after sees it held.
    return Capa(state=state, endpoint=moto.url, env_extra={LEASE_DURATION_ENV: "120"})


def _start(capa: Capa, extra: Mapping[str, str]) -> subprocess.Popen[str]:
    argv = ["--state", str(capa.state), "apply", "-f", str(EXAMPLE), "--aws-endpoint", str(capa.endpoint)]
    return subprocess.Popen(
        [sys.executable, *CRASHING_CAPA, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=capa.env({**STUCK, **extra}),
        cwd=capa.state.parent,
        stdin=subprocess.DEVNULL,
    )


def _lease_holder(capa: Capa) -> str:
    lease = capa.ok("get", "lease", "capa-py-controller", "-n", "capa-py-system", "-o", "json").json()
    return str(lease["spec"].get("holderIdentity", ""))


def _check_interrupted(capa: Capa, interrupted: Run) -> None:
    assert interrupted.returncode == 130, str(interrupted)
    assert "Traceback" not in interrupted.stderr, str(interrupted)
    assert "transaction" not in interrupted.stderr, str(interrupted)
    assert interrupted.stderr.strip().splitlines()[-1] == RESUME, str(interrupted)
    assert _lease_holder(capa) == "", "the interrupted apply left the store lease held"
    # The next reconciling command is not told the lease is held; it picks the work up.
    again = capa.run("apply", "-f", str(EXAMPLE), "--no-wait-for-lock", "--timeout", "2s", faults={})
    assert "held by" not in again.stderr, str(again)
    assert "not ready after 2s" in again.stderr, str(again)
    assert "unchanged" in again.stdout, str(again)


def test_sigint_inside_a_store_transaction_exits_130_and_releases_the_lease(capa: Capa) -> None:
    process = _start(capa, {SIGINT_AT_READ: "20"})
    stdout, stderr = process.communicate(timeout=180)
    _check_interrupted(capa, Run(["apply"], process.returncode, stdout, stderr, 0.0))


def test_ctrl_c_during_a_reconcile_exits_130_and_releases_the_lease(capa: Capa) -> None:
    process = _start(capa, {})
    try:
        # Interrupted once the reconcile holds the lease (read from the store file, as another process).
        started = wait_for(lambda: process.poll() is not None or _holds(capa), timeout=240)
        if started and process.poll() is None:
            process.send_signal(signal.SIGINT)
        else:
            process.kill()
        stdout, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    interrupted = Run(["apply"], process.returncode, stdout, stderr, 0.0)
    assert started, f"the apply never took the store lease:\n{interrupted}"
    _check_interrupted(capa, interrupted)


def _holds(capa: Capa) -> bool:
    if not capa.state.exists():
        return False
    result = capa.run("get", "lease", "capa-py-controller", "-n", "capa-py-system", "-o", "json")
    if result.returncode != 0:
        return False
    return str(json.loads(result.stdout)["spec"].get("holderIdentity", "")).startswith("capa apply")
