"""The cluster VPC (``CreateVpc``), with DNS support and DNS hostnames as mutable attributes.

DNS hostnames are off on a new non-default VPC; instances then get no private DNS names, which the
in-cluster cloud provider relies on, so :meth:`Vpc.update` turns them on (and DNS support first, which
hostnames need).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.cache.known import known_of
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_filters
from capa_py.engine.tags import owning_cluster
from capa_py.engine.traits import Traits
from resources._common import (
    ATTRIBUTE_FRESHNESS,
    carries,
    ec2_by_filter,
    ec2_create_tags,
    ec2_items,
    tag_specifications,
)

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:CreateVpc",
    "ec2:DeleteVpc",
    "ec2:DescribeVpcAttribute",
    "ec2:DescribeVpcs",
    "ec2:ModifyVpcAttribute",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""


@dataclass(frozen=True)
class VpcDesired:
    cidr_block: str
    enable_dns_support: bool = True
    enable_dns_hostnames: bool = True


# (DescribeVpcAttribute ``Attribute`` value, ModifyVpcAttribute / response member), support first: AWS
# refuses DNS hostnames on a VPC without DNS support.
_DNS_ATTRIBUTES = (("enableDnsSupport", "EnableDnsSupport"), ("enableDnsHostnames", "EnableDnsHostnames"))
_NEW_VPC_DNS = {"enableDnsSupport": True, "enableDnsHostnames": False}
"""A VPC made by CreateVpc resolves DNS and gives instances no DNS hostnames (AWS's documented defaults)."""


def _observed(vpc: Mapping[str, Any]) -> Observed:
    return Observed(
        id=vpc["VpcId"],
        tags=tag_dict(vpc.get("Tags")),
        state=vpc.get("State"),
        attributes={"cidr_block": vpc.get("CidrBlock"), "is_default": bool(vpc.get("IsDefault"))},
    )


class Vpc(ResourceClass[VpcDesired]):
    """A VPC. ``delete`` of an id that does not exist raises :class:`~capa_py.aws.errors.NotFound`
    (``InvalidVpcID.NotFound``), which callers treat as gone."""

    kind = "vpc"
    service = "ec2"
    create_operation = "CreateVpc"
    traits = Traits(tag_on_create=True, taggable=True)
    """CreateVpc accepts TagSpecifications (tag_on_create); it has no ClientToken; CreateTags tags it later
    (taggable); a CIDR is not unique across VPCs, so there is no natural key."""
    tracks_updates = True  # the DNS attributes are kept as facts, not in the observation

    def create(self, desired: VpcDesired, tags: Mapping[str, str] | None, token: str | None) -> Observed:
        response = self.aws.ec2.call(
            "CreateVpc", CidrBlock=desired.cidr_block, **tag_specifications("vpc", tags)
        )
        observed = _observed(response["Vpc"])
        known = known_of(self.aws)
        for attribute, value in _NEW_VPC_DNS.items():
            known.learn(("vpc-attribute", observed.id, attribute), value)
        return observed

    def describe_by_id(self, resource_id: str) -> Observed | None:
        vpcs = ec2_items(self.aws.ec2, "DescribeVpcs", "Vpcs", VpcIds=[resource_id])
        return _observed(vpcs[0]) if vpcs else None

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        vpcs = ec2_by_filter(self.aws.ec2, "DescribeVpcs", "Vpcs", "vpc-id", resource_ids)
        return {o.id: o for o in map(_observed, vpcs) if o.id in resource_ids}

    def describe_by_tags(self, tags: Mapping[str, str], desired: VpcDesired | None) -> list[Observed]:
        vpcs = ec2_items(self.aws.ec2, "DescribeVpcs", "Vpcs", Filters=tag_filters(tags))
        return [o for o in map(_observed, vpcs) if carries(o.tags, tags)]

    def describe_candidates(self, desired: VpcDesired) -> list[Observed]:
        """VPCs with the desired CIDR that no cluster owns (and that are not the default VPC)."""
        filters = [{"Name": "cidr", "Values": [desired.cidr_block]}]
        vpcs = ec2_items(self.aws.ec2, "DescribeVpcs", "Vpcs", Filters=filters)
        return [
            o
            for o in map(_observed, vpcs)
            if not o.attributes["is_default"] and owning_cluster(o.tags) is None
        ]

    def mismatches(self, observed: Observed, desired: VpcDesired) -> list[Mismatch]:
        return compare({"cidrBlock": (desired.cidr_block, observed.attributes.get("cidr_block"))})

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def update(self, observed: Observed, desired: VpcDesired) -> bool:
        wanted = {
            "enableDnsSupport": desired.enable_dns_support,
            "enableDnsHostnames": desired.enable_dns_hostnames,
        }
        changed = False
        known = known_of(self.aws)
        for attribute, member in _DNS_ATTRIBUTES:

            def read(attribute: str = attribute, member: str = member) -> bool:
                current = self.aws.ec2.call(
                    "DescribeVpcAttribute", after_create=True, VpcId=observed.id, Attribute=attribute
                )
                return bool(current.get(member, {}).get("Value"))

            key = ("vpc-attribute", observed.id, attribute)
            if known.value(key, ATTRIBUTE_FRESHNESS, read) != wanted[attribute]:
                self.aws.ec2.call(
                    "ModifyVpcAttribute",
                    after_create=True,
                    VpcId=observed.id,
                    **{member: {"Value": wanted[attribute]}},
                )
                known.learn(key, wanted[attribute])
                changed = True
        return changed

    def delete(self, resource_id: str) -> None:
        self.aws.ec2.call("DeleteVpc", VpcId=resource_id)

    def key_of(self, desired: VpcDesired) -> str:
        return f"vpc {desired.cidr_block}"

    def fingerprint(self, desired: VpcDesired) -> dict[str, str]:
        return {"cidr_block": desired.cidr_block}
