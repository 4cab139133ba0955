"""The clusters a workflow talks to: how to reach each one's API server, and the bootstrap cluster.

Every cluster is reached the same way, through a kubeconfig (:class:`ClusterAccess`), so tasks and hooks
never care whether they talk to a real cluster, a ``capa serve`` standing in for one, or the bootstrap
cluster. What differs is how components are installed: on the bootstrap cluster they run in this process
(:class:`InProcessHost`), anywhere else they are manifests applied to the API server.

The bootstrap cluster (:class:`BootstrapCluster`) needs no Docker: it is ``capa serve`` over a SQLite file
of the workflow's state directory, served from a thread of the workflow's process on a free loopback port,
with the components installed on it running as threads of the same process. Its data lives in the file;
its threads live as long as the process. A workflow resumed after a kill therefore serves the same file
again and restarts the components its checkpoint says were installed (:meth:`BootstrapCluster.start`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import yaml

from capa_py.logging import get_logger
from capa_py.runtime.manager import Controller
from capa_py.runtime.process import ControllerProcess, ProcessOptions
from capa_py.store.kube import KubeStore
from capa_py.store.protocol import ObjectStore
from capa_py.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from capa_py.apiserver.server import RunningServer

_log = get_logger("workflow.clusters")

BOOTSTRAP_NAME = "bootstrap"
SHUTDOWN_GRACE = 10.0


class Stoppable(Protocol):
    def stop(self, timeout: float = ...) -> None: ...


ControllerFactory = Callable[[ObjectStore], Sequence[Controller]]
"""Builds controllers over the store they must read and write (the in-process host's cache)."""
ServerFactory = Callable[[ObjectStore], Sequence[Stoppable]]
"""Starts servers (the Tinkerbell workflow service, Hegel) over a store; returns them running."""


@dataclass
class _Component:
    process: ControllerProcess
    store: KubeStore
    servers: list[Stoppable] = field(default_factory=list)


class InProcessHost:
    """Components running in this process against one cluster's API server: what "installed" means on the
    bootstrap cluster. Each component has a name and is started at most once."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self._components: dict[str, _Component] = {}
        self._lock = threading.Lock()

    @property
    def running(self) -> list[str]:
        return list(self._components)

    def run(self, name: str, controllers: ControllerFactory, servers: ServerFactory | None = None) -> None:
        """Start component ``name``: its controllers (informers synced, workers running) over their own
        connection to the API server, and its servers. A component already running is left alone."""
        with self._lock:
            if name in self._components:
                return
            store = KubeStore.from_kubeconfig(self.kubeconfig)
            process = ControllerProcess(store, controllers, ProcessOptions(sync_period=60.0))
            component = _Component(process, store)
            try:
                process.start_informers()
                process.start_workers()
                if servers is not None:
                    component.servers = list(servers(store))
            except BaseException:
                self._stop(name, component)
                raise
            self._components[name] = component
            _log.info(
                "component running in-process",
                component=name,
                controllers=[c.name for c in process.controllers],
            )

    def _stop(self, name: str, component: _Component) -> None:
        for server in component.servers:
            with contextlib.suppress(Exception):
                server.stop()
        if not component.process.shutdown(SHUTDOWN_GRACE):
            _log.warning("in-process reconciles still running at shutdown", component=name)
        component.store.close()

    def stop(self) -> None:
        """Stop every component (servers first, then the controllers)."""
        with self._lock:
            for name, component in reversed(list(self._components.items())):
                self._stop(name, component)
            self._components.clear()


@dataclass
class ClusterAccess:
    """How to reach one cluster's API server; ``host`` is set when its components run in this process
    (the bootstrap cluster)."""

    name: str
    kubeconfig: Path
    host: InProcessHost | None = None

    @property
    def in_process(self) -> bool:
        return self.host is not None

    def store(self) -> KubeStore:
        """A new store over the API server (close it when done)."""
        return KubeStore.from_kubeconfig(self.kubeconfig)


def write_kubeconfig(path: Path, document: dict[str, object]) -> None:
    """Write a kubeconfig readable by its owner only (it may carry credentials)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


class BootstrapCluster:
    """``capa serve`` over ``<directory>/bootstrap.db`` in this process, and the components installed on it.

    ``start`` serves the file (again, after a restart) and writes ``<directory>/bootstrap.kubeconfig``;
    ``stop`` ends the components and the server; ``delete`` stops and removes the file and the kubeconfig.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.database = directory / "bootstrap.db"
        self.kubeconfig = directory / "bootstrap.kubeconfig"
        self._store: SQLiteStore | None = None
        self._server: RunningServer | None = None
        self._access: ClusterAccess | None = None

    @property
    def exists(self) -> bool:
        return self.database.exists()

    @property
    def serving(self) -> bool:
        return self._access is not None

    def start(self) -> ClusterAccess:
        """Serve the bootstrap store on a free loopback port (a no-op when already serving)."""
        # The API server (aiohttp, its handlers) is loaded by the workflows that serve one, not by every
        # importer of this module.
        from capa_py.apiserver.server import start_in_thread

        if self._access is not None:
            return self._access
        self.directory.mkdir(parents=True, exist_ok=True)
        store = SQLiteStore(self.database)
        try:
            server = start_in_thread(store, "127.0.0.1", 0)
        except BaseException:
            store.close()
            raise
        self._store, self._server = store, server
        write_kubeconfig(self.kubeconfig, server.kubeconfig(name=BOOTSTRAP_NAME))
        self._access = ClusterAccess(BOOTSTRAP_NAME, self.kubeconfig, InProcessHost(self.kubeconfig))
        _log.info("bootstrap cluster serving", url=server.url, database=str(self.database))
        return self._access

    def stop(self) -> None:
        """Stop the components, then the server; the data stays in the file."""
        if self._access is not None and self._access.host is not None:
            self._access.host.stop()
        if self._server is not None:
            self._server.stop()
        if self._store is not None:
            self._store.close()
        self._store = self._server = self._access = None

    def delete(self) -> None:
        """Stop, then remove the bootstrap cluster's data and kubeconfig."""
        self.stop()
        for path in (self.database, self.kubeconfig):
            path.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm", "-journal"):
            self.database.with_name(self.database.name + suffix).unlink(missing_ok=True)
        for directory in (self.directory, self.directory.parent):
            with contextlib.suppress(OSError):  # not empty: another cluster's bootstrap lives there
                directory.rmdir()
        _log.info("bootstrap cluster deleted", database=str(self.database))
