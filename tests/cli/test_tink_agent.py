"""``capa tink agent``: bad flags exit 2 naming the flag, a Docker runtime without an engine exits 1, and as
a real process against a real grpcio server scripted in the test (:mod:`tests.tinkerbell.scripted_server`)
it runs a workflow, and SIGTERM stops it with exit 0, killing the running action's process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from capa_py.api.meta import ObjectMeta
from capa_py.api.tinkerbell import Action as TemplateAction
from capa_py.api.tinkerbell import Template, TemplateSpec, Workflow
from capa_py.operations import apply_objects
from capa_py.store import SQLiteStore
from tests.cli.cli_support import Cli
from tests.cli.test_controller_cmd import ControllerProcess
from tests.cli.test_tink_hegel import _free_port
from tests.e2e.e2e_support import capa_env
from tests.tinkerbell.fake_docker import fake_engine
from tests.tinkerbell.scripted_server import (
    SAFETY_TIMEOUT,
    ScriptedServer,
    ScriptedService,
    action,
    start,
    wait_for_file,
)
from tests.tinkerbell.server_world import hardware, workflow

WF = "default/wf1"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--server", "no-port"], "--server 'no-port': expected HOST:PORT"),
        (["--server", "127.0.0.1:70000"], "--server '127.0.0.1:70000': expected HOST:PORT"),
        (["--action-timeout", "soon"], "--action-timeout: not a duration: 'soon'"),
        (["--action-timeout", "0s"], "--action-timeout: must be more than zero"),
        (["--reconnect-max", "1x"], "--reconnect-max: not a duration"),
        (["--stop-grace", "0"], "--stop-grace: must be more than zero"),
        (["--runtime", "vm"], "--runtime must be process or docker, not 'vm'"),
        (["--tls-ca", "/nonexistent/ca.pem"], "--tls-ca /nonexistent/ca.pem: No such file or directory"),
    ],
)
def test_a_bad_flag_exits_2_naming_it(cli: Cli, flags: list[str], message: str) -> None:
    result = cli("tink", "agent", "--id", "machine1", *flags)
    assert result.exit_code == 2, result
    assert message in result.stderr, result


def test_a_file_that_is_no_certificate_is_refused_as_tls_ca(cli: Cli, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n")
    result = cli("tink", "agent", "--id", "machine1", "--tls-ca", str(ca))
    assert result.exit_code == 2, result
    assert f"--tls-ca {ca}: not a PEM certificate" in result.stderr


@pytest.mark.parametrize("flags", [[], ["--id", " "]])
def test_an_agent_id_is_required(cli: Cli, flags: list[str]) -> None:
    result = cli("tink", "agent", *flags)
    assert result.exit_code == 2, result
    assert "--id" in result.stderr


def test_the_docker_runtime_without_an_engine_exits_1(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    result = cli("tink", "agent", "--id", "machine1", "--runtime", "docker")
    assert result.exit_code == 1, result
    assert "--runtime docker: no Docker engine answers" in result.stderr


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    running = ScriptedServer(ScriptedService())
    yield running
    running.stop()


def agent_process(
    tmp_path: Path,
    address: str,
    *flags: str,
    agent_id: str = "machine1",
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> subprocess.Popen[str]:
    """``capa tink agent`` as a process; its log (JSON lines, from INFO up) goes to ``log`` when given."""
    logging = ["-v", "--log-format", "json"] if log is not None else []
    argv = [sys.executable, "-m", "capa_app.cli", *logging, "tink", "agent", "--id", agent_id]
    argv += ["--server", address]
    with ExitStack() as files:
        stderr = files.enter_context(log.open("w")) if log is not None else subprocess.DEVNULL
        return subprocess.Popen(
            [*argv, "--reconnect-max", "0.2s", "--stop-grace", "2s", *flags],
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            env=capa_env(tmp_path / "home", env),
            cwd=tmp_path,
        )


def issue_tokens(
    store_flags: Sequence[str], hardware: Sequence[str], directory: Path, namespace: str = "default"
) -> Path:
    """``capa STORE_FLAGS tink agent-credentials NAME -n NAMESPACE --token-file DIRECTORY/NAME.token``
    for each Hardware name (the Hardware may not exist yet); returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in hardware:
        token_file = directory / f"{name}.token"
        argv = [sys.executable, "-m", "capa_app.cli", *store_flags, "tink", "agent-credentials", name]
        done = subprocess.run(
            [*argv, "-n", namespace, "--token-file", str(token_file)],
            capture_output=True,
            text=True,
            env=capa_env(directory / "home"),
            cwd=directory,
            timeout=SAFETY_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, done
        assert f"--token-file {token_file}" in done.stdout, done
        assert token_file.read_text().strip() not in done.stdout + done.stderr, "the token is not printed"
    return directory


@contextmanager
def running_agents(
    tmp_path: Path,
    address: str,
    agent_ids: Sequence[str],
    *flags: str,
    logs: Path | None = None,
    tokens: Path | None = None,
) -> Iterator[list[subprocess.Popen[str]]]:
    """One ``capa tink agent`` per id, pointed at ``address`` (each one's log in ``logs/<id>.log`` when
    ``logs`` is given, its token read from ``tokens/<id>.token`` when ``tokens`` is given); on a normal
    exit each is stopped with SIGTERM and must exit 0, and any still running is killed on the way out."""
    agents: list[subprocess.Popen[str]] = []
    try:
        for agent_id in agent_ids:
            log = logs / f"{agent_id}.log" if logs is not None else None
            token = ("--token-file", str(tokens / f"{agent_id}.token")) if tokens is not None else ()
            agents.append(agent_process(tmp_path, address, *flags, *token, agent_id=agent_id, log=log))
        yield agents
        for agent in agents:
            agent.send_signal(signal.SIGTERM)
        assert [a.wait(SAFETY_TIMEOUT) for a in agents] == [0] * len(agents)
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait(SAFETY_TIMEOUT)
            if agent.stdout is not None:
                agent.stdout.close()


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        code = proc.wait(SAFETY_TIMEOUT)
        assert proc.stdout is not None
        return code, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(SAFETY_TIMEOUT)
        if proc.stdout is not None:
            proc.stdout.close()


def test_capa_tink_agent_once_runs_one_workflow_and_exits_0(server: ScriptedServer, tmp_path: Path) -> None:
    proc = agent_process(tmp_path, server.address, "--once")
    server.service.wait_for_stream()
    out = tmp_path / "out"
    server.service.send(start(WF, action("one", "-c", f'echo "$WORD" > {out}', cmd="sh", env={"WORD": "hi"})))
    code, stdout = finish(proc)
    assert code == 0
    assert stdout.splitlines() == [f"agent: machine1 via {server.address} (runtime process)", "stopped"]
    assert out.read_text() == "hi\n"
    assert server.service.described() == [(WF, "started", "one"), (WF, "succeeded", "one")]


def test_capa_tink_agent_once_exits_1_when_the_workflow_fails(server: ScriptedServer, tmp_path: Path) -> None:
    proc = agent_process(tmp_path, server.address, "--once")
    server.service.wait_for_stream()
    server.service.send(start(WF, action("fails", "-c", "exit 9", cmd="sh")))
    code, stdout = finish(proc)
    assert code == 1
    assert stdout.splitlines()[-1] == "stopped"
    assert server.service.described()[-1] == (WF, "failed", "fails", "NonZeroExit", "exit code 9")


def test_capa_tink_agent_runs_an_action_as_a_container_with_the_docker_runtime(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """The Docker engine is a scripted Engine API on a unix socket (:mod:`tests.tinkerbell.fake_docker`)."""
    socket_path = tmp_path / "docker.sock"
    with fake_engine(socket_path) as engine:
        engine.exit_code = 0
        docker_host = {"DOCKER_HOST": f"unix://{socket_path}"}
        proc = agent_process(tmp_path, server.address, "--once", "--runtime", "docker", env=docker_host)
        server.service.wait_for_stream()
        server.service.send(start(WF, action("disk", "--verbose", image="quay.io/tinkerbell/image2disk:v1")))
        code, stdout = finish(proc)
    assert code == 0, stdout
    assert stdout.splitlines()[0].endswith("(runtime docker)")
    assert server.service.described() == [(WF, "started", "disk"), (WF, "succeeded", "disk")]
    assert [(c["Image"], c["Cmd"]) for c in engine.created] == [
        ("quay.io/tinkerbell/image2disk:v1", ["--verbose"])
    ]


def test_sigterm_stops_the_running_action_and_exits_0(server: ScriptedServer, tmp_path: Path) -> None:
    proc = agent_process(tmp_path, server.address)
    server.service.wait_for_stream()
    pid_file = tmp_path / "pid"
    script = f"echo $$ > {pid_file}; exec sleep 30"
    server.service.send(start(WF, action("sleeps", "-c", script, cmd="sh")))
    pid = int(wait_for_file(pid_file))
    proc.send_signal(signal.SIGTERM)
    code, stdout = finish(proc)
    assert code == 0
    assert stdout.splitlines()[-1] == "stopped"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert [e[:4] for e in server.service.described()] == [
        (WF, "started", "sleeps"),
        (WF, "failed", "sleeps", "AgentStopped"),
    ]


def test_a_workflow_applied_to_capa_controller_runs_to_succeeded_on_capa_tink_agent(
    tmp_path: Path, closed_endpoint: str
) -> None:
    """The walkthrough as processes: ``capa controller --tink-server-port`` prepares and serves the
    workflow, ``capa tink agent --once`` runs it with the process runtime."""
    state = tmp_path / "state.db"
    port = _free_port()
    controller = ControllerProcess(state, closed_endpoint, "--tink-server-port", str(port))
    try:
        controller.line("controllers running: ")
        out = tmp_path / "out"
        shell = Template(
            metadata=ObjectMeta(name="shell", namespace="default"),
            spec=TemplateSpec(
                actions=[
                    TemplateAction(
                        name="hello", image="busybox", command="/bin/sh", args=["-c", f"echo hi > {out}"]
                    )
                ]
            ),
        )
        with SQLiteStore(state) as store:
            apply_objects(
                store, [hardware("hw1", "aa:bb:cc:dd:ee:01"), shell, workflow("wf", "hw1", "shell")]
            )
        tokens = issue_tokens(("--state", str(state)), ["hw1"], tmp_path / "tokens")
        token_file = str(tokens / "hw1.token")
        agent = agent_process(
            tmp_path, f"127.0.0.1:{port}", "--once", "--token-file", token_file, agent_id="hw1"
        )
        code, stdout = finish(agent)
        assert code == 0, stdout
        assert out.read_text() == "hi\n"
        with SQLiteStore(state) as store:
            assert store.get(Workflow, "wf", "default").status.state == "Succeeded"
        controller.proc.send_signal(signal.SIGTERM)
        assert controller.wait() == 0, str(controller)
    finally:
        controller.close()
