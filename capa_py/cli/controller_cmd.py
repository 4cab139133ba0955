"""``capa controller``: every controller, running against the selected store until SIGTERM or SIGINT.

The process watches the store through informers, reconciles with per-controller worker pools, serves
Prometheus metrics and health probes, and on SIGTERM/SIGINT stops taking work, lets the reconciles in
progress finish within ``--graceful-shutdown-timeout`` and exits (0; 1 when some did not finish). With
``--leader-elect`` it reconciles only while it holds the Lease ``capa-py-system/capa-py-controller`` (the one
``capa apply --wait`` and ``capa delete --wait`` hold while they run controllers); a leader that cannot
renew stops reconciling before another process could take the Lease over, and exits 1.

With ``--webhook-cert-dir`` it also serves the validating admission webhooks (:mod:`capa_py.webhooks`) over
HTTPS on ``--webhook-bind-address``, whether or not it leads (the API server calls any replica behind the
webhook Service), until it stops. The certificate is checked before anything else starts.

The Tinkerbell workflow supervisor's limits are ``--workflow-scheduling-timeout`` (5m),
``--workflow-cancel-timeout`` (5m) and ``--workflow-action-timeout`` (1h, for actions without a timeout of
their own).

With ``--hegel-port PORT`` (0, the default, serves none) it also serves the Tinkerbell Hegel metadata
endpoints (:mod:`capa_py.tinkerbell.hegel`) on ``--hegel-bind`` (127.0.0.1), believing ``X-Forwarded-For``
from ``--trusted-proxies`` only, whether or not it leads (Hegel only reads), until it stops.

With ``--tink-server-port PORT`` (0, the default, serves none) it also serves the Tinkerbell gRPC workflow
service (:mod:`capa_py.tinkerbell.server`) on ``--tink-server-bind`` (127.0.0.1), with the
``--tink-server-tls-cert/-key/-client-ca``, ``--tink-server-allow-unauthenticated-agents`` and
``--tink-server-rejection-backoff[-max]`` flags of ``capa tink server``,
whether or not it leads (agents may connect to any replica; every status write it makes is optimistic, so
two replicas never dispatch one workflow twice). It serves the workflows of every namespace, whatever
``--namespace`` says. Its metrics are on the metrics endpoint.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.coordination import Lease
from capa_py.api.core import Secret
from capa_py.api.tinkerbell import TINKERBELL_KINDS
from capa_py.aws.session import ClientPool
from capa_py.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    EndpointOption,
    ProfileOption,
    RegionOption,
    TraitsOption,
    aws_context,
    fail,
    globals_of,
    stderr,
)
from capa_py.cli.durations import parse_duration
from capa_py.engine.engine import Engine
from capa_py.logging import get_logger
from capa_py.runtime.endpoints import BindAddress, Endpoints, parse_bind_address
from capa_py.runtime.leader import (
    LEASE_DURATION_ENV,
    STORE_LEASE_NAME,
    STORE_LEASE_NAMESPACE,
    LeaderElector,
    LeaseHeld,
    LeaseTiming,
    describe_holder,
    holder_identity,
)
from capa_py.runtime.manager import Controller
from capa_py.runtime.metrics import ControllerMetrics
from capa_py.runtime.process import ControllerProcess, ProcessOptions
from capa_py.store.errors import Invalid, NotFound, StoreError
from capa_py.store.protocol import ObjectStore
from capa_py.store.selectors import LabelSelector
from capa_py.webhooks import CertificateReloader, RunningWebhook, WebhookConfigError, start_in_thread

if TYPE_CHECKING:
    from capa_py.cli.tink_cmd import WorkflowServerOptions
    from capa_py.tinkerbell.hegel import IPNetwork, RunningHegel
    from capa_py.tinkerbell.server import RunningWorkflowServer
    from controllers.tinkerbell import WorkflowTimeouts

_log = get_logger("cli.controller")

CLUSTER_CRD = "clusters.cluster.x-k8s.io"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
WATCH_FILTER_LABEL = "cluster.x-k8s.io/watch-filter"
CORE_CONTROLLERS = ("cluster", "machine", "machinedeployment", "machineset")


PROVIDERS = ("aws", "tinkerbell")


def parse_providers(value: str) -> frozenset[str]:
    """The providers ``--providers`` names (comma-separated, at least one); exits 2 naming a wrong one."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROVIDERS]
    if not names or unknown:
        what = f"unknown provider {unknown[0]!r}" if unknown else "no provider named"
        fail(f"--providers: {what}; choose from {', '.join(PROVIDERS)}", EXIT_INVALID)
    return frozenset(names)


