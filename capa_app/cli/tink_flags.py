"""The flags of the Tinkerbell servers and ``capa tink render``, checked: each helper turns flags into
settings, or exits 2 naming the flag that is wrong. ``capa tink`` and ``capa controller`` (whose
``--hegel-*`` and ``--tink-server-*`` flags are the same ones, prefixed) share them."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from capa_app.cli.common import EXIT_INVALID, fail

if TYPE_CHECKING:
    from capa_py.tinkerbell.backoff import Backoff
    from capa_py.tinkerbell.hegel import IPNetwork
    from capa_py.tinkerbell.server import TLSFiles


def parse_data(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs (split at the first ``=``); ValueError naming the bad one."""
    data: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--data {item!r}: expected KEY=VALUE")
        data[key] = value
    return data


def checked_hegel_flags(port_flag: str, port: int, trusted_proxies: str | None) -> tuple[IPNetwork, ...]:
    """The trusted proxies Hegel's flags give; exits 2 naming the flag that is wrong."""
    from capa_py.tinkerbell.hegel import parse_trusted_proxies

    if not 0 <= port <= 65535:
        fail(f"{port_flag} must be between 0 and 65535, not {port}", EXIT_INVALID)
    try:
        return parse_trusted_proxies(trusted_proxies)
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)


_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def _listen_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return _HOST_NAME.fullmatch(text) is not None
    return True


@dataclass(frozen=True)
class WorkflowServerOptions:
    """Where the workflow server listens, with which certificate, and how it holds rejections back."""

    bind: str
    port: int
    tls: TLSFiles | None
    backoff: Backoff
    allow_unauthenticated_agents: bool = False


def checked_server_flags(
    prefix: str,
    bind: str,
    port: int,
    tls_cert: Path | None,
    tls_key: Path | None,
    backoff: str,
    backoff_max: str,
    tls_client_ca: Path | None = None,
    allow_unauthenticated_agents: bool = False,
) -> WorkflowServerOptions:
    """The workflow server's settings from its flags (named ``{prefix}port``, ``{prefix}tls-cert``, ...);
    exits 2 naming the flag that is wrong."""
    from capa_app.cli.durations import parse_duration
    from capa_py.tinkerbell.backoff import Backoff
    from capa_py.tinkerbell.server import check_tls

    if not 0 <= port <= 65535:
        fail(f"{prefix}port must be between 0 and 65535, not {port}", EXIT_INVALID)
    if not _listen_address(bind):
        fail(f"{prefix}bind: {bind!r} is not an IP address or a host name", EXIT_INVALID)
    seconds: dict[str, float] = {}
    for flag, text in (("rejection-backoff", backoff), ("rejection-backoff-max", backoff_max)):
        try:
            seconds[flag] = parse_duration(text)
        except ValueError as exc:
            fail(f"{prefix}{flag}: {exc}", EXIT_INVALID)
        if seconds[flag] <= 0:
            fail(f"{prefix}{flag} must be positive", EXIT_INVALID)
    if seconds["rejection-backoff-max"] < seconds["rejection-backoff"]:
        fail(f"{prefix}rejection-backoff-max must not be less than {prefix}rejection-backoff", EXIT_INVALID)
    try:
        tls = check_tls(tls_cert, tls_key, prefix, tls_client_ca)
    except ValueError as exc:
        fail(str(exc), EXIT_INVALID)
    return WorkflowServerOptions(
        bind,
        port,
        tls,
        Backoff(seconds["rejection-backoff"], seconds["rejection-backoff-max"]),
        allow_unauthenticated_agents,
    )


__all__ = ["WorkflowServerOptions", "checked_hegel_flags", "checked_server_flags", "parse_data"]
