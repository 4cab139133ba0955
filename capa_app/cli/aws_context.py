"""Turning ``--aws-endpoint``/``--region``/``--profile`` into clients, an engine profile and controllers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capa_py.aws.local import LocalEndpoint, ensure_endpoint
from capa_py.aws.session import AWSSettings, ClientPool
from capa_py.engine.engine import Engine
from capa_py.engine.profiles import EndpointProfile, profile_for_endpoint

LOCAL = "local"


@dataclass
class AWSContext:
    pool: ClientPool
    engine: Engine
    endpoint: str | None
    profile: EndpointProfile
    local: LocalEndpoint | None = None
    """The local endpoint, with ``--aws-endpoint local``."""


def build_aws_context(
    state_path: Path,
    endpoint: str | None,
    region: str | None,
    profile: str | None = None,
    endpoint_profile: str | None = None,
) -> AWSContext:
    """Resolve the endpoint (starting the local one if asked) and make the client pool and the engine.

    Raises :class:`~capa_py.aws.errors.MissingCredentials` when there are no credentials and no endpoint.
    """
    url = endpoint
    running = None
    if endpoint == LOCAL:
        running = ensure_endpoint()
        url = running.url
    settings = AWSSettings(region=region or "us-east-1", profile=profile, endpoint_url=url, observe=True)
    traits_profile = profile_for_endpoint(settings.effective_endpoint, endpoint_profile)
    pool = ClientPool(settings)
    pool.for_region(settings.region)  # fails fast on missing credentials
    return AWSContext(pool, Engine(traits_profile), settings.effective_endpoint, traits_profile, running)
