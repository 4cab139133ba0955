"""v1beta1 conditions as ``metav1.Condition``s (``capa_py.api.contract``): reasons in the API's form, the
transition time kept while the status holds, ``initialization.provisioned`` latched once ready."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from capa_py.api.contract import REASON_PATTERN, v1beta2_condition, v1beta2_reason
from capa_py.api.meta import Condition
from capa_py.api.tinkerbell_capi import TinkerbellMachineStatus

EARLIER = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime(2026, 1, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    ("type_", "status", "reason", "expected"),
    [
        ("Ready", "True", None, "Ready"),
        ("Ready", "False", None, "NotReady"),
        ("Ready", "Unknown", None, "ReadyUnknown"),
        ("VpcReady", "False", None, "NotVpcReady"),
        ("VpcReady", "Unknown", None, "VpcReadyUnknown"),
        ("Ready", "False", "WorkflowRunning", "WorkflowRunning"),
        ("Ready", "False", "InvalidAMIID.NotFound", "InvalidAMIIDNotFound"),
        ("Ready", "False", "Client.invalid-parameter value", "ClientInvalidParameterValue"),
        ("Ready", "False", "404 not found", "NotFound"),
        ("Ready", "False", "...", "NotReady"),
    ],
)
def test_reasons_take_the_form_metav1_condition_requires(
    type_: str, status: str, reason: str | None, expected: str
) -> None:
    found = v1beta2_reason(Condition(type=type_, status=status, reason=reason))  # type: ignore[arg-type]
    assert found == expected
    assert re.match(REASON_PATTERN, found)


def test_the_transition_time_moves_only_with_the_status() -> None:
    first = v1beta2_condition(Condition(type="Ready", status="False", last_transition_time=EARLIER), None, 3)
    assert (first.last_transition_time, first.observed_generation, first.message) == (EARLIER, 3, "")
    same = v1beta2_condition(Condition(type="Ready", status="False", reason="Waiting"), first, 4)
    assert same.last_transition_time == EARLIER
    moved = v1beta2_condition(Condition(type="Ready", status="True", last_transition_time=LATER), same, 4)
    assert moved.last_transition_time == LATER


def test_provisioned_latches_and_the_v1beta2_list_follows_the_v1beta1_one() -> None:
    status = TinkerbellMachineStatus()
    status.sync_contract(1)
    assert status.initialization is None
    assert status.v1beta2 is not None
    assert [(c.type, c.status, c.reason) for c in status.v1beta2.conditions] == [
        ("Paused", "False", "NotPaused")
    ]
    status.ready = True
    status.conditions = [Condition(type="Ready", status="True", last_transition_time=EARLIER)]
    status.sync_contract(1)
    assert status.provisioned
    status.ready = False
    status.conditions = [
        Condition(type="Ready", status="False", reason="Deleting", last_transition_time=LATER)
    ]
    status.sync_contract(2)
    assert status.provisioned
    assert status.v1beta2 is not None
    [ready, paused] = status.v1beta2.conditions
    assert paused.type == "Paused"
    assert (ready.status, ready.reason, ready.last_transition_time, ready.observed_generation) == (
        "False",
        "Deleting",
        LATER,
        2,
    )


def test_the_paused_condition_says_why_and_keeps_its_transition_time_while_unchanged() -> None:
    status = TinkerbellMachineStatus()
    status.sync_contract(1, paused="cluster lab has spec.paused set to true")
    assert status.paused_condition is not None
    paused = status.paused_condition
    assert (paused.status, paused.reason, paused.message) == (
        "True",
        "Paused",
        "cluster lab has spec.paused set to true",
    )
    paused.last_transition_time = EARLIER
    status.sync_contract(2, paused="cluster lab has spec.paused set to true")
    assert status.paused_condition is not None
    assert status.paused_condition.last_transition_time == EARLIER
    assert status.paused_condition.observed_generation == 2
    status.sync_contract(2)
    assert status.paused_condition is not None
    assert (status.paused_condition.status, status.paused_condition.reason) == ("False", "NotPaused")
