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

from pathlib import Path
from typing import Annotated

import typer

from capa_app.cli.common import (
    EXIT_INVALID,
    EndpointOption,
    ProfileOption,
    RegionOption,
    TraitsOption,
    aws_context,
    fail,
    globals_of,
)
from capa_app.cli.durations import parse_duration

WATCH_FILTER_LABEL = "cluster.x-k8s.io/watch-filter"

__all__ = ["controller", "register"]


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
    from capa_app.cli.controller_flags import (
        bind_addresses,
        core_controllers_enabled,
        hegel_options,
        lease_timing,
        parse_providers,
        tink_server_options,
        webhook_options,
        workflow_timeouts,
    )
    from capa_app.cli.controller_run import run
    from capa_py.api.core import Secret
    from capa_py.api.tinkerbell import TINKERBELL_KINDS
    from capa_py.runtime.allocator import limit_arenas
    from capa_py.runtime.process import ProcessOptions
    from capa_py.store.errors import Invalid
    from capa_py.store.selectors import LabelSelector

    if core_controllers not in ("auto", "on", "off"):
        fail("--core-controllers must be auto, on or off", EXIT_INVALID)
    # Before any thread starts: freed memory is shared by two arenas instead of kept by one per thread.
    limit_arenas()
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
    metrics_address, probe_address = bind_addresses(metrics_bind_address, health_probe_bind_address)
    webhooks = webhook_options(webhook_cert_dir, webhook_bind_address)
    hegel = hegel_options(hegel_port, hegel_bind, trusted_proxies)
    tink_server = tink_server_options(
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
        code = run(
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


def register(app: typer.Typer) -> None:
    app.command(name="controller")(controller)