def core_controllers_enabled(store: ObjectStore, mode: str) -> bool:
    """``on``/``off`` as said; ``auto``: off when Cluster API core's own Cluster CRD is stored (it runs the
    Cluster and Machine controllers itself), on otherwise."""
    if mode != "auto":
        return mode == "on"
    try:
        crd = store.get(CustomResourceDefinition, CLUSTER_CRD)
    except NotFound:
        return True
    return crd.metadata.labels.get(PROVIDER_LABEL) != "cluster-api"


def lease_timing(duration: str | None, renew_deadline: str | None, retry_period: str | None) -> LeaseTiming:
    """The flags' timing; unset ones come from ``CAPA_LEASE_DURATION`` or controller-runtime's 15s/10s/2s.

    ValueError when malformed or inconsistent."""
    base = LeaseTiming.from_env()
    env_set = bool(os.environ.get(LEASE_DURATION_ENV, "").strip())
    seconds = base.duration if duration is None else parse_duration(duration)
    if seconds != int(seconds) or seconds < 1:
        raise ValueError("--leader-elect-lease-duration must be a whole number of seconds, at least 1")
    scaled = LeaseTiming.for_duration(int(seconds)) if (env_set or duration is not None) else None
    deadline = parse_duration(renew_deadline) if renew_deadline else (scaled or LeaseTiming()).renew_deadline
    retry = parse_duration(retry_period) if retry_period else (scaled or LeaseTiming()).retry_period
    # client-go renews every retry period; a renewal may take up to the renew deadline.
    return LeaseTiming(
        duration=int(seconds), renew_period=min(retry, deadline), renew_deadline=deadline, retry_period=retry
    )


class _LostLeaseDeadline:
    """After the lease is lost, reconciles get until another process may take it over to stop; a process
    still running then exits at once, so two reconcilers never act on one store."""

    def __init__(self, seconds: float, stop: threading.Event, process: ControllerProcess) -> None:
        self.seconds = seconds
        self.stop = stop
        self.process = process
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        self.process.stop_reconciling()  # no reconcile starts from now on
        self.stop.set()
        self._timer = threading.Timer(self.seconds, self._exit_now)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _exit_now(self) -> None:
        stderr.print("error: lost the store lease; reconciles did not stop in time", markup=False)
        sys.stderr.flush()
        os._exit(EXIT_FAILED)


def workflow_timeouts(scheduling: str, cancel: str, action: str) -> WorkflowTimeouts:
    """The supervisor's timeouts from the ``--workflow-*-timeout`` flags; ValueError naming a bad one."""
    from controllers.tinkerbell import WorkflowTimeouts

    seconds: dict[str, float] = {}
    for flag, text in (("scheduling", scheduling), ("cancel", cancel), ("action", action)):
        try:
            value = parse_duration(text)
        except ValueError as exc:
            raise ValueError(f"--workflow-{flag}-timeout: {exc}") from exc
        if value <= 0:
            raise ValueError(f"--workflow-{flag}-timeout must be positive")
        seconds[flag] = value
    return WorkflowTimeouts(
        scheduling=seconds["scheduling"], cancel=seconds["cancel"], action=seconds["action"]
    )


def _announce(line: str) -> None:
    print(line, flush=True)


def _addresses(metrics: str, probes: str) -> tuple[BindAddress | None, BindAddress | None]:
    try:
        return parse_bind_address(metrics), parse_bind_address(probes)
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)


@dataclass(frozen=True)
class WebhookOptions:
    """Where the webhooks are served from: a certificate directory already found loadable."""

    cert_dir: Path
    address: BindAddress


