"""Action runtimes of the Tinkerbell agent: how one action of a workflow is run on the machine.

A runtime is anything with ``run(action, stop, timeout) -> Outcome`` (:class:`Runtime`). It returns when
the action ends, when ``stop`` is set (the action is stopped and the outcome is ``stopped``) or when
``timeout`` seconds have passed (the action is stopped and fails with reason ``Timeout``). It never raises
for what the action does; the agent turns the outcome into an ``ActionSucceeded`` or ``ActionFailed``.

* :class:`ProcessRuntime` (``--runtime process``) runs ``cmd`` followed by ``args`` as a host process
  (without ``cmd``, ``args`` is the whole command line; with neither the action fails ``NoCommand``). Its
  environment is the agent's own overlaid with the action's ``env``. It runs in a process group of its own,
  so stopping it (SIGTERM, then SIGKILL after the grace period) reaches its children too. Its output goes
  to the agent's log at debug level, one line per record. The image is recorded in the log, never pulled;
  volumes and namespaces are not applied (one log line per action says so). Exit code 0 is success.
* :class:`DockerRuntime` (``--runtime docker``) runs the action as a container through the Docker SDK:
  pulls the image (failure: ``ImagePullFailed``, unless the image is already on the machine), uses
  ``cmd`` as the entrypoint and ``args`` as the command, sets ``env``, mounts ``volumes`` (Docker's
  ``src:dst[:opts]`` form), joins the ``pid`` and ``network`` namespaces ``ns`` names (``host``), waits
  for the exit code, logs the container's output at debug level and removes the container; stopping is
  ``docker stop`` with the grace period.

Failure reasons are UpperCamelCase: ``NonZeroExit`` (the message carries the exit code), ``Timeout``,
``NoCommand``, ``StartFailed`` (the command or container could not be started), ``ImagePullFailed``.
Neither runtime logs env values or arguments, which may carry secrets: only the action's name, image and
exit code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from capa_py.logging import get_logger
from capa_py.tinkerbell.proto import workflow_pb2

if TYPE_CHECKING:
    import docker

_log = get_logger("tinkerbell.agent.runtime")

DEFAULT_STOP_GRACE = 10.0
"""Seconds between SIGTERM (or ``docker stop``) and SIGKILL when an action is stopped."""

_POLL = 0.05


class Action(BaseModel):
    """One action of a dispatched workflow, as the runtimes need it (from the wire's ``Workflow.Action``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    image: str
    cmd: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    volumes: tuple[str, ...] = ()
    pid_namespace: str | None = None
    network_namespace: str | None = None

    @classmethod
    def from_proto(cls, action: workflow_pb2.Workflow.Action) -> Action:
        ns = action.ns if action.HasField("ns") else None
        return cls(
            id=action.id,
            name=action.name or action.id,
            image=action.image,
            cmd=action.cmd if action.HasField("cmd") and action.cmd else None,
            args=tuple(action.args),
            env=dict(action.env),
            volumes=tuple(action.volumes),
            pid_namespace=(ns.pid or None) if ns is not None and ns.HasField("pid") else None,
            network_namespace=(ns.network or None) if ns is not None and ns.HasField("network") else None,
        )

    def command_line(self) -> list[str]:
        """``cmd`` then ``args``; ``args`` alone without ``cmd``; empty when the action names neither."""
        return [self.cmd, *self.args] if self.cmd else list(self.args)


@dataclass(frozen=True)
class Outcome:
    """How an action ended: ``succeeded``, ``failed`` (with a reason and message) or ``stopped``."""

    state: Literal["succeeded", "failed", "stopped"]
    reason: str | None = None
    message: str | None = None

    @classmethod
    def failed(cls, reason: str, message: str) -> Outcome:
        return cls("failed", reason, message)


SUCCEEDED = Outcome("succeeded")
STOPPED = Outcome("stopped")


class Runtime(Protocol):
    """Runs one action; see the module docstring for the contract."""

    def run(self, action: Action, stop: threading.Event, timeout: float) -> Outcome: ...


def _timed_out(timeout: float) -> Outcome:
    return Outcome.failed("Timeout", f"the action ran longer than its timeout ({timeout:g}s) and was stopped")


def _exited(code: int) -> Outcome:
    if code == 0:
        return SUCCEEDED
    if code < 0:
        return Outcome.failed("NonZeroExit", f"killed by signal {signal.Signals(-code).name}")
    return Outcome.failed("NonZeroExit", f"exit code {code}")


class ProcessRuntime:
    """Runs actions as host processes (see the module docstring)."""

    def __init__(self, stop_grace: float = DEFAULT_STOP_GRACE) -> None:
        self.stop_grace = stop_grace

    def run(self, action: Action, stop: threading.Event, timeout: float) -> Outcome:
        log = _log.bind(action=action.name, image=action.image)
        argv = action.command_line()
        if not argv:
            return Outcome.failed("NoCommand", "the action has neither cmd nor args: nothing to run")
        if action.volumes or action.pid_namespace or action.network_namespace:
            log.info("the process runtime does not apply volumes or namespaces", volumes=len(action.volumes))
        log.info("running action as a host process (image not pulled)", program=os.path.basename(argv[0]))
        try:
            proc = subprocess.Popen(
                argv,
                env={**os.environ, **action.env},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            return Outcome.failed("StartFailed", f"cannot start {argv[0]!r}: {exc.strerror or exc}")
        assert proc.stdout is not None
        reader = threading.Thread(
            target=_log_output, args=(proc.stdout, action.name), name=f"output-{action.name}", daemon=True
        )
        reader.start()
        try:
            deadline = time.monotonic() + timeout
            while proc.poll() is None:
                if stop.is_set():
                    self._stop(proc)
                    return STOPPED
                if time.monotonic() >= deadline:
                    self._stop(proc)
                    return _timed_out(timeout)
                # Waiting on the process (not on ``stop``) notices its exit at once; a stop or the
                # deadline is noticed within one poll.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(min(_POLL, max(deadline - time.monotonic(), 0.0)))
            log.info("action exited", exit_code=proc.returncode)
            return _exited(proc.returncode)
        finally:
            if proc.poll() is None:  # an exception above: never leave the action behind
                self._stop(proc)
            reader.join(self.stop_grace)
            proc.stdout.close()

    def _stop(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM to the action's process group, SIGKILL after the grace period; reaps the process."""
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(self.stop_grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        # Children that ignored SIGTERM while their leader exited are not left behind either.
        _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _log_output(stream: IO[bytes], action: str) -> None:
    for raw in stream:
        _log.debug("action output", action=action, line=raw.decode(errors="replace").rstrip("\n"))


class DockerUnavailable(Exception):
    """No Docker engine answers."""


class DockerRuntime:
    """Runs actions as Docker containers (see the module docstring)."""

    def __init__(self, client: docker.DockerClient, stop_grace: float = DEFAULT_STOP_GRACE) -> None:
        self.client = client
        self.stop_grace = stop_grace

    @classmethod
    def from_env(cls, stop_grace: float = DEFAULT_STOP_GRACE) -> DockerRuntime:
        """The engine ``DOCKER_HOST`` (or the default socket) names; :class:`DockerUnavailable` when it
        does not answer."""
        import docker
        from docker.errors import DockerException

        host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        socket_path = host.removeprefix("unix://")
        if host.startswith("unix://") and not os.path.exists(socket_path):
            # Checked first: the SDK leaks its socket when the path is missing.
            raise DockerUnavailable(f"no Docker engine answers: {socket_path} does not exist")
        # A client pinned to an old API version connects only when asked, so it can be closed when the
        # engine does not answer (the auto-negotiating one connects while constructed and leaks its socket).
        probe = docker.from_env(version="1.24")
        try:
            probe.ping()
        except (DockerException, OSError) as exc:  # requests' connection errors are OSErrors
            raise DockerUnavailable(f"no Docker engine answers: {_docker_message(exc)}") from exc
        finally:
            probe.close()
        return cls(docker.from_env(), stop_grace)

    def run(self, action: Action, stop: threading.Event, timeout: float) -> Outcome:
        from docker.errors import DockerException

        log = _log.bind(action=action.name, image=action.image)
        try:
            log.info("pulling image")
            self.client.images.pull(action.image)
        except DockerException as exc:
            if not self._present(action.image):
                message = f"cannot pull {action.image}: {_docker_message(exc)}"
                return Outcome.failed("ImagePullFailed", message)
            # A registry out of reach (an air-gapped lab) does not stop an image already on the machine.
            log.warning("cannot pull the image: using the local copy", error=_docker_message(exc))
        try:
            container = self.client.containers.create(
                action.image,
                entrypoint=[action.cmd] if action.cmd else None,
                command=list(action.args) or None,
                environment=dict(action.env),
                volumes=list(action.volumes),
                pid_mode=action.pid_namespace,
                network_mode=action.network_namespace,
                detach=True,
            )
        except DockerException as exc:
            return Outcome.failed("StartFailed", f"cannot create the container: {_docker_message(exc)}")
        try:
            container.start()
            deadline = time.monotonic() + timeout
            while True:
                container.reload()
                if container.status in ("exited", "dead"):
                    code = int(container.attrs["State"]["ExitCode"])
                    for line in container.logs().decode(errors="replace").splitlines():
                        _log.debug("action output", action=action.name, line=line)
                    log.info("action exited", exit_code=code)
                    return _exited(code)
                if stop.is_set():
                    container.stop(timeout=max(int(self.stop_grace), 1))
                    return STOPPED
                if time.monotonic() >= deadline:
                    container.stop(timeout=max(int(self.stop_grace), 1))
                    return _timed_out(timeout)
                stop.wait(min(0.2, max(deadline - time.monotonic(), 0.0)))
        except DockerException as exc:
            return Outcome.failed("StartFailed", f"the container failed: {_docker_message(exc)}")
        finally:
            try:
                container.remove(force=True)
            except DockerException as exc:
                log.warning("cannot remove the action's container", error=_docker_message(exc))

    def _present(self, image: str) -> bool:
        from docker.errors import DockerException

        try:
            self.client.images.get(image)
        except DockerException:
            return False
        return True


def _docker_message(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc)


__all__ = [
    "DEFAULT_STOP_GRACE",
    "SUCCEEDED",
    "STOPPED",
    "Action",
    "DockerRuntime",
    "DockerUnavailable",
    "Outcome",
    "ProcessRuntime",
    "Runtime",
]
