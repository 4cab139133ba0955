"""The availability zones of each AWS region, as a table: validation must not call AWS.

A zone's name is its region followed by one letter (``us-east-1a``). Which letters exist differs per
region, and in the oldest regions letters are mapped to physical zones per account (an account sees a
subset), so the table lists every letter any account can see in the region. A zone outside this table is
refused when a manifest is loaded; a zone in the table that a particular account does not have is
refused by AWS at the first subnet create and reported on the AWSCluster. Local Zones and Wavelength Zones
(``us-east-1-bos-1a``) are not supported as subnet zones.

Update the table when AWS opens a zone (``aws ec2 describe-availability-zones --all-availability-zones
--region REGION``); a region botocore knows but the table lacks is refused with a message saying so.
"""

from __future__ import annotations

_ABC = "abc"
_ABCD = "abcd"

ZONE_LETTERS: dict[str, str] = {
    # North America
    "us-east-1": "abcdef",
    "us-east-2": _ABC,
    "us-west-1": _ABC,
    "us-west-2": _ABCD,
    "ca-central-1": _ABCD,
    "ca-west-1": _ABC,
    "mx-central-1": _ABC,
    "us-gov-east-1": _ABC,
    "us-gov-west-1": _ABC,
    # South America
    "sa-east-1": _ABC,
    # Europe
    "eu-central-1": _ABC,
    "eu-central-2": _ABC,
    "eu-north-1": _ABC,
    "eu-south-1": _ABC,
    "eu-south-2": _ABC,
    "eu-west-1": _ABC,
    "eu-west-2": _ABC,
    "eu-west-3": _ABC,
    "eusc-de-east-1": _ABC,
    # Middle East and Africa
    "af-south-1": _ABC,
    "il-central-1": _ABC,
    "me-central-1": _ABC,
    "me-south-1": _ABC,
    # Asia Pacific
    "ap-east-1": _ABC,
    "ap-east-2": _ABC,
    "ap-northeast-1": _ABCD,
    "ap-northeast-2": _ABCD,
    "ap-northeast-3": _ABC,
    "ap-south-1": _ABC,
    "ap-south-2": _ABC,
    "ap-southeast-1": _ABC,
    "ap-southeast-2": _ABC,
    "ap-southeast-3": _ABC,
    "ap-southeast-4": _ABC,
    "ap-southeast-5": _ABC,
    "ap-southeast-6": _ABC,
    "ap-southeast-7": _ABC,
    # China
    "cn-north-1": _ABCD,
    "cn-northwest-1": _ABC,
    # Isolated partitions
    "eu-isoe-west-1": _ABC,
    "us-iso-east-1": _ABC,
    "us-iso-west-1": _ABC,
    "us-isob-east-1": _ABC,
    "us-isob-west-1": _ABC,
    "us-isof-east-1": _ABC,
    "us-isof-south-1": _ABC,
}


def zones_of(region: str) -> tuple[str, ...]:
    """The zone names of ``region`` (empty when the table does not know the region)."""
    return tuple(f"{region}{letter}" for letter in ZONE_LETTERS.get(region, ""))


def zone_issue(zone: str, region: str) -> str | None:
    """Why ``zone`` cannot hold a subnet in ``region``, or ``None`` when it can."""
    known = zones_of(region)
    if zone in known:
        return None
    if not known:
        return f"unknown availability zone {zone!r}: the zone table has no entry for region {region}"
    return f"unknown availability zone {zone!r} for region {region} (zones: {', '.join(known)})"