def webhook_options(cert_dir: Path | None, bind_address: str) -> WebhookOptions | None:
    """The webhook server's settings; None (no webhook served) without a certificate directory or with
    the address ``0``. Exits 2 when the address is malformed or the certificate cannot be loaded."""
    try:
        address = parse_bind_address(bind_address)
    except ValueError as exc:
        fail(f"--webhook-bind-address: {exc}", EXIT_INVALID)
    if cert_dir is None or address is None:
        return None
    try:
        CertificateReloader(cert_dir)
    except WebhookConfigError as exc:
        fail(str(exc), EXIT_INVALID)
    return WebhookOptions(cert_dir, address)


@dataclass(frozen=True)
class HegelOptions:
    """Where Hegel is served from, and whose X-Forwarded-For it believes."""

    bind: str
    port: int
    trusted: tuple[IPNetwork, ...]


def hegel_options(port: int, bind: str, trusted_proxies: str | None) -> HegelOptions | None:
    """Hegel's settings; None (not served) with port 0. Exits 2 naming a bad flag."""
    from capa_py.cli.tink_cmd import checked_hegel_flags

    trusted = checked_hegel_flags("--hegel-port", port, trusted_proxies)
    return HegelOptions(bind, port, trusted) if port else None


def _tink_server_options(
    port: int,
    bind: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    backoff: str,
    backoff_max: str,
    tls_client_ca: Path | None = None,
    allow_unauthenticated_agents: bool = False,
) -> WorkflowServerOptions | None:
    """The workflow server's settings; None (not served) with port 0. Exits 2 naming a bad flag."""
    from capa_py.cli.tink_cmd import checked_server_flags

    options = checked_server_flags(
        "--tink-server-",
        bind,
        port,
        tls_cert,
        tls_key,
        backoff,
        backoff_max,
        tls_client_ca,
        allow_unauthenticated_agents,
    )
    return options if port else None


def _start_hegel(store: ObjectStore, options: HegelOptions | None) -> RunningHegel | None:
    if options is None:
        return None
    from capa_py.tinkerbell.hegel import start_in_thread as start_hegel

    try:
        running = start_hegel(store, options.bind, options.port, options.trusted)
    except OSError as exc:
        fail(f"cannot serve hegel on {options.bind}:{options.port}: {exc.strerror or exc}")
    _announce(f"hegel: {running.url}")
    return running


def _start_tink_server(
    store: ObjectStore, options: WorkflowServerOptions | None, metrics: ControllerMetrics
) -> RunningWorkflowServer | None:
    if options is None:
        return None
    from capa_py.tinkerbell.server import start_in_thread as start_tink_server

    try:
        running = start_tink_server(
            store,
            options.bind,
            options.port,
            options.tls,
            options.backoff,
            registry=metrics.registry,
            allow_unauthenticated_agents=options.allow_unauthenticated_agents,
        )
    except OSError as exc:
        fail(f"cannot serve the tink server on {options.bind}:{options.port}: {exc.strerror or exc}")
    _announce(f"tink server: {running.address}")
    return running


def _start_webhooks(options: WebhookOptions | None) -> RunningWebhook | None:
    if options is None:
        return None
    try:
        running = start_in_thread(options.cert_dir, options.address.host, options.address.port)
    except WebhookConfigError as exc:
        fail(str(exc))
    _announce(f"webhooks: {running.url}")
    return running


