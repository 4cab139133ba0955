"""The workflow controller inside ``capa controller`` (controller mode, a real process): it prepares the
example workflow with no AWS involved (a watch filter, which scopes Cluster API objects, does not hide
Tinkerbell ones), reports its reconciles as metrics like the AWS controllers, and a
deletion cancels the workflow and lets it go."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from capa_py.api.loader import load_manifests
from capa_py.api.tinkerbell import Workflow
from capa_py.operations import apply_objects
from capa_py.runtime.events import events_for
from capa_py.store import NotFound, SQLiteStore
from tests.cli.test_controller_cmd import SAFETY_TIMEOUT, ControllerProcess
from tests.e2e.e2e_support import wait_for

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell"


def _workflow(state: Path) -> Workflow | None:
    with SQLiteStore(state) as store:
        try:
            return store.get(Workflow, "provision-machine1", "default")
        except NotFound:
            return None


def test_capa_controller_prepares_and_cancels_a_workflow(tmp_path: Path, closed_endpoint: str) -> None:
    state = tmp_path / "state.db"
    with SQLiteStore(state) as store:
        applied = apply_objects(store, load_manifests(sorted(EXAMPLES.glob("*.yaml"))))
    workflow = next(a.object for a in applied if isinstance(a.object, Workflow))
    # A watch filter scopes Cluster API objects only: Tinkerbell objects carry no such label.
    controller = ControllerProcess(
        state, closed_endpoint, "--workflow-scheduling-timeout", "2m", "--watch-filter", "team-a"
    )
    try:
        controller.line("controllers running: ")

        def prepared() -> bool:
            found = _workflow(state)
            return found is not None and found.status.state == "Pending"

        assert wait_for(prepared, SAFETY_TIMEOUT), str(controller)
        found = _workflow(state)
        assert found is not None
        assert len(found.status.actions) == 4
        reconciles = controller.metric(
            "controller_runtime_reconcile_total", controller="workflow", result="success"
        )
        assert reconciles is not None
        assert reconciles >= 1
        with SQLiteStore(state) as store:
            store.delete(Workflow, "provision-machine1", "default")
        assert wait_for(lambda: _workflow(state) is None, SAFETY_TIMEOUT), str(controller)
        with SQLiteStore(state) as store:
            reasons = [e.reason for e in events_for(store, workflow)]
        assert "Prepared" in reasons
        assert "Canceled" in reasons
        controller.proc.send_signal(signal.SIGTERM)
        assert controller.wait() == 0, str(controller)
    finally:
        controller.close()
