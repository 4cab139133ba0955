"""What AWS refuses, checked before anything is sent to it: regions and instance types botocore knows,
IPv4 CIDR blocks and the block sizes AWS accepts, and tags (how many, their keys, values and characters)."""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from functools import cache

REGION_PATTERN = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
_RESERVED_TAG_PREFIX = "aws:"


@cache
def known_regions() -> frozenset[str]:
    """Every region botocore's endpoint data knows, across partitions (read offline)."""
    from capa_py.aws.models import session_with_shared_data

    session = session_with_shared_data()
    regions: set[str] = set()
    for partition in session.get_available_partitions():
        regions.update(session.get_available_regions("ec2", partition_name=partition))
    return frozenset(regions)


@cache
def known_instance_types() -> frozenset[str]:
    """Every EC2 instance type in botocore's EC2 service model (the ``InstanceType`` enum, read offline)."""
    from capa_py.aws.models import shared_loader

    # The process's loader: the EC2 model the clients use, not a second copy of it.
    model = shared_loader().load_service_model("ec2", "service-2")
    return frozenset(model["shapes"]["InstanceType"]["enum"])


# The block sizes AWS accepts for a VPC's primary block and for a subnet (netmask /16 to /28).
MIN_PREFIX = 16
MAX_PREFIX = 28


def block_size_issue(value: str, what: str) -> str | None:
    """Why AWS would refuse ``value`` (a valid IPv4 CIDR) as a VPC or subnet block, or ``None``."""
    prefix = ipaddress.IPv4Network(value).prefixlen
    if MIN_PREFIX <= prefix <= MAX_PREFIX:
        return None
    return f"{value}: a {what} block must be between /{MIN_PREFIX} and /{MAX_PREFIX} (AWS refuses /{prefix})"


# What AWS will refuse is checked as a semantic issue (when a manifest is loaded and when an object is
# written), not by field validators, which also run when a stored object is read: an object stored by an
# older version must stay readable, and deletable, after a rule is added.


def check_cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError("not a valid CIDR") from exc
    if network.version != 4:
        raise ValueError("not a valid CIDR: only IPv4 blocks are supported")
    return value


MAX_TAGS = 50
"""Tags AWS allows on one resource (EC2, ELBv2 and IAM alike)."""
OWN_TAGS = 6
"""The most tags capa-py puts on one resource itself: the cluster's owned tag, the cloud provider's (shared
resources), CAPA's role, capa-py's role, the store and ``Name`` (``capa_py.engine.tags``)."""
MAX_USER_TAGS = MAX_TAGS - OWN_TAGS
_TAG_PUNCTUATION = frozenset(" _.:/=+-@")


def _tag_character_issue(text: str) -> str | None:
    """Why ``text`` cannot be a tag key or value on every service capa-py tags; None when it can. ELBv2's
    and IAM's pattern is the narrowest: letters, spaces, numbers and ``_ . : / = + - @`` (Unicode
    categories L, Z and N)."""
    for char in text:
        if char in _TAG_PUNCTUATION or unicodedata.category(char)[0] in "LNZ":
            continue
        allowed = "letters, numbers, spaces and _ . : / = + - @"
        return f"character {char!r} (U+{ord(char):04X}) is not allowed ({allowed})"
    return None


def check_tags(tags: dict[str, str]) -> dict[str, str]:
    if len(tags) > MAX_USER_TAGS:
        raise ValueError(
            f"{len(tags)} tags: at most {MAX_USER_TAGS} (AWS allows {MAX_TAGS} per resource and capa-py "
            f"adds up to {OWN_TAGS} of its own)"
        )
    for key, value in tags.items():
        if not key or len(key) > 128:
            raise ValueError(f"tag key {key!r} must be 1 to 128 characters")
        if key.lower().startswith(_RESERVED_TAG_PREFIX):
            raise ValueError(f"tag key {key!r} uses the reserved prefix 'aws:'")
        if len(value) > 256:
            raise ValueError(f"tag value for {key!r} is longer than 256 characters")
        issue = _tag_character_issue(key)
        if issue is not None:
            raise ValueError(f"tag key {key!r}: {issue}")
        issue = _tag_character_issue(value)
        if issue is not None:
            raise ValueError(f"tag value for {key!r}: {issue}")
    return tags
