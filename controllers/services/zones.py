"""Which zones and subnets a managed VPC gets, and the roles its subnets are recorded under."""

from __future__ import annotations

import ipaddress
import random
import re
from collections.abc import Iterable, Mapping

from capa_py.api.aws import RecordedResource, SubnetSpec

ZONES_FRESHNESS = 3600.0
"""How long the region's available zones are reused by the processes sharing observations."""
_DEFAULT_SUBNET_ROLE = re.compile(r"^subnet-(public|private)-([a-z0-9-]+[a-z])$")


def subnet_roles(subnets: Iterable[SubnetSpec]) -> list[str]:
    """Stable roles for declared subnets: ``subnet-public-us-east-1a`` (``-2``… for more in one zone)."""
    roles: list[str] = []
    for subnet in subnets:
        base = f"subnet-{'public' if subnet.is_public else 'private'}-{subnet.availability_zone or subnet.id}"
        role, n = base, 2
        while role in roles:
            role, n = f"{base}-{n}", n + 1
        roles.append(role)
    return roles


def default_subnets(vpc_cidr: str, zones: list[str]) -> list[SubnetSpec]:
    """A public and a private subnet per zone, splitting the VPC block evenly."""
    network = ipaddress.ip_network(vpc_cidr)
    count = 2 * len(zones)
    extra_bits = max(1, (count - 1).bit_length())
    blocks = list(network.subnets(prefixlen_diff=extra_bits))
    specs: list[SubnetSpec] = []
    for index, zone in enumerate(zones):
        specs.append(SubnetSpec(cidr_block=str(blocks[2 * index]), availability_zone=zone, is_public=True))
        specs.append(
            SubnetSpec(cidr_block=str(blocks[2 * index + 1]), availability_zone=zone, is_public=False)
        )
    return specs


def recorded_zones(resources: Mapping[str, RecordedResource]) -> list[str]:
    """The zones of the default subnets recorded in an AWSCluster's ``status.resources``."""
    return [
        match.group(2)
        for role, record in resources.items()
        if record.kind == "subnet" and (match := _DEFAULT_SUBNET_ROLE.match(role))
    ]


def choose_zones(
    zones: Iterable[str], limit: int, selection: str, seed: str, recorded: Iterable[str] = ()
) -> list[str]:
    """The zones default subnets use (``availabilityZoneSelection``, at most ``availabilityZoneUsageLimit``).

    ``Ordered`` takes zones in name order; ``Random`` in an order shuffled by a generator seeded with the
    AWSCluster's uid, so every reconcile of one cluster makes the same choice. Zones whose subnets are
    already recorded come first: once subnets exist, the choice stays fixed (as Cluster API Provider AWS
    fixes the subnets it picked), even if the region's zones change.
    """
    ranked = sorted(set(zones))
    if selection == "Random":
        random.Random(seed).shuffle(ranked)
    kept = list(dict.fromkeys(sorted(recorded)))
    chosen = kept + [z for z in ranked if z not in kept]
    return sorted(chosen[: max(limit, len(kept))])
