"""Endpoint profiles: trait overrides for endpoints that lack an AWS feature.

A resource class declares what the real AWS API supports. An emulator or a partition may not honour all of
it, and a strategy that relies on a missing feature would duplicate resources there. A profile lowers the
affected traits so the engine picks a strategy that does not rely on them. Overrides are keyed by resource
kind (``"*"`` for every kind). Tests use the same mechanism to drive every strategy over real resources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from capa_py.engine.traits import Traits

ADOPTION_WINDOW = 600.0
"""Default bound, in seconds, on adopting what an interrupted create made (see
:attr:`EndpointProfile.adoption_window`): ten minutes covers a restart after a crash or a lost process."""
CLOCK_SKEW = 60.0
"""Default tolerance, in seconds, between this machine's clock and the creation times AWS reports."""


@dataclass(frozen=True)
class EndpointProfile:
    name: str
    overrides: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    consistency_window: float = 0.0
    """Seconds after a create during which a recorded resource that describe cannot see is presumed
    not yet visible (AWS's eventual consistency) rather than gone."""
    adoption_window: float = ADOPTION_WINDOW
    """Seconds after an intent's start within which a resource the interrupted create may have made must
    have been created (when its creation time is known), and within which the intent must first be
    examined for candidates without a creation time to be adoptable at all."""
    clock_skew: float = CLOCK_SKEW
    """Seconds a creation time reported by AWS may precede the intent's start (clocks differ)."""

    def effective(self, kind: str, declared: Traits) -> Traits:
        traits = declared
        for key in ("*", kind):
            if key in self.overrides:
                traits = traits.with_overrides(**self.overrides[key])
        return traits

    def with_overrides(
        self, overrides: Mapping[str, Mapping[str, Any]], name: str | None = None
    ) -> EndpointProfile:
        merged: dict[str, dict[str, bool]] = {k: dict(v) for k, v in self.overrides.items()}
        for kind, traits in overrides.items():
            merged.setdefault(kind, {}).update(traits)
        return replace(self, name=name or f"{self.name}+overrides", overrides=merged)


AWS = EndpointProfile(
    "aws",
    notes=("Real AWS: every declared trait holds; describes are eventually consistent after a create.",),
    consistency_window=60.0,
)

EMULATOR_OVERRIDES: dict[str, dict[str, bool]] = {
    "*": {"client_token": False},
    "bucket": {"tag_on_create": False},
}
"""What moto 5.2 and LocalStack lack: tokens on every call (Route 53's CallerReference included), and the
tags of ``CreateBucketConfiguration.Tags``, accepted and dropped, so buckets are tagged after create."""

_BUCKET_TAGS_NOTE = (
    "S3 CreateBucket's CreateBucketConfiguration.Tags are accepted and dropped: buckets are tagged with "
    "PutBucketTagging after create (strategy class 3, found again by name)."
)

MOTO = EndpointProfile(
    "moto",
    overrides=EMULATOR_OVERRIDES,
    notes=(
        "moto 5.2 ignores ClientToken on every call: a repeated RunInstances with the same token creates "
        "a second instance, so no strategy may rely on tokens.",
        "moto's ELBv2 CreateLoadBalancer with an existing name creates a second load balancer; the engine "
        "always looks a natural key up before creating, so it does not rely on create-by-name idempotency.",
        "Route 53 CreateHostedZone ignores CallerReference (a repeat makes a second zone): hosted zones "
        "take strategy class 3 there.",
        _BUCKET_TAGS_NOTE,
    ),
)

LOCALSTACK = EndpointProfile(
    "localstack",
    overrides=EMULATOR_OVERRIDES,
    notes=(
        "LocalStack serves EC2 from moto and shares its gaps; its free edition has no ELB/ELBv2.",
        _BUCKET_TAGS_NOTE,
    ),
)

PROFILES: dict[str, EndpointProfile] = {p.name: p for p in (AWS, MOTO, LOCALSTACK)}


def profile_for_endpoint(endpoint: str | None, explicit: str | None = None) -> EndpointProfile:
    """The profile for an endpoint: explicit name, else ``aws`` for AWS itself and ``moto`` for any
    other endpoint (emulators), which is the safe default."""
    if explicit:
        try:
            return PROFILES[explicit]
        except KeyError:
            raise ValueError(
                f"unknown endpoint profile {explicit!r} (known: {', '.join(PROFILES)})"
            ) from None
    if endpoint is None:
        return AWS
    return LOCALSTACK if ":4566" in endpoint else MOTO
