"""Workflows from apply to their end state with everything real: a SQLite store, the workflow controller
preparing and supervising (reconciled by the test, on a fake clock), the gRPC workflow server on
127.0.0.1:0, and the agent with the process runtime running real host processes (in a thread, and once as
a ``capa tink agent`` process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from capa_py.api.meta import ObjectMeta
from capa_py.api.tinkerbell import Action, Template, TemplateSpec, Workflow
from capa_py.tinkerbell.agent import Agent, AgentConfig
from capa_py.tinkerbell.agentauth import TOKEN_ENV
from capa_py.tinkerbell.backoff import Backoff
from capa_py.tinkerbell.dispatch import normalise_agent_id
from capa_py.tinkerbell.runtimes import ProcessRuntime
from capa_py.tinkerbell.server import start_in_thread
from tests.e2e.e2e_support import capa_env
from tests.tinkerbell.scripted_server import SAFETY_TIMEOUT, poll_until, wait_all, wait_for_file
from tests.tinkerbell.server_world import World, hardware, workflow

MAC = "aa:bb:cc:dd:ee:01"
KEEPS_RUNNING = "workflow dispatched again while it runs: it keeps running"


def shell_template(*scripts: tuple[str, str], timeout: int | None = None) -> Template:
    """A Template named ``shell`` whose actions run ``sh -c SCRIPT``, with a template-level env."""
    return Template(
        metadata=ObjectMeta(name="shell", namespace="default"),
        spec=TemplateSpec(
            actions=[
                Action(name=name, image="busybox", command="/bin/sh", args=["-c", script], timeout=timeout)
                for name, script in scripts
            ],
            env={"GREETING": "hello"},
        ),
    )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    w.apply(hardware("hw1", MAC))
    yield w
    w.close()


class AgentThread:
    def __init__(self, world: World, agent_id: str = MAC.upper(), **config: object) -> None:
        token = world.tokens.get(normalise_agent_id(agent_id))
        settings: dict[str, object] = {
            "reconnect_initial": 0.05,
            "reconnect_max": 0.5,
            "token": token,
            **config,
        }
        self.agent = Agent(
            AgentConfig(agent_id, world.server.address, **settings),  # type: ignore[arg-type]
            ProcessRuntime(stop_grace=2.0),
        )
        self.thread = threading.Thread(target=self.agent.run, name="agent", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        wait_all([self.thread])

    def close(self) -> None:
        self.agent.shutdown()
        wait_all([self.thread])


@pytest.fixture
def agents() -> Iterator[list[AgentThread]]:
    started: list[AgentThread] = []
    yield started
    for agent in started:
        agent.close()


def submit(
    world: World, *scripts: tuple[str, str], timeout: int | None = None, workflow_timeout: int = 0
) -> None:
    submitted = workflow("wf", "hw1", template_name="shell")
    submitted.spec.timeout = workflow_timeout
    world.apply(shell_template(*scripts, timeout=timeout), submitted)
    world.prepare("wf")


def test_a_workflow_runs_to_succeeded_on_a_real_agent(
    world: World, agents: list[AgentThread], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    submit(world, ("first", f'echo "first $GREETING" >> {out}'), ("second", f"echo second >> {out}"))
    agent = AgentThread(world, once=True)  # by MAC, in another case than the Hardware's
    agents.append(agent)
    agent.wait()
    status = world.wait_state("wf", "Succeeded").status
    assert [(name, a.state) for name, a in world.get("wf").ordered_actions()] == [
        ("first", "Succeeded"),
        ("second", "Succeeded"),
    ]
    assert status.reason is None
    assert out.read_text() == "first hello\nsecond\n"


def test_a_failing_action_fails_the_workflow_with_its_reason(
    world: World, agents: list[AgentThread], tmp_path: Path
) -> None:
    submit(world, ("first", "exit 5"), ("second", f"touch {tmp_path}/second"))
    agent = AgentThread(world, agent_id="hw1", once=True)
    agents.append(agent)
    agent.wait()
    status = world.wait_state("wf", "Failed").status
    assert (status.reason, status.message) == ("NonZeroExit", "exit code 5")
    actions = dict(world.get("wf").ordered_actions())
    assert actions["first"].state == "Failed"
    assert actions["second"].state == "Pending"
    assert not (tmp_path / "second").exists()


def test_an_action_over_the_agents_timeout_fails_the_workflow_with_timeout(
    world: World, agents: list[AgentThread], tmp_path: Path
) -> None:
    submit(world, ("stalls", f"echo $$ > {tmp_path}/pid; exec sleep 30"))
    agent = AgentThread(world, once=True, action_timeout=0.3)
    agents.append(agent)
    agent.wait()
    status = world.wait_state("wf", "Failed").status
    assert status.reason == "Timeout"
    assert "timeout (0.3s)" in (status.message or "")
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "pid").read_text()), 0)


def test_deleting_a_running_workflow_stops_the_agents_action_and_cancels_it(
    world: World, agents: list[AgentThread], tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    submit(world, ("sleeps", f"echo $$ > {pid_file}; exec sleep 30"), ("after", f"touch {tmp_path}/after"))
    agent = AgentThread(world, once=True)
    agents.append(agent)
    pid = int(wait_for_file(pid_file))
    world.wait_state("wf", "Running")
    world.store.delete(Workflow, "wf", "default")
    world.supervise("wf")  # the controller moves it to Cancelling; the server tells the agent to stop
    agent.wait()
    status = world.wait_state("wf", "Canceled").status
    assert status.actions["sleeps"].state == "Failed"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (tmp_path / "after").exists()
    world.supervise("wf")
    poll_until(lambda: not world.store.list(Workflow), "the deletion to complete")


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"timeout": 60}, "action 'stalls' did not finish within its timeout of 60s"),
        ({"workflow_timeout": 60}, "the workflow did not finish within its timeout of 60s"),
    ],
)
def test_the_supervisor_fails_a_stalled_workflow_and_the_agent_is_told_to_stop(
    world: World, agents: list[AgentThread], tmp_path: Path, limits: dict[str, int], message: str
) -> None:
    pid_file = tmp_path / "pid"
    submit(world, ("quick", "true"), ("stalls", f"echo $$ > {pid_file}; exec sleep 30"), **limits)
    agent = AgentThread(world, once=True)  # its own --action-timeout (1h) is far away
    agents.append(agent)
    pid = int(wait_for_file(pid_file))
    world.wait_state("wf", "Running")
    world.clock.advance(61)  # past the timeout, on the controller's clock: no waiting
    world.supervise("wf")
    assert (world.get("wf").status.reason, world.get("wf").status.message) == ("Timeout", message)
    # The server stops the workflow on the agent's stream; the agent kills the action and ends (--once).
    agent.wait()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    status = world.get("wf").status
    assert (status.state, status.reason) == ("Failed", "Timeout"), "the agent's late event changed nothing"


def test_the_agent_keeps_its_running_workflow_across_a_server_restart(
    world: World, agents: list[AgentThread], tmp_path: Path
) -> None:
    go, up = tmp_path / "go", tmp_path / "up"
    waits = f"echo up >> {up}; until [ -e {go} ]; do sleep 0.05; done"
    submit(world, ("waits", waits), ("next", "true"))
    agent = AgentThread(world, once=True)
    agents.append(agent)
    wait_for_file(up)
    world.wait_state("wf", "Running")
    port = world.server.port
    with capture_logs() as logs:
        world.server.stop()
        world.server = start_in_thread(
            world.store, "127.0.0.1", port, backoff=Backoff(10, 300), clock=world.clock
        )
        # The restarted server sends the Running workflow again; the agent keeps running it.
        poll_until(
            lambda: any(e["event"] == KEEPS_RUNNING for e in logs), "the agent to take the re-dispatch"
        )
    go.touch()
    agent.wait()
    assert world.wait_state("wf", "Succeeded").status.reason is None
    assert up.read_text() == "up\n", "the running action was neither restarted nor run twice"


def test_capa_tink_agent_runs_a_workflow_and_sigterm_between_workflows_exits_0(
    world: World, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    submit(world, ("only", f'echo "$GREETING from a process" > {out}'))
    token_file = tmp_path / "hw1.token"
    token_file.write_text(world.tokens["hw1"] + "\n")
    argv = [sys.executable, "-m", "capa_app.cli", "tink", "agent", "--id", "hw1"]
    proc = subprocess.Popen(
        [*argv, "--server", world.server.address, "--reconnect-max", "0.5s", "--token-file", str(token_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        env=capa_env(tmp_path / "home"),
        cwd=tmp_path,
    )
    try:
        world.wait_state("wf", "Succeeded")
        assert out.read_text() == "hello from a process\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(SAFETY_TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(SAFETY_TIMEOUT)
        assert proc.stdout is not None
        proc.stdout.close()


def test_the_supervisor_fails_a_workflow_whose_agent_stalls_before_starting_it(
    world: World, tmp_path: Path
) -> None:
    """A real ``capa tink agent`` connects and then hangs (SIGSTOP, as a frozen machine would): its workflow
    is dispatched but never starts, so the supervisor fails it with SchedulingTimeout on the controller's
    clock; the agent, woken up, changes nothing."""
    ran = tmp_path / "ran"
    argv = [sys.executable, "-m", "capa_app.cli", "tink", "agent", "--id", "hw1"]
    proc = subprocess.Popen(
        [*argv, "--server", world.server.address, "--reconnect-max", "0.5s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=capa_env(tmp_path / "home", {TOKEN_ENV: world.tokens["hw1"]}),  # the token from the environment
        cwd=tmp_path,
    )
    try:
        poll_until(lambda: len(world.server.dispatcher.sessions()) == 1, "the agent to connect")
        proc.send_signal(signal.SIGSTOP)
        submit(world, ("only", f"touch {ran}"))
        world.wait_state("wf", "Scheduled")
        world.clock.advance(61)  # past the 60 s scheduling timeout, on the controller's clock
        world.supervise("wf")
        status = world.get("wf").status
        assert (status.state, status.reason) == ("Failed", "SchedulingTimeout"), status
        proc.send_signal(signal.SIGCONT)
        # The woken agent reads StartWorkflow and then StopWorkflow; whatever it publishes is refused.
        poll_until(
            lambda: world.server.dispatcher.known_state(("default", "wf")) == "Failed", "the server to see it"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(SAFETY_TIMEOUT) == 0
        status = world.get("wf").status
        assert (status.state, status.reason) == ("Failed", "SchedulingTimeout"), "the late agent changed it"
        assert {a.state for a in status.actions.values()} == {"Pending"}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(SAFETY_TIMEOUT)
