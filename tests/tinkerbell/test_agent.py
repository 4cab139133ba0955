"""The agent against a real grpcio server on loopback that serves a ``WorkflowService`` scripted in the test
(:mod:`tests.tinkerbell.scripted_server`), with the process runtime running real host processes: actions
run in order with their env, events are published in order, a failure ends the workflow, a second
workflow is rejected, a re-dispatch is not, StopWorkflow stops the running action and is acknowledged, the
local timeout fires, the agent reconnects to a restarted server and retries events it could not publish.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from capa_py.tinkerbell.agent import Agent, AgentConfig, Finished
from capa_py.tinkerbell.runtimes import Outcome, ProcessRuntime
from tests.tinkerbell.scripted_server import (
    ScriptedServer,
    ScriptedService,
    action,
    described,
    poll_until,
    start,
    stop,
    wait_all,
    wait_for_file,
)
from tests.webhooks.certificates import write_certificate

WF = "default/wf1"


class RunningAgent:
    """An :class:`Agent` running in a thread; :meth:`close` shuts it down and waits for it."""

    def __init__(self, address: str, **config: object) -> None:
        settings: dict[str, object] = {"reconnect_initial": 0.05, "reconnect_max": 0.2, **config}
        self.agent = Agent(AgentConfig("machine1", address, **settings), ProcessRuntime(stop_grace=2.0))  # type: ignore[arg-type]
        self.thread = threading.Thread(target=self.agent.run, name="agent", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        """Wait for :meth:`Agent.run` to return by itself (``once``)."""
        wait_all([self.thread])

    def close(self) -> None:
        self.agent.shutdown()
        wait_all([self.thread])


@pytest.fixture
def service() -> ScriptedService:
    return ScriptedService()


@pytest.fixture
def server(service: ScriptedService) -> Iterator[ScriptedServer]:
    running = ScriptedServer(service)
    yield running
    running.stop()


@pytest.fixture
def agents(server: ScriptedServer) -> Iterator[list[RunningAgent]]:
    started: list[RunningAgent] = []
    yield started
    for agent in started:
        agent.close()


def run_agent(agents: list[RunningAgent], server: ScriptedServer, **config: object) -> RunningAgent:
    opened = len(server.service.streams)
    agent = RunningAgent(server.address, **config)
    agents.append(agent)
    server.service.wait_for_stream(opened + 1)
    return agent


def sh(name: str, script: str, env: dict[str, str] | None = None) -> object:
    return action(name, "-c", script, cmd="sh", env=env)


def long_running(name: str, tmp_path: Path) -> object:
    """An action that records each start in ``runs`` and its pid in ``pid``, then sleeps."""
    return sh(name, f"echo run >> {tmp_path}/runs; echo $$ > {tmp_path}/pid; exec sleep 30")


def assert_gone(pid_file: Path) -> None:
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_actions_run_in_order_with_their_env_and_events_in_order(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_SIDE", "inherited")
    monkeypatch.setenv("OVERRIDDEN", "agent's")
    out = tmp_path / "out"
    agent = run_agent(agents, server, once=True)
    server.service.send(
        start(
            WF,
            sh(
                "one",
                f'echo "one $GREETING $AGENT_SIDE $OVERRIDDEN" >> {out}',
                {"GREETING": "hello", "OVERRIDDEN": "action's"},
            ),
            action("two", "sh", "-c", f"echo two >> {out}"),  # no cmd: args are the whole command line
        )
    )
    agent.wait()
    assert out.read_text() == "one hello inherited action's\ntwo\n"
    assert server.service.described() == [
        (WF, "started", "one"),
        (WF, "succeeded", "one"),
        (WF, "started", "two"),
        (WF, "succeeded", "two"),
    ]


def test_a_failing_action_ends_the_workflow_with_its_exit_code(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    agent = run_agent(agents, server, once=True)
    server.service.send(start(WF, sh("fails", "exit 3"), sh("never", f"touch {tmp_path}/ran")))
    agent.wait()
    assert server.service.described() == [
        (WF, "started", "fails"),
        (WF, "failed", "fails", "NonZeroExit", "exit code 3"),
    ]
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        (action("nothing"), "NoCommand"),
        (action("missing", cmd="/nonexistent/program"), "StartFailed"),
    ],
)
def test_an_action_that_cannot_start_fails_with_a_reason(
    server: ScriptedServer, agents: list[RunningAgent], broken: object, reason: str
) -> None:
    agent = run_agent(agents, server, once=True)
    server.service.send(start(WF, broken))  # type: ignore[arg-type]
    agent.wait()
    events = server.service.described()
    assert [e[:4] for e in events] == [(WF, "started", events[0][2]), (WF, "failed", events[0][2], reason)]


def test_a_second_workflow_is_rejected_while_one_runs(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    run_agent(agents, server)
    server.service.send(start(WF, long_running("sleeps", tmp_path)))
    server.service.wait_for_events(1)
    server.service.send(start("default/wf2", sh("other", f"touch {tmp_path}/other")))
    assert server.service.wait_for_events(2)[1] == ("default/wf2", "rejected", "AlreadyRunning")
    server.service.send(stop(WF))
    assert server.service.wait_for_events(3)[2][:4] == (WF, "failed", "sleeps", "Canceled")
    assert not (tmp_path / "other").exists()


def test_the_same_workflow_dispatched_again_keeps_running_and_is_not_restarted(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    run_agent(agents, server)
    workflow = start(WF, long_running("sleeps", tmp_path))
    server.service.send(workflow)
    server.service.wait_for_events(1)
    wait_for_file(tmp_path / "pid")
    server.service.send(workflow)  # what a server sends again after a reconnect
    server.service.send(start("default/wf2", sh("other", "true")))
    server.service.wait_for_events(2)
    server.service.send(stop(WF))
    events = server.service.wait_for_events(3)
    assert events == [
        (WF, "started", "sleeps"),
        ("default/wf2", "rejected", "AlreadyRunning"),
        (WF, "failed", "sleeps", "Canceled", "the workflow was stopped on request"),
    ]
    assert (tmp_path / "runs").read_text() == "run\n"


def test_stop_workflow_kills_the_running_action_and_acknowledges_with_canceled(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    agent = run_agent(agents, server, once=True)
    server.service.send(stop("default/unknown"))  # logged and ignored
    server.service.send(start(WF, long_running("sleeps", tmp_path), sh("after", f"touch {tmp_path}/after")))
    server.service.wait_for_events(1)
    wait_for_file(tmp_path / "pid")
    server.service.send(stop(WF))
    agent.wait()
    assert server.service.described() == [
        (WF, "started", "sleeps"),
        (WF, "failed", "sleeps", "Canceled", "the workflow was stopped on request"),
    ]
    assert_gone(tmp_path / "pid")
    assert not (tmp_path / "after").exists()


def test_stop_workflow_between_actions_is_acknowledged_with_a_rejection(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    agent = run_agent(agents, server, once=True)
    released = server.service.hold(WF, "succeeded", "first")
    server.service.send(start(WF, sh("first", "true"), sh("second", f"touch {tmp_path}/second")))
    server.service.wait_until(lambda: server.service.attempts == 2, "the first action's ActionSucceeded")
    server.service.send(stop(WF))
    # Commands are taken in order: once this one is answered, the StopWorkflow has been taken too.
    server.service.send(start("default/marker", sh("marker", "true")))
    server.service.wait_for_events(2)
    released.set()
    agent.wait()
    assert server.service.described() == [
        (WF, "started", "first"),
        ("default/marker", "rejected", "AlreadyRunning"),
        (WF, "succeeded", "first"),
        (WF, "rejected", "Canceled"),
    ]
    assert not (tmp_path / "second").exists()


def test_an_action_running_longer_than_the_action_timeout_is_stopped_and_fails_with_timeout(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    agent = run_agent(agents, server, once=True, action_timeout=0.3)
    server.service.send(start(WF, long_running("sleeps", tmp_path)))
    agent.wait()
    events = server.service.described()
    assert [e[:4] for e in events] == [(WF, "started", "sleeps"), (WF, "failed", "sleeps", "Timeout")]
    assert "timeout (0.3s)" in events[1][4]
    assert_gone(tmp_path / "pid")


def test_shutting_the_agent_down_stops_the_action_and_reports_it(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    agent = run_agent(agents, server)
    server.service.send(start(WF, long_running("sleeps", tmp_path)))
    server.service.wait_for_events(1)
    wait_for_file(tmp_path / "pid")
    agent.close()
    assert server.service.described()[1][:4] == (WF, "failed", "sleeps", "AgentStopped")
    assert_gone(tmp_path / "pid")


def test_the_agent_reconnects_to_a_restarted_server_while_its_action_keeps_running(
    service: ScriptedService, server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    agent = run_agent(agents, server, once=True)
    go = tmp_path / "go"
    waits = sh("waits", f"echo up > {tmp_path}/up; until [ -e {go} ]; do sleep 0.05; done")
    service.send(start(WF, waits, sh("next", "true")))
    # Running means ActionStarted was answered (an unanswered one is published again, to the next server).
    wait_for_file(tmp_path / "up")
    server.stop()
    restarted = ScriptedServer(ScriptedService(), port=server.port)
    try:
        restarted.service.wait_for_stream()
        assert restarted.service.streams == ["machine1"]
        go.touch()
        agent.wait()
        assert service.described() == [(WF, "started", "waits")]
        assert restarted.service.described() == [
            (WF, "succeeded", "waits"),
            (WF, "started", "next"),
            (WF, "succeeded", "next"),
        ]
    finally:
        restarted.stop()


def test_the_agent_keeps_trying_while_no_server_answers(tmp_path: Path) -> None:
    service = ScriptedService()
    first = ScriptedServer(service)
    port = first.port
    first.stop()
    agent = RunningAgent(f"127.0.0.1:{port}", once=True)
    try:
        later = ScriptedServer(service, port=port)
        try:
            service.wait_for_stream()
            service.send(start(WF, sh("one", "true")))
            agent.wait()
            assert service.described() == [(WF, "started", "one"), (WF, "succeeded", "one")]
        finally:
            later.stop()
    finally:
        agent.close()


def test_events_that_fail_to_publish_are_retried_until_delivered(
    server: ScriptedServer, agents: list[RunningAgent]
) -> None:
    codes = grpc.StatusCode
    server.service.answers = [codes.UNAVAILABLE, codes.INTERNAL, codes.UNAVAILABLE]
    agent = run_agent(agents, server, once=True)
    server.service.send(start(WF, sh("one", "true"), sh("two", "exit 1")))
    agent.wait()
    assert server.service.described() == [
        (WF, "started", "one"),
        (WF, "succeeded", "one"),
        (WF, "started", "two"),
        (WF, "failed", "two", "NonZeroExit", "exit code 1"),
    ]
    assert server.service.attempts == 7


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
    ],
)
def test_an_event_the_server_refuses_is_dropped_and_the_workflow_abandoned(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path, code: grpc.StatusCode
) -> None:
    server.service.refuse = lambda event: code if event.HasField("action_started") else None
    agent = run_agent(agents, server, once=True)
    server.service.send(start(WF, sh("one", f"touch {tmp_path}/ran")))
    agent.wait()
    assert server.service.attempts == 1
    assert server.service.events == []
    assert not (tmp_path / "ran").exists()


def test_every_call_carries_the_token_and_a_rotated_token_file_is_read_again(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    run_agent(agents, server, token_file=token_file)
    server.service.send(start(WF, sh("one", "true")))
    server.service.wait_for_events(2)
    token_file.write_text("second-token\n")
    server.service.send(start("default/wf2", sh("two", "true")))
    server.service.wait_for_events(4)
    assert server.service.authorizations == [
        ("GetWorkflows", "Bearer first-token"),
        ("PublishEvent", "Bearer first-token"),
        ("PublishEvent", "Bearer first-token"),
        ("PublishEvent", "Bearer second-token"),
        ("PublishEvent", "Bearer second-token"),
    ]


def test_without_a_token_no_authorization_is_sent(server: ScriptedServer, agents: list[RunningAgent]) -> None:
    agent = run_agent(agents, server, once=True)
    server.service.send(start(WF, sh("one", "true")))
    agent.wait()
    assert {value for _, value in server.service.authorizations} == {""}


def test_a_finished_workflow_dispatched_again_before_its_last_event_landed_is_not_run_again(
    server: ScriptedServer, agents: list[RunningAgent], tmp_path: Path
) -> None:
    agent = run_agent(agents, server).agent
    runs = tmp_path / "runs"
    workflow = start(WF, sh("only", f"echo run >> {runs}"))
    released = server.service.hold(WF, "succeeded", "only")
    server.service.send(workflow)
    server.service.wait_until(lambda: server.service.attempts == 2, "the last event's publish")
    server.service.send(workflow)  # the server has not seen the end yet and dispatches it again
    # Commands are taken in order: once the marker workflow ran, the re-dispatch has been taken too.
    server.service.send(start("default/marker", sh("marker", "true")))
    server.service.wait_until(
        lambda: ("default/marker", "succeeded", "marker") in server.service.described(), "the marker workflow"
    )
    released.set()
    server.service.wait_until(lambda: len(server.service.events) == 4, "the last event")
    assert server.service.described()[-1] == (WF, "succeeded", "only")
    assert runs.read_text() == "run\n"
    poll_until(lambda: not agent.delivering, "the agent to see its last event delivered")
    # Once the end was delivered, the same id is a new workflow (deleted and created again): it runs.
    server.service.send(workflow)
    server.service.wait_until(lambda: len(server.service.events) == 6, "the re-created workflow's events")
    assert runs.read_text() == "run\nrun\n"


def test_the_agent_verifies_the_server_with_the_given_ca(service: ScriptedService, tmp_path: Path) -> None:
    cert = write_certificate(tmp_path / "tls")
    key = (tmp_path / "tls" / "tls.key").read_bytes()
    secure = ScriptedServer(service, credentials=grpc.ssl_server_credentials([(key, cert)]))
    agent = RunningAgent(secure.address, once=True, tls_ca=cert)
    try:
        service.wait_for_stream()
        service.send(start(WF, sh("one", "true")))
        agent.wait()
        assert service.described() == [(WF, "started", "one"), (WF, "succeeded", "one")]
    finally:
        agent.close()
        secure.stop()


def test_logs_name_actions_and_exit_codes_but_never_env_values_or_arguments(
    server: ScriptedServer, agents: list[RunningAgent]
) -> None:
    secret = "hunter2-do-not-log"
    with capture_logs() as logs:
        agent = run_agent(agents, server, once=True)
        server.service.send(
            start(WF, sh("secretive", f': {secret}; test -n "$PASSWORD"; exit 3', {"PASSWORD": secret}))
        )
        agent.wait()
    assert server.service.described()[-1][:4] == (WF, "failed", "secretive", "NonZeroExit")
    logged = repr(logs)
    assert "secretive" in logged
    assert "'exit_code': 3" in logged
    assert secret not in logged


def test_an_event_refused_on_a_retry_counts_as_delivered_by_the_attempt_whose_answer_was_lost(
    server: ScriptedServer, agents: list[RunningAgent]
) -> None:
    service = server.service
    service.lost_answers = [grpc.StatusCode.UNAVAILABLE]  # the ActionStarted lands; its answer is lost
    # As the workflow server does, a repeated event is out of order.
    service.refuse = lambda e: (
        grpc.StatusCode.FAILED_PRECONDITION if described(e) in map(described, service.events) else None
    )
    agent = run_agent(agents, server, once=True)
    service.send(start(WF, sh("one", "true"), sh("two", "true")))
    agent.wait()
    assert service.described() == [
        (WF, "started", "one"),
        (WF, "succeeded", "one"),
        (WF, "started", "two"),
        (WF, "succeeded", "two"),
    ]
    assert service.attempts == 5
    assert agent.agent.last_finished == Finished(WF, succeeded=True)


class BrokenRuntime:
    """A runtime with a defect: it raises instead of returning an outcome."""

    def run(self, action: object, stop: threading.Event, timeout: float) -> Outcome:
        raise KeyError("defect")


def test_a_runtime_that_raises_fails_the_action_instead_of_leaving_it_running(server: ScriptedServer) -> None:
    agent = Agent(AgentConfig("machine1", server.address, once=True), BrokenRuntime())
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        server.service.wait_for_stream()
        server.service.send(start(WF, sh("one", "true")))
        wait_all([thread])
    finally:
        agent.shutdown()
        thread.join()
    assert server.service.described() == [
        (WF, "started", "one"),
        (WF, "failed", "one", "RuntimeFailed", "the agent's runtime failed: KeyError"),
    ]
