"""The agent's runtimes on their own: the process runtime runs real host processes (a stop reaches the
action's children, a signal death is a failure naming the signal); the Docker runtime runs real containers
where a Docker engine answers and is skipped with the reason elsewhere; the requests it makes are checked
everywhere against a scripted Engine API (:mod:`tests.tinkerbell.fake_docker`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.tinkerbell.proto import workflow_pb2
from capa_py.tinkerbell.runtimes import (
    STOPPED,
    SUCCEEDED,
    Action,
    DockerRuntime,
    DockerUnavailable,
    Outcome,
    ProcessRuntime,
)
from tests.tinkerbell.fake_docker import FakeEngine, fake_engine
from tests.tinkerbell.scripted_server import poll_until, wait_for_file


def sh(script: str, **fields: object) -> Action:
    return Action(id="a", name="a", image="busybox", cmd="sh", args=("-c", script), **fields)  # type: ignore[arg-type]


def test_an_action_is_read_from_the_wire_with_its_namespaces() -> None:
    wire = workflow_pb2.Workflow.Action(
        id="disk",
        name="disk",
        image="quay.io/tinkerbell/image2disk",
        args=["-v"],
        env={"A": "1"},
        volumes=["/dev:/dev"],
        ns=workflow_pb2.Workflow.Action.Namespace(pid="host"),
    )
    action = Action.from_proto(wire)
    assert action == Action(
        id="disk",
        name="disk",
        image="quay.io/tinkerbell/image2disk",
        cmd=None,
        args=("-v",),
        env={"A": "1"},
        volumes=("/dev:/dev",),
        pid_namespace="host",
        network_namespace=None,
    )
    assert action.command_line() == ["-v"]
    wire.cmd = "/bin/image2disk"
    assert Action.from_proto(wire).command_line() == ["/bin/image2disk", "-v"]


def test_exit_codes_decide_the_outcome() -> None:
    runtime = ProcessRuntime()
    assert runtime.run(sh("exit 0"), threading.Event(), 30) == SUCCEEDED
    assert runtime.run(sh("exit 7"), threading.Event(), 30) == Outcome.failed("NonZeroExit", "exit code 7")
    assert runtime.run(sh("kill -KILL $$"), threading.Event(), 30) == Outcome.failed(
        "NonZeroExit", "killed by signal SIGKILL"
    )


def test_stopping_an_action_kills_its_children_too(tmp_path: Path) -> None:
    child_file = tmp_path / "child"
    stop = threading.Event()
    runtime = ProcessRuntime(stop_grace=2.0)
    outcome: list[Outcome] = []
    action = sh(f"sleep 30 & echo $! > {child_file}; wait")
    worker = threading.Thread(target=lambda: outcome.append(runtime.run(action, stop, 60)))
    worker.start()
    child = int(wait_for_file(child_file))
    stop.set()
    worker.join(30)
    assert outcome == [STOPPED]
    assert not running(child)


def test_an_action_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    stop = threading.Event()
    runtime = ProcessRuntime(stop_grace=0.2)
    outcome: list[Outcome] = []
    action = sh(f"trap '' TERM; echo $$ > {ready}; while true; do sleep 0.05; done")
    worker = threading.Thread(target=lambda: outcome.append(runtime.run(action, stop, 60)))
    worker.start()
    pid = int(wait_for_file(ready))
    stop.set()
    worker.join(30)
    assert outcome == [STOPPED]
    assert not running(pid)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped yet has ended: it is not running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _docker_runtime() -> DockerRuntime:
    try:
        return DockerRuntime.from_env(stop_grace=1.0)
    except DockerUnavailable as exc:
        pytest.skip(f"the Docker runtime needs a Docker engine: {exc}")


def test_the_docker_runtime_runs_a_container_with_env_volumes_and_exit_code(tmp_path: Path) -> None:
    runtime = _docker_runtime()
    action = Action(
        id="a",
        name="a",
        image="busybox:1.36",
        cmd="sh",
        args=("-c", 'echo "$WORD" > /out/word; exit 4'),
        env={"WORD": "hi"},
        volumes=(f"{tmp_path}:/out",),
        network_namespace="host",
    )
    assert runtime.run(action, threading.Event(), 120) == Outcome.failed("NonZeroExit", "exit code 4")
    assert (tmp_path / "word").read_text() == "hi\n"


def test_the_docker_runtime_reports_an_image_it_cannot_pull() -> None:
    runtime = _docker_runtime()
    action = Action(id="a", name="a", image="127.0.0.1:1/no/such-image:1", args=("true",))
    outcome = runtime.run(action, threading.Event(), 120)
    assert (outcome.state, outcome.reason) == ("failed", "ImagePullFailed")


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEngine]:
    socket_path = tmp_path / "docker.sock"
    with fake_engine(socket_path) as running:
        monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
        yield running


def test_the_docker_runtime_creates_the_container_the_action_describes(engine: FakeEngine) -> None:
    """Against a scripted Engine API (the SDK is the real client): what the runtime asks Docker for."""
    engine.exit_code = 4
    engine.output = b"some output\n"
    runtime = DockerRuntime.from_env(stop_grace=1.0)
    action = Action(
        id="a", name="a", image="busybox:1.36", cmd="sh", args=("-c", "exit 4"), env={"WORD": "hi"},
        volumes=("/dev:/dev", "/tmp/x:/out:ro"), pid_namespace="host", network_namespace="host",
    )  # fmt: skip
    assert runtime.run(action, threading.Event(), 120) == Outcome.failed("NonZeroExit", "exit code 4")
    (body,) = engine.created
    assert (body["Image"], body["Entrypoint"], body["Cmd"], body["Env"]) == (
        "busybox:1.36", ["sh"], ["-c", "exit 4"], ["WORD=hi"],
    )  # fmt: skip
    host = body["HostConfig"]
    assert (host["Binds"], host["PidMode"], host["NetworkMode"]) == (
        ["/dev:/dev", "/tmp/x:/out:ro"], "host", "host",
    )  # fmt: skip
    methods = [request for request in engine.requests if request[1] != "/containers/c0ffee/json"]
    assert ("POST", "/images/create") in methods
    assert methods[-2:] == [("GET", "/containers/c0ffee/logs"), ("DELETE", "/containers/c0ffee")]
    runtime.client.close()


def test_the_docker_runtime_without_cmd_keeps_the_images_entrypoint(engine: FakeEngine) -> None:
    engine.exit_code = 0
    runtime = DockerRuntime.from_env()
    action = Action(id="a", name="a", image="quay.io/tinkerbell/image2disk:v1", args=("--verbose",))
    assert runtime.run(action, threading.Event(), 120) == SUCCEEDED
    (body,) = engine.created
    assert body.get("Entrypoint") is None
    assert body["Cmd"] == ["--verbose"]
    assert body["HostConfig"].get("NetworkMode") in (None, "default")
    runtime.client.close()


def test_the_docker_runtime_stops_the_container_and_removes_it(engine: FakeEngine) -> None:
    runtime = DockerRuntime.from_env(stop_grace=1.0)
    stop = threading.Event()
    outcome: list[Outcome] = []
    worker = threading.Thread(
        target=lambda: outcome.append(runtime.run(Action(id="a", name="a", image="busybox"), stop, 120))
    )
    worker.start()
    poll_until(lambda: engine.state == "running", "the container to start")
    stop.set()
    worker.join(30)
    assert outcome == [STOPPED]
    assert ("POST", "/containers/c0ffee/stop") in engine.requests
    assert engine.state == "removed"
    runtime.client.close()


def test_the_docker_runtime_reports_a_failed_pull_of_a_missing_image(engine: FakeEngine) -> None:
    engine.pullable = False
    runtime = DockerRuntime.from_env()
    outcome = runtime.run(Action(id="a", name="a", image="private/image:1"), threading.Event(), 120)
    assert (outcome.state, outcome.reason) == ("failed", "ImagePullFailed")
    assert (outcome.message or "").startswith("cannot pull private/image:1:")
    assert engine.created == []
    runtime.client.close()