def controller(
    ctx: typer.Context,
    endpoint: EndpointOption = None,
    region: RegionOption = None,
    profile: ProfileOption = None,
    traits: TraitsOption = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Only reconcile objects of this namespace.")
    ] = None,
    watch_filter: Annotated[
        str | None,
        typer.Option(
            "--watch-filter",
            help=f"Only reconcile Cluster API objects labelled {WATCH_FILTER_LABEL}=VALUE.",
            metavar="VALUE",
        ),
    ] = None,
    awscluster_concurrency: Annotated[
        int, typer.Option("--awscluster-concurrency", help="AWSClusters reconciled at once.")
    ] = 5,
    awsmachine_concurrency: Annotated[
        int, typer.Option("--awsmachine-concurrency", help="AWSMachines reconciled at once.")
    ] = 10,
    cluster_concurrency: Annotated[
        int, typer.Option("--cluster-concurrency", help="Clusters reconciled at once (core controller).")
    ] = 10,
    machine_concurrency: Annotated[
        int, typer.Option("--machine-concurrency", help="Machines reconciled at once (core controller).")
    ] = 10,
    sync_period: Annotated[
        str, typer.Option("--sync-period", help="How often every object is reconciled again (10m).")
    ] = "10m",
    graceful_shutdown_timeout: Annotated[
        str,
        typer.Option("--graceful-shutdown-timeout", help="How long reconciles in progress get to finish."),
    ] = "30s",
    leader_elect: Annotated[
        bool,
        typer.Option(
            "--leader-elect/--no-leader-elect", help="Reconcile only while holding the store lease."
        ),
    ] = False,
    lease_duration: Annotated[
        str | None, typer.Option("--leader-elect-lease-duration", help="Lease duration (15s).")
    ] = None,
    renew_deadline: Annotated[
        str | None, typer.Option("--leader-elect-renew-deadline", help="Give up leading after (10s).")
    ] = None,
    retry_period: Annotated[
        str | None, typer.Option("--leader-elect-retry-period", help="Retry and renew every (2s).")
    ] = None,
    metrics_bind_address: Annotated[
        str, typer.Option("--metrics-bind-address", help="Metrics address; port 0 any free port, 0 off.")
    ] = "127.0.0.1:8080",
    health_probe_bind_address: Annotated[
        str,
        typer.Option("--health-probe-bind-address", help="/healthz and /readyz address; 0 off."),
    ] = "127.0.0.1:8081",
    providers: Annotated[
        str,
        typer.Option(
            "--providers",
            help="Infrastructure providers to run: aws, tinkerbell or both (aws,tinkerbell). Without aws no "
            "AWS credentials or endpoint are needed.",
            metavar="NAME[,NAME]",
        ),
    ] = "aws,tinkerbell",
    core_controllers: Annotated[
        str,
        typer.Option(
            "--core-controllers",
            help="Cluster API core's controllers (Cluster, Machine, MachineDeployment, MachineSet): "
            "auto, on or off.",
        ),
    ] = "auto",
    webhook_cert_dir: Annotated[
        Path | None,
        typer.Option(
            "--webhook-cert-dir",
            help="Serve the validating webhooks over HTTPS with DIR/tls.crt and DIR/tls.key; "
            "without it no webhook is served (no certificate needed).",
            metavar="DIR",
        ),
    ] = None,
    webhook_bind_address: Annotated[
        str,
        typer.Option("--webhook-bind-address", help="Webhook address (with --webhook-cert-dir); 0 off."),
    ] = "127.0.0.1:9443",
    workflow_scheduling_timeout: Annotated[
        str,
        typer.Option(
            "--workflow-scheduling-timeout",
            help="A Tinkerbell Workflow Scheduled this long without an action starting fails "
            "(SchedulingTimeout).",
        ),
    ] = "5m",
    workflow_cancel_timeout: Annotated[
        str,
        typer.Option(
            "--workflow-cancel-timeout",
            help="A deleted Workflow Cancelling this long is marked Canceled without the agent "
            "(CancelTimeout).",
        ),
    ] = "5m",
    workflow_action_timeout: Annotated[
        str,
        typer.Option(
            "--workflow-action-timeout",
            help="How long a Workflow action without a timeout of its own may run (Timeout).",
        ),
    ] = "1h",
    hegel_port: Annotated[
        int,
        typer.Option("--hegel-port", help="Serve Tinkerbell Hegel metadata on this port; 0 (default) off."),
    ] = 0,
    hegel_bind: Annotated[
        str, typer.Option("--hegel-bind", help="Address Hegel listens on (with --hegel-port).")
    ] = "127.0.0.1",
    trusted_proxies: Annotated[
        str | None,
        typer.Option(
            "--trusted-proxies",
            help="CIDR[,CIDR...] of proxies whose X-Forwarded-For Hegel believes.",
            metavar="CIDR[,CIDR...]",
        ),
    ] = None,
    tink_server_port: Annotated[
        int,
        typer.Option(
            "--tink-server-port", help="Serve the Tinkerbell workflow service on this port; 0 (default) off."
        ),
    ] = 0,
    tink_server_bind: Annotated[
        str, typer.Option("--tink-server-bind", help="Address the workflow service listens on.")
    ] = "127.0.0.1",
    tink_server_tls_cert: Annotated[
        Path | None, typer.Option("--tink-server-tls-cert", help="PEM certificate of the workflow service.")
    ] = None,
    tink_server_tls_key: Annotated[
        Path | None, typer.Option("--tink-server-tls-key", help="PEM private key of the workflow service.")
    ] = None,
    tink_server_rejection_backoff: Annotated[
        str,
        typer.Option(
            "--tink-server-rejection-backoff",
            help="A rejected workflow is not offered again for this long, doubled per rejection.",
        ),
    ] = "10s",
    tink_server_rejection_backoff_max: Annotated[
        str,
        typer.Option("--tink-server-rejection-backoff-max", help="The longest a rejected workflow waits."),
    ] = "5m",
    tink_server_tls_client_ca: Annotated[
        Path | None,
        typer.Option(
            "--tink-server-tls-client-ca",
            help="PEM CA agents' client certificates must be signed by (mutual TLS; CN or DNS SAN "
            "<hardware>.<namespace>).",
        ),
    ] = None,
    tink_server_allow_unauthenticated_agents: Annotated[
        bool,
        typer.Option(
            "--tink-server-allow-unauthenticated-agents",
            help="Believe the id of agents presenting no credentials (Hardware without "
            "spec.agentCredentialsRef only). Off by default.",
        ),
    ] = False,
) -> None:
    """Run every controller against the store until SIGTERM or SIGINT."""
    if core_controllers not in ("auto", "on", "off"):
        fail("--core-controllers must be auto, on or off", EXIT_INVALID)
    chosen = parse_providers(providers)
    if "tinkerbell" not in chosen:
        for flag, value in (("--hegel-port", hegel_port), ("--tink-server-port", tink_server_port)):
            if value:
                fail(f"{flag} needs the tinkerbell provider (--providers {providers})", EXIT_INVALID)
    counts = {
        "awscluster": awscluster_concurrency,
        "awsmachine": awsmachine_concurrency,
        "cluster": cluster_concurrency,
        "machine": machine_concurrency,
    }
    for name, count in counts.items():
        if count < 1:
            fail(f"--{name}-concurrency must be at least 1", EXIT_INVALID)
    try:
        resync = parse_duration(sync_period)
        grace = parse_duration(graceful_shutdown_timeout)
        timing = lease_timing(lease_duration, renew_deadline, retry_period) if leader_elect else None
        timeouts = workflow_timeouts(
            workflow_scheduling_timeout, workflow_cancel_timeout, workflow_action_timeout
        )
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    selector = None
    if watch_filter is not None:
        selector = f"{WATCH_FILTER_LABEL}={watch_filter}"
        try:
            LabelSelector.parse(selector)
        except Invalid as exc:
            fail(f"--watch-filter: {exc}", EXIT_INVALID)
    metrics_address, probe_address = _addresses(metrics_bind_address, health_probe_bind_address)
    webhooks = webhook_options(webhook_cert_dir, webhook_bind_address)
    hegel = hegel_options(hegel_port, hegel_bind, trusted_proxies)
    tink_server = _tink_server_options(
        tink_server_port,
        tink_server_bind,
        tink_server_tls_cert,
        tink_server_tls_key,
        tink_server_rejection_backoff,
        tink_server_rejection_backoff_max,
        tink_server_tls_client_ca,
        tink_server_allow_unauthenticated_agents,
    )

    aws = aws_context(ctx, endpoint, region, profile, traits) if "aws" in chosen else None
    store = globals_of(ctx).store()
    try:
        code = _run(
            store,
            aws.pool if aws is not None else None,
            aws.engine if aws is not None else None,
            ProcessOptions(
                namespace=namespace,
                label_selector=selector,
                concurrency=counts,
                sync_period=resync,
                unfiltered_kinds=(Secret, *TINKERBELL_KINDS),
            ),
            core_controllers_enabled(store, core_controllers),
            metrics_address,
            probe_address,
            grace,
            timing,
            webhooks,
            timeouts,
            hegel,
            tink_server,
            "tinkerbell" in chosen,
        )
    finally:
        store.close()
    raise typer.Exit(code)


