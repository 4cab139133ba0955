"""What a :class:`~capa_py.runtime.lifecycle.Process` runs: runnables, each started and stopped by it.

A runnable is controller-runtime's ``Runnable``: it starts without blocking (serving on threads of its own)
and stops when told. Like controller-runtime's ``LeaderElectionRunnable`` it says whether it needs the
leader election: the controllers' workers run only while the process leads; the caches that feed them, the
metrics and health endpoints and the servers run whether or not it does.

The runnables of the controller engine (:class:`~capa_py.runtime.process.ControllerProcess`) and of the
metrics and probe endpoints are here; the webhook, Hegel and Tinkerbell workflow servers are in
:mod:`capa_py.runtime.servers`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable

from capa_py.runtime.endpoints import Endpoints
from capa_py.runtime.process import ControllerProcess

Say = Callable[[str], None]
"""Where a runnable announces what it serves (a line on stdout for ``capa controller``)."""


class StartFailed(Exception):
    """A runnable could not start (an address taken, a certificate unreadable): the message says why."""


class Runnable(ABC):
    """Something the process runs, started in order and stopped in the reverse order."""

    name = "runnable"

    def needs_leader_election(self) -> bool:
        """Whether it may run only while the process leads (controller-runtime's default: it may)."""
        return True

    @abstractmethod
    def start(self, stop: threading.Event) -> None:
        """Start serving, without blocking; :class:`StartFailed` when it cannot. A long wait (a cache sync)
        ends without starting once ``stop`` is set."""

    @abstractmethod
    def stop(self, grace: float) -> bool:
        """Stop; True when what it was doing finished within ``grace`` seconds."""

    def halt(self) -> None:  # noqa: B027 (optional: most runnables take no work)
        """Take no more work from now on (the lease was lost); safe from any thread. Nothing by default."""


class EndpointsRunnable(Runnable):
    """The Prometheus metrics endpoint and the ``/healthz`` and ``/readyz`` probes."""

    name = "endpoints"

    def __init__(self, endpoints: Endpoints, say: Say) -> None:
        self.endpoints = endpoints
        self.say = say

    def needs_leader_election(self) -> bool:
        return False

    def start(self, stop: threading.Event) -> None:
        try:
            self.endpoints.start()
        except OSError as exc:
            raise StartFailed(f"cannot serve the metrics or probe endpoints: {exc.strerror or exc}") from exc
        if self.endpoints.metrics_url:
            self.say(f"metrics: {self.endpoints.metrics_url}/metrics")
        if self.endpoints.probe_url:
            url = self.endpoints.probe_url
            self.say(f"health probes: {url}/healthz {url}/readyz")

    def stop(self, grace: float) -> bool:
        self.endpoints.stop()
        return True


class Caches(Runnable):
    """The engine's informers: they keep the caches warm (and the process ready) whether or not it leads."""

    name = "caches"

    def __init__(self, engine: ControllerProcess) -> None:
        self.engine = engine

    def needs_leader_election(self) -> bool:
        return False

    def start(self, stop: threading.Event) -> None:
        self.engine.start_informers()

    def stop(self, grace: float) -> bool:
        self.engine.stop_informers()
        return True


class Controllers(Runnable):
    """The engine's worker pools, started once every cache has synced; on stop they take no more work and
    the reconciles in progress get the grace period to finish."""

    name = "controllers"

    def __init__(self, engine: ControllerProcess, say: Say, complain: Say) -> None:
        self.engine = engine
        self.say = say
        self.complain = complain

    def start(self, stop: threading.Event) -> None:
        if self.engine.start_workers(stop):
            self.say(f"controllers running: {', '.join(c.name for c in self.engine.controllers)}")

    def stop(self, grace: float) -> bool:
        finished = self.engine.shutdown(grace)
        if not finished:
            self.complain(f"reconciles still running after {grace:g}s; exiting")
        return finished

    def halt(self) -> None:
        self.engine.stop_reconciling()
