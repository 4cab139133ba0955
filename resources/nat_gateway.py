"""NAT gateways (``CreateNatGateway``): one per public subnet, with an elastic IP, for private egress.

A NAT gateway moves through ``pending`` → ``available`` and, when deleted, ``deleting`` → ``deleted``
(or ``failed`` when it could not be created); AWS keeps deleted and failed ones visible for about an hour.
Those are gone for our purposes: :meth:`NatGateway.describe_by_id` returns None for them and lookups by tags
skip them (and ``deleting`` ones, which cannot be adopted). Deletion takes minutes, so callers requeue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from capa_py.aws.errors import NotFound
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_filters
from capa_py.engine.tags import owning_cluster
from capa_py.engine.traits import Traits
from resources._common import (
    carries,
    client_token_param,
    ec2_by_filter,
    ec2_create_tags,
    ec2_items,
    tag_specifications,
)

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:CreateNatGateway",
    "ec2:DeleteNatGateway",
    "ec2:DescribeNatGateways",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

GONE_STATES = frozenset({"deleted", "failed"})
LIVE_STATES = ("pending", "available")


@dataclass(frozen=True)
class NatGatewayDesired:
    subnet_id: str
    allocation_id: str


def _observed(gateway: Mapping[str, Any]) -> Observed:
    addresses = gateway.get("NatGatewayAddresses", [])
    return Observed(
        id=gateway["NatGatewayId"],
        tags=tag_dict(gateway.get("Tags")),
        state=gateway.get("State"),
        created_at=gateway.get("CreateTime"),
        attributes={
            "subnet_id": gateway.get("SubnetId"),
            "vpc_id": gateway.get("VpcId"),
            "allocation_ids": [a["AllocationId"] for a in addresses if a.get("AllocationId")],
            "public_ips": [a["PublicIp"] for a in addresses if a.get("PublicIp")],
            "connectivity_type": gateway.get("ConnectivityType"),
            "failure_code": gateway.get("FailureCode"),
            "failure_message": gateway.get("FailureMessage"),
        },
    )


class NatGateway(ResourceClass[NatGatewayDesired]):
    """A public NAT gateway. ``delete`` starts the deletion of a live gateway, does nothing for one already
    ``deleting``, and raises :class:`~capa_py.aws.errors.NotFound` for one that does not exist or is
    already deleted/failed. It describes first: moto answers a delete of an unknown id with HTTP 500, and
    a gateway already deleting needs no second request."""

    kind = "nat-gateway"
    service = "ec2"
    create_operation = "CreateNatGateway"
    traits = Traits(tag_on_create=True, client_token=True, taggable=True)
    """CreateNatGateway accepts TagSpecifications (tag_on_create) and ClientToken (client_token); CreateTags
    tags it later (taggable)."""
    deletion_is_slow: ClassVar[bool] = True

    def parent_of(self, desired: NatGatewayDesired) -> str | None:
        return desired.subnet_id

    def create(
        self, desired: NatGatewayDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.ec2.call(
            "CreateNatGateway",
            after_create=True,  # the subnet and the address may be moments old
            SubnetId=desired.subnet_id,
            AllocationId=desired.allocation_id,
            ConnectivityType="public",
            **tag_specifications("natgateway", tags),
            **client_token_param(token),
        )
        return _observed(response["NatGateway"])

    def describe_by_id(self, resource_id: str) -> Observed | None:
        gateways = ec2_items(self.aws.ec2, "DescribeNatGateways", "NatGateways", NatGatewayIds=[resource_id])
        live = [
            g for g in gateways if g.get("NatGatewayId") == resource_id and g.get("State") not in GONE_STATES
        ]
        return _observed(live[0]) if live else None

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        gateways = ec2_by_filter(
            self.aws.ec2, "DescribeNatGateways", "NatGateways", "nat-gateway-id", resource_ids
        )
        return {
            g["NatGatewayId"]: _observed(g)
            for g in gateways
            if g.get("NatGatewayId") in resource_ids and g.get("State") not in GONE_STATES
        }

    def describe_by_tags(self, tags: Mapping[str, str], desired: NatGatewayDesired | None) -> list[Observed]:
        filters = [*tag_filters(tags), {"Name": "state", "Values": list(LIVE_STATES)}]
        gateways = ec2_items(self.aws.ec2, "DescribeNatGateways", "NatGateways", Filter=filters)
        return [o for o in map(_observed, gateways) if o.state in LIVE_STATES and carries(o.tags, tags)]

    def describe_candidates(self, desired: NatGatewayDesired) -> list[Observed]:
        """Live gateways in the desired subnet using the desired address that no cluster owns."""
        filters = [
            {"Name": "subnet-id", "Values": [desired.subnet_id]},
            {"Name": "state", "Values": list(LIVE_STATES)},
        ]
        gateways = ec2_items(self.aws.ec2, "DescribeNatGateways", "NatGateways", Filter=filters)
        return [
            o
            for o in map(_observed, gateways)
            if o.state in LIVE_STATES
            and o.attributes["subnet_id"] == desired.subnet_id
            and desired.allocation_id in o.attributes["allocation_ids"]
            and owning_cluster(o.tags) is None
        ]

    def mismatches(self, observed: Observed, desired: NatGatewayDesired) -> list[Mismatch]:
        found = observed.attributes
        return compare(
            {
                "subnetId": (desired.subnet_id, found.get("subnet_id")),
                "connectivityType": ("public", found.get("connectivity_type")),
            }
        )

    def is_ready(self, observed: Observed) -> bool:
        return observed.state == "available"

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def delete(self, resource_id: str) -> None:
        observed = self.describe_by_id(resource_id)
        if observed is None:
            raise NotFound(f"ec2:DeleteNatGateway: {resource_id} does not exist", "ec2", "DeleteNatGateway")
        if observed.state == "deleting":
            return
        self.aws.ec2.call("DeleteNatGateway", NatGatewayId=resource_id)

    def key_of(self, desired: NatGatewayDesired) -> str:
        return f"{desired.subnet_id}/{desired.allocation_id}"

    def fingerprint(self, desired: NatGatewayDesired) -> dict[str, str]:
        return {"subnet_id": desired.subnet_id, "allocation_id": desired.allocation_id}