def _run(
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
    from controllers import embedded_controllers

    def build(cache: ObjectStore) -> Sequence[Controller]:
        built = embedded_controllers(cache, pool, engine, workflow_timeouts=timeouts, tinkerbell=tinkerbell)
        return [c for c in built if core or c.name not in CORE_CONTROLLERS]

    metrics = ControllerMetrics()
    metrics.hook_aws_clients()
    process = ControllerProcess(store, build, options, metrics)
    endpoints = Endpoints(metrics_address, probe_address, metrics.render, process.has_synced)
    try:
        endpoints.start()
    except OSError as exc:
        metrics.close()
        fail(f"cannot serve the metrics or probe endpoints: {exc.strerror or exc}")
    if endpoints.metrics_url:
        _announce(f"metrics: {endpoints.metrics_url}/metrics")
    if endpoints.probe_url:
        _announce(f"health probes: {endpoints.probe_url}/healthz {endpoints.probe_url}/readyz")
    webhook: RunningWebhook | None = None
    hegel_server: RunningHegel | None = None
    workflow_server: RunningWorkflowServer | None = None
    try:
        webhook = _start_webhooks(webhooks)
        hegel_server = _start_hegel(store, hegel)
        workflow_server = _start_tink_server(store, tink_server, metrics)
    except typer.Exit:
        if hegel_server is not None:
            hegel_server.stop()
        if webhook is not None:
            webhook.stop()
        endpoints.stop()
        metrics.close()
        raise

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    lease = f"{STORE_LEASE_NAMESPACE}/{STORE_LEASE_NAME}"
    elector: LeaderElector | None = None
    deadline: _LostLeaseDeadline | None = None
    code = EXIT_OK
    try:
        process.start_informers()
        if timing is not None:
            metrics.leading(STORE_LEASE_NAME, False)
            deadline = _LostLeaseDeadline(timing.duration - timing.renew_deadline, stop, process)
            elector = LeaderElector(
                store, holder_identity("capa controller"), timing=timing, on_lost=deadline.start
            )

            def waiting(held: Lease) -> None:
                _announce(f"waiting for the store lease {lease} held by {describe_holder(held)}")

            try:
                elector.acquire(wait=True, on_wait=waiting, stop=stop)
            except LeaseHeld:
                elector = None  # stopped while waiting: nothing was reconciled, nothing to release
            except StoreError as exc:
                stderr.print(f"error: cannot take the store lease: {exc}", markup=False)
                elector, code = None, EXIT_FAILED
                stop.set()
            else:
                elector.start_renewing()
                metrics.leading(STORE_LEASE_NAME, True)
                _announce(f"leading: holding the store lease {lease}")
        if not stop.is_set() and process.start_workers(stop):
            _announce(f"controllers running: {', '.join(c.name for c in process.controllers)}")
        while not stop.wait(0.5):
            pass
        _announce("stopping: finishing reconciles in progress")
        finished = process.shutdown(grace)
        if not finished:
            stderr.print(f"error: reconciles still running after {grace:g}s; exiting", markup=False)
            code = EXIT_FAILED
        if elector is not None:
            if elector.lost.is_set():
                stderr.print(f"error: {elector.lost_message()}; stopped reconciling", markup=False)
                code = EXIT_FAILED
            elif finished:
                elector.release()
            else:
                # A reconcile may still be acting: the lease expires after its duration instead, once this
                # process (and with it that reconcile) has ended.
                elector.stop_renewing()
            metrics.leading(STORE_LEASE_NAME, False)
    finally:
        if deadline is not None:
            deadline.cancel()
        process.stop_informers()
        if workflow_server is not None:
            workflow_server.stop()
        if hegel_server is not None:
            hegel_server.stop()
        if webhook is not None:
            webhook.stop()
        endpoints.stop()
        metrics.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code == EXIT_OK:
        _announce("stopped")
    return code


def register(app: typer.Typer) -> None:
    app.command(name="controller")(controller)
