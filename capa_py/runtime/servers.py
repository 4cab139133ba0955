"""The servers a controller process runs beside its controllers, each a :class:`Runnable` that needs no
leader election (the API server calls any replica's webhooks; Hegel only reads; agents may reach any
replica's workflow service, whose status writes are optimistic): the validating admission webhooks, the
Tinkerbell Hegel metadata service and the Tinkerbell gRPC workflow service. Each announces where it serves
and stops when the process does."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from capa_py.runtime.runnable import Runnable, Say, StartFailed
from capa_py.store.protocol import ObjectStore

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from capa_py.runtime.informer import Informer
    from capa_py.tinkerbell.backoff import Backoff
    from capa_py.tinkerbell.hegel import IPNetwork, RunningHegel
    from capa_py.tinkerbell.server import RunningWorkflowServer, TLSFiles
    from capa_py.webhooks import RunningWebhook


class Server(Runnable):
    name = "server"

    def needs_leader_election(self) -> bool:
        return False


class WebhookServer(Server):
    """The validating admission webhooks over HTTPS, with ``cert_dir``'s certificate."""

    name = "webhooks"

    def __init__(self, cert_dir: Path, host: str, port: int, say: Say) -> None:
        self.cert_dir, self.host, self.port, self.say = cert_dir, host, port, say
        self.running: RunningWebhook | None = None

    def start(self, stop: threading.Event) -> None:
        from capa_py.webhooks import WebhookConfigError, start_in_thread

        try:
            self.running = start_in_thread(self.cert_dir, self.host, self.port)
        except WebhookConfigError as exc:
            raise StartFailed(str(exc)) from exc
        self.say(f"webhooks: {self.running.url}")

    def stop(self, grace: float) -> bool:
        if self.running is not None:
            self.running.stop()
        return True


class HegelServer(Server):
    """The Tinkerbell Hegel metadata endpoints, believing X-Forwarded-For from ``trusted`` proxies only.

    With ``informer`` (the process's informer of every Hardware) its index is a handler of that informer;
    without, the index lists and watches ``store`` itself."""

    name = "hegel"

    def __init__(
        self,
        store: ObjectStore,
        bind: str,
        port: int,
        trusted: Sequence[IPNetwork],
        say: Say,
        informer: Informer | None = None,
    ) -> None:
        self.store, self.bind, self.port, self.trusted, self.say = store, bind, port, trusted, say
        self.informer = informer
        self.running: RunningHegel | None = None

    def start(self, stop: threading.Event) -> None:
        from capa_py.tinkerbell.hegel import start_in_thread
        from capa_py.tinkerbell.hegel_index import HardwareIndex

        index = None
        if self.informer is not None:
            index = HardwareIndex()
            index.attach(self.informer, self.store)
        try:
            self.running = start_in_thread(self.store, self.bind, self.port, self.trusted, index)
        except OSError as exc:
            raise StartFailed(
                f"cannot serve hegel on {self.bind}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self.say(f"hegel: {self.running.url}")

    def stop(self, grace: float) -> bool:
        if self.running is not None:
            self.running.stop()
        return True


class WorkflowServer(Server):
    """The Tinkerbell gRPC workflow service, for the workflows of every namespace; its metrics go to
    ``registry``."""

    name = "tink-server"

    def __init__(
        self,
        store: ObjectStore,
        bind: str,
        port: int,
        tls: TLSFiles | None,
        backoff: Backoff,
        allow_unauthenticated_agents: bool,
        registry: CollectorRegistry,
        say: Say,
    ) -> None:
        self.store, self.bind, self.port, self.tls, self.backoff = store, bind, port, tls, backoff
        self.allow_unauthenticated_agents = allow_unauthenticated_agents
        self.registry = registry
        self.say = say
        self.running: RunningWorkflowServer | None = None

    def start(self, stop: threading.Event) -> None:
        from capa_py.tinkerbell.server import start_in_thread

        try:
            self.running = start_in_thread(
                self.store,
                self.bind,
                self.port,
                self.tls,
                self.backoff,
                registry=self.registry,
                allow_unauthenticated_agents=self.allow_unauthenticated_agents,
            )
        except OSError as exc:
            raise StartFailed(
                f"cannot serve the tink server on {self.bind}:{self.port}: {exc.strerror or exc}"
            ) from exc
        self.say(f"tink server: {self.running.address}")

    def stop(self, grace: float) -> bool:
        if self.running is not None:
            self.running.stop()
        return True
