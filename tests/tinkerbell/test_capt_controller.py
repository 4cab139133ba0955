"""The bare-metal provider inside ``capa controller`` (a real process, no AWS involved): the example
converges, and a controller killed with SIGKILL in the middle is replaced by another that finishes with
every machine on Hardware of its own.

No agent runs: this test does what the gRPC server does when agents run each prepared Workflow's actions
(capa_py.tinkerbell.states, written to the same SQLite store from this process).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from capa_py.api.cluster import Machine
from capa_py.api.loader import load_manifests
from capa_py.api.tinkerbell import Hardware, Workflow
from capa_py.api.tinkerbell_capi import TinkerbellMachine
from capa_py.operations import apply_objects
from capa_py.store import SQLiteStore
from tests.cli.conftest import closed_endpoint  # noqa: F401 - the fixture
from tests.cli.test_controller_cmd import SAFETY_TIMEOUT, ControllerProcess
from tests.e2e.e2e_support import wait_for
from tests.tinkerbell.capt_world import owner_of, run_workflow

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell-cluster-machines.yaml"
MACHINES = ("lab-cp-0", "lab-worker-0", "lab-worker-1")


def _provisioned(state: Path) -> bool:
    """Drive every prepared workflow as agents would; whether every machine is Provisioned."""
    with SQLiteStore(state) as store:
        for workflow in store.list(Workflow):
            if workflow.status.state == "Pending" and workflow.status.actions:
                run_workflow(store, workflow.name)
        return all(store.get(Machine, m, "default").status.phase == "Provisioned" for m in MACHINES)


def _claimed(state: Path) -> int:
    with SQLiteStore(state) as store:
        return sum(1 for h in store.list(Hardware) if owner_of(h))


def test_capa_controller_provisions_the_example_across_a_sigkill(
    tmp_path: Path,
    closed_endpoint: str,  # noqa: F811
) -> None:
    state = tmp_path / "state.db"
    with SQLiteStore(state) as store:
        apply_objects(store, load_manifests([EXAMPLE]))
    first = ControllerProcess(state, closed_endpoint)
    try:
        first.line("controllers running: ")
        assert wait_for(lambda: _claimed(state) >= 1, SAFETY_TIMEOUT), str(first)
        first.proc.send_signal(signal.SIGKILL)
        first.wait()
    finally:
        first.close()

    second = ControllerProcess(state, closed_endpoint)
    try:
        second.line("controllers running: ")
        assert wait_for(lambda: _provisioned(state), SAFETY_TIMEOUT), str(second)
        second.proc.send_signal(signal.SIGTERM)
        assert second.wait() == 0, str(second)
    finally:
        second.close()

    with SQLiteStore(state) as store:
        owners = {h.name: owner_of(h) for h in store.list(Hardware)}
        recorded = {m: store.get(TinkerbellMachine, m, "default").spec.hardware_name for m in MACHINES}
        assert sorted(o for o in owners.values() if o) == sorted(MACHINES), owners
        assert {owners[hw] for hw in recorded.values() if hw} == set(MACHINES)
        assert all(owners[hw] == m for m, hw in recorded.items() if hw)
        assert len(store.list(Workflow)) == 3
