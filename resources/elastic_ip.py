"""Elastic IP addresses (``AllocateAddress`` in the VPC domain), one per NAT gateway.

An unattached address costs money every hour, which is why interrupted allocations matter:
:meth:`ElasticIp.describe_candidates` lists addresses with no tags at all and no association, the shape an
allocation interrupted before tagging leaves behind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_filters
from capa_py.engine.traits import Traits
from resources._common import carries, ec2_by_filter, ec2_create_tags, ec2_items, tag_specifications

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:AllocateAddress",
    "ec2:DescribeAddresses",
    "ec2:ReleaseAddress",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""


@dataclass(frozen=True)
class ElasticIpDesired:
    """An address from Amazon's pool: nothing to choose beyond its tags."""

    vpc_id: str | None = None
    """The cluster's VPC whose NAT gateway it is for (not sent). The address is made only after that VPC
    and released before it: see :meth:`ElasticIp.made_after`."""


def _observed(address: Mapping[str, Any]) -> Observed:
    association = address.get("AssociationId")
    return Observed(
        id=address["AllocationId"],
        tags=tag_dict(address.get("Tags")),
        state="associated" if association else "unassociated",
        attributes={
            "public_ip": address.get("PublicIp"),
            "association_id": association,
            "network_interface_id": address.get("NetworkInterfaceId"),
            "instance_id": address.get("InstanceId") or None,
            "domain": address.get("Domain"),
        },
    )


class ElasticIp(ResourceClass[ElasticIpDesired]):
    """An elastic IP, by allocation id. ``delete`` releases it; of an allocation id that does not exist it
    raises :class:`~capa_py.aws.errors.NotFound` (``InvalidAllocationID.NotFound``), of an address still in
    use :class:`~capa_py.aws.errors.DependencyViolation` (``InvalidIPAddress.InUse``)."""

    kind = "elastic-ip"
    service = "ec2"
    create_operation = "AllocateAddress"
    traits = Traits(tag_on_create=True, taggable=True)
    """AllocateAddress accepts TagSpecifications (tag_on_create); it has no ClientToken; CreateTags tags it
    later (taggable)."""

    def create(
        self, desired: ElasticIpDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.ec2.call(
            "AllocateAddress", Domain="vpc", **tag_specifications("elastic-ip", tags)
        )
        return Observed(
            id=response["AllocationId"],
            tags=dict(tags or {}),
            state="unassociated",
            attributes={"public_ip": response.get("PublicIp"), "association_id": None, "domain": "vpc"},
        )

    def describe_by_id(self, resource_id: str) -> Observed | None:
        addresses = ec2_items(self.aws.ec2, "DescribeAddresses", "Addresses", AllocationIds=[resource_id])
        return _observed(addresses[0]) if addresses else None

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        addresses = ec2_by_filter(
            self.aws.ec2, "DescribeAddresses", "Addresses", "allocation-id", resource_ids
        )
        return {o.id: o for o in map(_observed, addresses) if o.id in resource_ids}

    def describe_by_tags(self, tags: Mapping[str, str], desired: ElasticIpDesired | None) -> list[Observed]:
        addresses = ec2_items(self.aws.ec2, "DescribeAddresses", "Addresses", Filters=tag_filters(tags))
        return [o for o in map(_observed, addresses) if carries(o.tags, tags)]

    def describe_candidates(self, desired: ElasticIpDesired) -> list[Observed]:
        """VPC addresses with no tags at all and no association."""
        filters = [{"Name": "domain", "Values": ["vpc"]}]
        addresses = ec2_items(self.aws.ec2, "DescribeAddresses", "Addresses", Filters=filters)
        return [o for o in map(_observed, addresses) if not o.tags and not o.attributes["association_id"]]

    def mismatches(self, observed: Observed, desired: ElasticIpDesired) -> list[Mismatch]:
        return compare({"domain": ("vpc", observed.attributes.get("domain"))})

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def delete(self, resource_id: str) -> None:
        self.aws.ec2.call("ReleaseAddress", AllocationId=resource_id)

    def made_after(self, desired: ElasticIpDesired) -> str | None:
        return desired.vpc_id

    def key_of(self, desired: ElasticIpDesired) -> str:
        return "elastic-ip"

    def fingerprint(self, desired: ElasticIpDesired) -> dict[str, str]:
        return {"domain": "vpc"}
