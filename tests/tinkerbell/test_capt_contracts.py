"""The bare-metal provider's TinkerbellCluster and TinkerbellMachine report to Cluster API under both
contracts: v1beta1 (``status.ready``, ``errorReason``, conditions with severities) and v1beta2
(``status.initialization.provisioned``, ``status.v1beta2.conditions`` as ``metav1.Condition``s).

Every embedded controller runs over a real SQLite store; the Workflow's progress is written by hand as the
Tinkerbell server writes it (as in test_capt_provider).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.cluster import Machine
from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore
from tests.harness.contracts import assert_valid_meta_conditions
from tests.tinkerbell.capt_world import (
    NS,
    cluster_objects,
    hardware,
    machine_objects,
    prepared,
    run_workflow,
    running,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in assert_valid_meta_conditions(status) if c["type"] == "Ready")


def test_a_provisioned_machine_and_its_cluster_report_both_contracts(store: SQLiteStore) -> None:
    apply_objects(store, [*cluster_objects(), *machine_objects("m1"), hardware("hw-a", "127.0.0.21")])
    with running(store) as ctl:
        ctl.wait_for(lambda: prepared(store, "m1"), "the machine's workflow is prepared")
        pending = store.get(TinkerbellMachine, "m1", NS).to_dict()
        assert pending["status"]["ready"] is False
        assert "initialization" not in pending["status"]
        v1beta1 = next(c for c in pending["status"]["conditions"] if c["type"] == "Ready")
        ready = _ready(pending["status"])
        assert (ready["status"], ready["reason"]) == ("False", v1beta1["reason"])
        assert ready["message"] == v1beta1["message"]
        run_workflow(store, "m1")
        ctl.wait_for(
            lambda: store.get(Machine, "m1", NS).status.phase == "Provisioned", "machine provisioned"
        )
    for obj in (store.get(TinkerbellMachine, "m1", NS), store.get(TinkerbellCluster, "bm", NS)):
        wire = obj.to_dict()
        assert wire["status"]["ready"] is True, obj.ref()
        assert wire["status"]["initialization"] == {"provisioned": True}, obj.ref()
        ready = _ready(wire["status"])
        assert (ready["status"], ready["reason"], ready["message"]) == ("True", "Ready", ""), ready
    machine = store.get(TinkerbellMachine, "m1", NS).to_dict()
    assert machine["spec"]["providerID"] == "tinkerbell://default/hw-a"
    assert machine["status"]["addresses"]


def test_a_failed_workflow_is_the_v1beta2_ready_conditions_reason(store: SQLiteStore) -> None:
    apply_objects(store, [*cluster_objects(), *machine_objects("m1"), hardware("hw-a", "127.0.0.21")])
    with running(store) as ctl:
        ctl.wait_for(lambda: prepared(store, "m1"), "workflow prepared")
        run_workflow(store, "m1", fail_at="reboot")
        ctl.wait_for(lambda: store.get(Machine, "m1", NS).status.phase == "Failed", "machine failed")
    status = store.get(TinkerbellMachine, "m1", NS).to_dict()["status"]
    assert status["errorReason"] == "WorkflowFailed"
    assert "initialization" not in status
    ready = _ready(status)
    assert (ready["status"], ready["reason"]) == ("False", "WorkflowFailed"), ready
    assert ready["message"] == status["errorMessage"]
    workflow = next(c for c in status["v1beta2"]["conditions"] if c["type"] == "WorkflowReady")
    assert (workflow["status"], workflow["reason"]) == ("False", "ExitCode"), workflow
