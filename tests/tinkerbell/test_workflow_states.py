"""The Workflow state machine's rules (capa_py.tinkerbell.states): every transition the execution design
names, what each one records, and the events each state refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from capa_py.api.meta import ObjectMeta
from capa_py.api.tinkerbell import Action, ActionStatus, LocalObjectReference, Workflow, WorkflowSpec
from capa_py.tinkerbell import states
from capa_py.tinkerbell.states import TransitionError

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def prepared(*names: str) -> Workflow:
    """A workflow as the controller leaves it after preparation: Pending with its rendered actions."""
    workflow = Workflow(
        metadata=ObjectMeta(name="wf", namespace="default"),
        spec=WorkflowSpec(
            hardware_ref=LocalObjectReference(name="hw"), template_ref=LocalObjectReference(name="tpl")
        ),
    )
    workflow.status.actions = {
        name: ActionStatus(rendered=Action(name=name, image="img"), index=i) for i, name in enumerate(names)
    }
    states.set_state(workflow, "Pending", at(0))
    return workflow


def running(*names: str) -> Workflow:
    workflow = prepared(*names)
    states.scheduled(workflow, at(1))
    states.action_started(workflow, names[0], at(2))
    return workflow


def test_a_workflow_runs_its_actions_in_order_to_succeeded() -> None:
    workflow = prepared("a", "b")
    states.scheduled(workflow, at(1))
    assert (workflow.status.state, workflow.status.last_transition_time) == ("Scheduled", at(1))
    states.action_started(workflow, "a", at(2))
    assert workflow.status.state == "Running"
    assert workflow.status.started_at == at(2)
    assert workflow.status.current_action == "a"
    assert workflow.status.actions["a"].state == "Running"
    assert workflow.status.actions["a"].started_at == at(2)
    states.action_succeeded(workflow, "a", at(3))
    assert workflow.status.state == "Running", "one action of two done: still running"
    assert workflow.status.last_transition_time == at(2), "no state change, no transition time change"
    states.action_started(workflow, "b", at(4))
    assert workflow.status.started_at == at(2), "startedAt is the first action's start"
    assert workflow.status.current_action == "b"
    states.action_succeeded(workflow, "b", at(5))
    assert workflow.status.state == "Succeeded"
    assert workflow.status.last_transition_time == at(5)
    assert [a.state for _, a in workflow.ordered_actions()] == ["Succeeded", "Succeeded"]


def test_an_action_failing_fails_the_workflow_with_its_reason() -> None:
    workflow = running("a", "b")
    states.action_failed(workflow, "a", at(3), "ImagePullFailed", "no such image")
    assert (workflow.status.state, workflow.status.reason, workflow.status.message) == (
        "Failed",
        "ImagePullFailed",
        "no such image",
    )
    action = workflow.status.actions["a"]
    assert (action.state, action.reason, action.message) == ("Failed", "ImagePullFailed", "no such image")
    assert workflow.status.actions["b"].state == "Pending"


def test_an_action_failing_without_a_reason_is_unknown() -> None:
    workflow = running("a")
    states.action_failed(workflow, "a", at(3))
    assert workflow.status.reason == "Unknown"
    assert workflow.status.actions["a"].reason == "Unknown"


def test_a_rejected_workflow_goes_back_to_pending() -> None:
    workflow = prepared("a")
    states.scheduled(workflow, at(1))
    states.rejected(workflow, at(2), "AlreadyRunning", "the agent runs another workflow")
    assert (workflow.status.state, workflow.status.reason) == ("Pending", "AlreadyRunning")
    assert workflow.status.last_transition_time == at(2)
    states.scheduled(workflow, at(3))
    assert workflow.status.state == "Scheduled"
    assert workflow.status.reason is None


def test_actions_start_only_in_order_and_only_once() -> None:
    workflow = prepared("a", "b")
    states.scheduled(workflow, at(1))
    with pytest.raises(TransitionError, match="the next action is 'a'"):
        states.action_started(workflow, "b", at(2))
    states.action_started(workflow, "a", at(2))
    with pytest.raises(TransitionError, match="cannot start"):
        states.action_started(workflow, "a", at(3))
    with pytest.raises(TransitionError, match="no action 'c'"):
        states.action_succeeded(workflow, "c", at(3))


@pytest.mark.parametrize(
    ("event", "state"),
    [
        (lambda w: states.action_started(w, "a", at(9)), "Pending"),
        (lambda w: states.action_succeeded(w, "a", at(9)), "Scheduled"),
        (lambda w: states.rejected(w, at(9)), "Pending"),
        (lambda w: states.scheduled(w, at(9)), "Scheduled"),
        (lambda w: states.cancelled(w, at(9)), "Running"),
    ],
    ids=["start-pending", "succeed-scheduled", "reject-pending", "schedule-twice", "cancelled-running"],
)
def test_events_a_state_does_not_allow_are_refused(event: object, state: str) -> None:
    workflow = prepared("a")
    if state in ("Scheduled", "Running"):
        states.scheduled(workflow, at(1))
    if state == "Running":
        states.action_started(workflow, "a", at(2))
    before = workflow.model_copy(deep=True)
    with pytest.raises(TransitionError):
        event(workflow)  # type: ignore[operator]
    assert workflow == before, "a refused event changes nothing"


def test_an_unprepared_workflow_cannot_be_scheduled() -> None:
    workflow = prepared()
    with pytest.raises(TransitionError, match="no rendered actions"):
        states.scheduled(workflow, at(1))


@pytest.mark.parametrize(("state", "after"), [(None, "Canceled"), ("Pending", "Canceled")])
def test_deleting_a_workflow_not_yet_scheduled_cancels_it_at_once(state: str | None, after: str) -> None:
    workflow = prepared("a")
    workflow.status.state = state  # type: ignore[assignment]
    states.cancel_requested(workflow, at(5))
    assert (workflow.status.state, workflow.status.reason) == (after, "Canceled")
    assert workflow.status.last_transition_time == at(5)


@pytest.mark.parametrize("started", [False, True], ids=["scheduled", "running"])
def test_deleting_a_scheduled_or_running_workflow_asks_it_to_stop(started: bool) -> None:
    workflow = running("a") if started else prepared("a")
    if not started:
        states.scheduled(workflow, at(1))
    states.cancel_requested(workflow, at(5))
    assert workflow.status.state == "Cancelling"
    assert workflow.status.last_transition_time == at(5)
    states.cancel_requested(workflow, at(6))
    assert workflow.status.last_transition_time == at(5), "a second request changes nothing"
    states.cancelled(workflow, at(7))
    assert workflow.status.state == "Canceled"
    if started:
        assert workflow.status.actions["a"].state == "Canceled"


@pytest.mark.parametrize("end", ["Succeeded", "Failed", "Canceled"])
def test_deleting_an_ended_workflow_leaves_its_state(end: str) -> None:
    workflow = prepared("a")
    states.set_state(workflow, end, at(1), "Why", "because")  # type: ignore[arg-type]
    states.cancel_requested(workflow, at(5))
    assert (workflow.status.state, workflow.status.reason, workflow.status.last_transition_time) == (
        end,
        "Why",
        at(1),
    )


def test_a_cancelling_workflow_ends_canceled_when_its_action_fails_or_it_is_rejected() -> None:
    workflow = running("a", "b")
    states.cancel_requested(workflow, at(3))
    with pytest.raises(TransitionError):
        states.action_started(workflow, "b", at(4))
    states.action_failed(workflow, "a", at(4), "Killed", "stopped by the agent")
    assert (workflow.status.state, workflow.status.actions["a"].state) == ("Canceled", "Failed")

    scheduled = prepared("a")
    states.scheduled(scheduled, at(1))
    states.cancel_requested(scheduled, at(2))
    states.rejected(scheduled, at(3))
    assert scheduled.status.state == "Canceled"


def test_a_cancelling_workflow_whose_last_action_succeeds_is_canceled() -> None:
    workflow = running("a", "b")
    states.cancel_requested(workflow, at(3))
    states.action_succeeded(workflow, "a", at(4))
    assert workflow.status.state == "Cancelling", "more to run: waits for the agent to stop"
    workflow = running("a")
    states.cancel_requested(workflow, at(3))
    states.action_succeeded(workflow, "a", at(4))
    assert workflow.status.state == "Canceled"


def test_the_supervisor_failing_a_workflow_fails_its_running_action() -> None:
    workflow = running("a", "b")
    states.failed(workflow, at(9), "Timeout", "too slow")
    assert (workflow.status.state, workflow.status.reason) == ("Failed", "Timeout")
    assert (workflow.status.actions["a"].state, workflow.status.actions["a"].reason) == ("Failed", "Timeout")
    assert workflow.status.actions["b"].state == "Pending"
    with pytest.raises(TransitionError, match="already ended"):
        states.failed(workflow, at(10), "Timeout", "again")


def test_a_forced_cancellation_keeps_its_failure_reason() -> None:
    workflow = running("a")
    states.cancel_requested(workflow, at(3))
    states.cancelled(workflow, at(9), "CancelTimeout", "the agent did not answer")
    assert (workflow.status.state, workflow.status.reason, workflow.status.message) == (
        "Canceled",
        "CancelTimeout",
        "the agent did not answer",
    )
    assert workflow.status.actions["a"].state == "Canceled"


# -- any sequence of events ---------------------------------------------------------------------------
EVENT_NAMES = ("schedule", "reject", "start", "succeed", "fail", "cancel_request", "cancelled", "timeout")


def apply_event(workflow: Workflow, event: str, action: str, now: datetime) -> None:
    handlers = {
        "schedule": lambda: states.scheduled(workflow, now),
        "reject": lambda: states.rejected(workflow, now, "Busy", "another workflow runs"),
        "start": lambda: states.action_started(workflow, action, now),
        "succeed": lambda: states.action_succeeded(workflow, action, now),
        "fail": lambda: states.action_failed(workflow, action, now, "Broken", "exit 1"),
        "cancel_request": lambda: states.cancel_requested(workflow, now),
        "cancelled": lambda: states.cancelled(workflow, now),
        "timeout": lambda: states.failed(workflow, now, "Timeout", "too slow"),
    }
    handlers[event]()


@given(
    st.lists(
        st.tuples(st.sampled_from(EVENT_NAMES), st.sampled_from(("a", "b", "c"))),
        max_size=30,
    )
)
def test_any_sequence_of_events_keeps_the_state_machine_consistent(events: list[tuple[str, str]]) -> None:
    workflow = prepared("a", "b", "c")
    for step, (event, action) in enumerate(events, start=1):
        before = workflow.model_copy(deep=True)
        try:
            apply_event(workflow, event, action, at(step))
        except TransitionError:
            assert workflow == before, f"a refused {event} changed the workflow"
            continue
        status = workflow.status
        if before.status.state in ("Succeeded", "Failed", "Canceled"):
            assert status.state == before.status.state, "an end state is final"
        if status.state != before.status.state:
            assert status.last_transition_time == at(step)
        else:
            assert status.last_transition_time == before.status.last_transition_time
        ordered = [a.state for _, a in workflow.ordered_actions()]
        assert ordered.count("Running") <= 1, ordered
        if "Running" in ordered:
            assert status.state in ("Running", "Cancelling")
            assert all(s == "Succeeded" for s in ordered[: ordered.index("Running")]), ordered
        assert (status.state == "Succeeded") == (ordered == ["Succeeded"] * 3)
        if status.state in ("Scheduled", "Pending"):
            assert all(s == "Pending" for s in ordered), "nothing has run before the workflow is Running"
        if status.state == "Failed":
            assert status.reason
