"""Subnets (``CreateSubnet``), public or private, one per availability zone and role.

AWS forbids overlapping CIDRs inside a VPC, so (VPC, CIDR) is a natural key: whatever holds that CIDR in
that VPC is the subnet we want (or a conflict to report). Whether instances get a public IP at launch
(``MapPublicIpOnLaunch``) is the mutable attribute: on for public subnets, off for private ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_filters
from capa_py.engine.traits import Traits
from resources._common import carries, ec2_by_filter, ec2_create_tags, ec2_items, tag_specifications

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:CreateSubnet",
    "ec2:DeleteSubnet",
    "ec2:DescribeSubnets",
    "ec2:ModifySubnetAttribute",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""


@dataclass(frozen=True)
class SubnetDesired:
    vpc_id: str
    cidr_block: str
    availability_zone: str
    is_public: bool = False


def _observed(subnet: Mapping[str, Any]) -> Observed:
    return Observed(
        id=subnet["SubnetId"],
        tags=tag_dict(subnet.get("Tags")),
        state=subnet.get("State"),
        attributes={
            "vpc_id": subnet.get("VpcId"),
            "cidr_block": subnet.get("CidrBlock"),
            "availability_zone": subnet.get("AvailabilityZone"),
            "map_public_ip_on_launch": bool(subnet.get("MapPublicIpOnLaunch")),
        },
    )


class Subnet(ResourceClass[SubnetDesired]):
    """A subnet. ``delete`` of an id that does not exist raises :class:`~capa_py.aws.errors.NotFound`
    (``InvalidSubnetID.NotFound``)."""

    kind = "subnet"
    service = "ec2"
    create_operation = "CreateSubnet"
    traits = Traits(tag_on_create=True, taggable=True, natural_key=True)
    """CreateSubnet accepts TagSpecifications (tag_on_create); it has no ClientToken; CreateTags tags it
    later (taggable); subnets in a VPC cannot overlap, so (VPC, CIDR) finds it (natural_key)."""
    tracks_updates = True

    def parent_of(self, desired: SubnetDesired) -> str | None:
        return desired.vpc_id

    def create(self, desired: SubnetDesired, tags: Mapping[str, str] | None, token: str | None) -> Observed:
        response = self.aws.ec2.call(
            "CreateSubnet",
            after_create=True,  # the VPC may be moments old
            VpcId=desired.vpc_id,
            CidrBlock=desired.cidr_block,
            AvailabilityZone=desired.availability_zone,
            **tag_specifications("subnet", tags),
        )
        return _observed(response["Subnet"])

    def describe_by_id(self, resource_id: str) -> Observed | None:
        subnets = ec2_items(self.aws.ec2, "DescribeSubnets", "Subnets", SubnetIds=[resource_id])
        return _observed(subnets[0]) if subnets else None

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        subnets = ec2_by_filter(self.aws.ec2, "DescribeSubnets", "Subnets", "subnet-id", resource_ids)
        return {o.id: o for o in map(_observed, subnets) if o.id in resource_ids}

    def describe_by_tags(self, tags: Mapping[str, str], desired: SubnetDesired | None) -> list[Observed]:
        subnets = ec2_items(self.aws.ec2, "DescribeSubnets", "Subnets", Filters=tag_filters(tags))
        return [o for o in map(_observed, subnets) if carries(o.tags, tags)]

    def describe_by_key(self, desired: SubnetDesired) -> Observed | None:
        filters = [
            {"Name": "vpc-id", "Values": [desired.vpc_id]},
            {"Name": "cidr-block", "Values": [desired.cidr_block]},
        ]
        subnets = ec2_items(self.aws.ec2, "DescribeSubnets", "Subnets", Filters=filters)
        return _observed(subnets[0]) if subnets else None

    def mismatches(self, observed: Observed, desired: SubnetDesired) -> list[Mismatch]:
        found = observed.attributes
        return compare(
            {
                "vpcId": (desired.vpc_id, found.get("vpc_id")),
                "cidrBlock": (desired.cidr_block, found.get("cidr_block")),
                "availabilityZone": (desired.availability_zone, found.get("availability_zone")),
            }
        )

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def update(self, observed: Observed, desired: SubnetDesired) -> bool:
        if observed.attributes.get("map_public_ip_on_launch") == desired.is_public:
            return False
        self.aws.ec2.call(
            "ModifySubnetAttribute",
            after_create=True,
            SubnetId=observed.id,
            MapPublicIpOnLaunch={"Value": desired.is_public},
        )
        observed.attributes["map_public_ip_on_launch"] = desired.is_public
        return True

    def delete(self, resource_id: str) -> None:
        self.aws.ec2.call("DeleteSubnet", SubnetId=resource_id)

    def key_of(self, desired: SubnetDesired) -> str:
        return f"{desired.vpc_id}/{desired.cidr_block}"

    def fingerprint(self, desired: SubnetDesired) -> dict[str, str]:
        return {
            "vpc_id": desired.vpc_id,
            "cidr_block": desired.cidr_block,
            "availability_zone": desired.availability_zone,
            "public": str(desired.is_public).lower(),
        }
