"""What ``capa controller`` runs, built from its checked flags: the metrics and probe endpoints, the servers
the flags ask for, the caches and the controllers, as runnables of one :class:`~capa_py.runtime.lifecycle.
Process`, which owns leader election, signals and graceful shutdown. Progress lines go to stdout, errors to
stderr (``error: ...``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from capa_app.cli.common import EXIT_FAILED, EXIT_OK, fail, stderr
from capa_app.cli.controller_flags import HegelOptions, WebhookOptions
from capa_py.api.tinkerbell import Hardware
from capa_py.aws.session import ClientPool
from capa_py.engine.engine import Engine
from capa_py.runtime.endpoints import BindAddress, Endpoints
from capa_py.runtime.informer import Informer
from capa_py.runtime.leader import LeaseTiming, holder_identity
from capa_py.runtime.lifecycle import Election, Process
from capa_py.runtime.manager import Controller
from capa_py.runtime.metrics import ControllerMetrics
from capa_py.runtime.process import ControllerProcess, ProcessOptions
from capa_py.runtime.runnable import Caches, Controllers, EndpointsRunnable, Runnable, StartFailed
from capa_py.runtime.servers import HegelServer, WebhookServer, WorkflowServer
from capa_py.store.protocol import ObjectStore
from controllers import embedded_controllers
from controllers.tinkerbell import WorkflowTimeouts

if TYPE_CHECKING:
    from capa_app.cli.tink_flags import WorkflowServerOptions

CORE_CONTROLLERS = ("cluster", "machine", "machinedeployment", "machineset", "machinepool")


def _announce(line: str) -> None:
    print(line, flush=True)


def _complain(line: str) -> None:
    stderr.print(f"error: {line}", markup=False)


def _servers(
    store: ObjectStore,
    metrics: ControllerMetrics,
    webhooks: WebhookOptions | None,
    hegel: HegelOptions | None,
    tink_server: WorkflowServerOptions | None,
    hardware: Informer | None = None,
) -> list[Runnable]:
    """The servers the flags ask for, in the order they start."""
    servers: list[Runnable] = []
    if webhooks is not None:
        servers.append(
            WebhookServer(webhooks.cert_dir, webhooks.address.host, webhooks.address.port, _announce)
        )
    if hegel is not None:
        servers.append(HegelServer(store, hegel.bind, hegel.port, hegel.trusted, _announce, hardware))
    if tink_server is not None:
        options = tink_server
        servers.append(
            WorkflowServer(
                store,
                options.bind,
                options.port,
                options.tls,
                options.backoff,
                options.allow_unauthenticated_agents,
                metrics.registry,
                _announce,
            )
        )
    return servers


def run(
    store: ObjectStore,
    pool: ClientPool | None,
    engine: Engine | None,
    options: ProcessOptions,
    core: bool,
    metrics_address: BindAddress | None,
    probe_address: BindAddress | None,
    grace: float,
    timing: LeaseTiming | None,
    webhooks: WebhookOptions | None = None,
    timeouts: WorkflowTimeouts | None = None,
    hegel: HegelOptions | None = None,
    tink_server: WorkflowServerOptions | None = None,
    tinkerbell: bool = True,
) -> int:
    """Build the runnables (endpoints, servers, caches, controllers) and run them in a :class:`Process`."""

    def build(cache: ObjectStore) -> Sequence[Controller]:
        built = embedded_controllers(cache, pool, engine, workflow_timeouts=timeouts, tinkerbell=tinkerbell)
        return [c for c in built if core or c.name not in CORE_CONTROLLERS]

    metrics = ControllerMetrics()
    metrics.hook_aws_clients()
    if hegel is not None:
        # Hegel's index is kept by the process's Hardware informer (cached even without Tinkerbell's
        # controllers), as long as that informer sees every Hardware.
        options = replace(options, informed_kinds=(*options.informed_kinds, Hardware))
    controllers = ControllerProcess(store, build, options, metrics)
    hardware = controllers.cache.informer_for(Hardware)
    if hardware is not None and (hardware.namespace is not None or hardware.label_selector):
        hardware = None  # scoped: Hegel answers for every Hardware, so its index lists and watches itself
    runnables: list[Runnable] = [
        EndpointsRunnable(
            Endpoints(metrics_address, probe_address, metrics.render, controllers.has_synced), _announce
        ),
        *_servers(store, metrics, webhooks, hegel, tink_server, hardware),
        Caches(controllers),
        Controllers(controllers, _announce, _complain),
    ]
    election = None if timing is None else Election(store, holder_identity("capa controller"), timing)
    process = Process(runnables, grace, _announce, _complain, election, metrics, EXIT_FAILED)
    try:
        clean = process.run()
    except StartFailed as exc:
        fail(str(exc))
    finally:
        metrics.close()
    return EXIT_OK if clean else EXIT_FAILED
