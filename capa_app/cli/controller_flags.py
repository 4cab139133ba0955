"""The flags of ``capa controller``, checked: each helper turns some flags into settings, or exits 2 naming
the flag that is wrong."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from capa_app.cli.common import EXIT_INVALID, fail
from capa_app.cli.durations import parse_duration
from capa_app.cli.tink_flags import WorkflowServerOptions, checked_hegel_flags, checked_server_flags
from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.runtime.endpoints import BindAddress, parse_bind_address
from capa_py.runtime.leader import LEASE_DURATION_ENV, LeaseTiming
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore
from controllers.tinkerbell import WorkflowTimeouts

if TYPE_CHECKING:
    from capa_py.tinkerbell.hegel import IPNetwork

CLUSTER_CRD = "clusters.cluster.x-k8s.io"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"


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


def workflow_timeouts(scheduling: str, cancel: str, action: str) -> WorkflowTimeouts:
    """The supervisor's timeouts from the ``--workflow-*-timeout`` flags; ValueError naming a bad one."""

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


def bind_addresses(metrics: str, probes: str) -> tuple[BindAddress | None, BindAddress | None]:
    """The metrics and probe addresses (None: not served); exits 2 when one is malformed."""
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
    # Imported only when webhooks are asked for: they bring the API server's validation (15 MiB resident).
    from capa_py.webhooks import CertificateReloader, WebhookConfigError

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
    trusted = checked_hegel_flags("--hegel-port", port, trusted_proxies)
    return HegelOptions(bind, port, trusted) if port else None


def tink_server_options(
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
