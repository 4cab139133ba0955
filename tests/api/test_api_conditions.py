"""Condition helpers keep Cluster API's semantics: lastTransitionTime moves only when the status changes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from capa_py.api.cluster import ClusterStatus
from capa_py.api.conditions import (
    READY,
    get_condition,
    is_true,
    mark_false,
    mark_true,
    set_condition,
    summarize_ready,
)
from capa_py.api.meta import Condition

LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def status_with(condition_type: str, status: str, reason: str | None = None) -> ClusterStatus:
    return ClusterStatus(
        conditions=[
            Condition(type=condition_type, status=status, reason=reason, last_transition_time=LONG_AGO)  # type: ignore[arg-type]
        ]
    )


def test_setting_the_same_status_keeps_the_transition_time() -> None:
    holder = status_with("VPCReady", "False", reason="Creating")

    condition = set_condition(holder, "VPCReady", False, reason="StillCreating", message="waiting")

    assert condition.last_transition_time == LONG_AGO, "same status: the transition time must not move"
    assert condition.reason == "StillCreating", "reason and message are updated even without a transition"
    assert condition.message == "waiting"


def test_changing_the_status_moves_the_transition_time() -> None:
    holder = status_with("VPCReady", "False")

    condition = set_condition(holder, "VPCReady", True)

    assert condition.status == "True"
    assert condition.last_transition_time is not None
    assert condition.last_transition_time > LONG_AGO, "a status change is a transition: time must move"


def test_a_new_condition_gets_a_transition_time() -> None:
    holder = ClusterStatus()
    condition = set_condition(holder, "VPCReady", "Unknown")
    assert condition.last_transition_time is not None
    assert holder.conditions == [condition]


def test_setting_a_condition_replaces_it_and_keeps_the_others() -> None:
    holder = status_with("A", "True")
    set_condition(holder, "B", False)
    set_condition(holder, "A", False)

    assert sorted(c.type for c in holder.conditions) == ["A", "B"], "one condition per type"
    condition = get_condition(holder, "A")
    assert condition is not None
    assert condition.status == "False"


@pytest.mark.parametrize(
    ("status", "severity", "expected"),
    [(True, "Error", None), (False, None, "Warning"), ("Unknown", None, "Info"), (False, "Error", "Error")],
)
def test_severity_defaults_follow_cluster_api(
    status: bool | str, severity: str | None, expected: str | None
) -> None:
    condition = set_condition(ClusterStatus(), "X", status, severity=severity)  # type: ignore[arg-type]
    assert condition.severity == expected, "True has no severity; False warns and Unknown informs by default"


def test_mark_helpers_and_is_true() -> None:
    holder = ClusterStatus()
    mark_false(holder, "VPCReady", "Creating", "creating the VPC", observed_generation=2)
    assert not is_true(holder, "VPCReady")
    condition = get_condition(holder, "VPCReady")
    assert condition is not None
    assert (condition.reason, condition.message, condition.observed_generation) == (
        "Creating",
        "creating the VPC",
        2,
    )

    mark_true(holder, "VPCReady")
    assert is_true(holder, "VPCReady")
    assert not is_true(holder, "Missing")


def test_summarize_ready_reports_the_first_condition_that_is_not_true() -> None:
    holder = ClusterStatus()
    mark_true(holder, "VPCReady")
    mark_false(holder, "SubnetsReady", "Creating", "creating subnets")

    summarize_ready(holder, ["VPCReady", "SubnetsReady", "LoadBalancerReady"])

    ready = get_condition(holder, READY)
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == ("False", "Creating", "creating subnets")


def test_summarize_ready_reports_a_missing_condition_as_unknown() -> None:
    holder = ClusterStatus()
    mark_true(holder, "VPCReady")

    summarize_ready(holder, ["VPCReady", "SubnetsReady"])

    ready = get_condition(holder, READY)
    assert ready is not None
    assert (ready.status, ready.reason) == ("Unknown", "SubnetsReadyPending")


def test_summarize_ready_is_true_when_every_condition_is() -> None:
    holder = ClusterStatus()
    mark_true(holder, "VPCReady")
    mark_true(holder, "SubnetsReady")
    holder.conditions.append(Condition(type=READY, status="True", last_transition_time=LONG_AGO))

    summarize_ready(holder, ["VPCReady", "SubnetsReady"])

    ready = get_condition(holder, READY)
    assert ready is not None
    assert ready.status == "True"
    assert ready.last_transition_time == LONG_AGO, "re-asserting Ready must not move its transition time"


def test_summarize_ready_copies_the_severity_of_the_condition_it_reports() -> None:
    holder = ClusterStatus()
    mark_true(holder, "VPCReady")
    set_condition(holder, "SubnetsReady", False, "Waiting", "subnets pending", "Info")

    assert summarize_ready(holder, ["VPCReady", "SubnetsReady"]) is False

    ready = get_condition(holder, READY)
    assert ready is not None
    assert (ready.status, ready.reason, ready.severity) == ("False", "Waiting", "Info")


def test_summarize_ready_of_an_unfinished_pass_passes_over_unreached_conditions() -> None:
    """A pass that stopped before a step (complete=False) does not report the step's missing condition as
    Unknown: Ready is False, Reconciling, unless a condition it reached is not True."""
    holder = ClusterStatus()
    mark_true(holder, "VPCReady")

    assert summarize_ready(holder, ["VPCReady", "SubnetsReady"], complete=False) is False
    ready = get_condition(holder, READY)
    assert ready is not None
    assert (ready.status, ready.reason, ready.severity) == ("False", "Reconciling", "Info")

    mark_false(holder, "VPCReady", "Drifted", "the VPC is gone", "Error")
    assert summarize_ready(holder, ["VPCReady", "SubnetsReady"], complete=True) is False
    ready = get_condition(holder, READY)
    assert ready is not None
    assert (ready.status, ready.reason, ready.severity) == ("False", "Drifted", "Error")


def test_summarize_ready_of_a_finished_pass_is_true_without_every_condition() -> None:
    holder = ClusterStatus()
    mark_true(holder, "VPCReady")

    assert summarize_ready(holder, ["VPCReady", "LoadBalancerReady"], complete=True) is True
    assert is_true(holder, READY)
