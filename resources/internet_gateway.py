"""The internet gateway (``CreateInternetGateway``) and its attachment to the VPC (``AttachInternetGateway``).

The attachment is a resource of its own because its API is different: no tags, no token, and nothing to
record but the pair it joins, which is also its natural key (a gateway attaches to at most one VPC). Its id
is ``igw-…:vpc-…``; deleting it detaches. A gateway can only be deleted once detached, so the engine deletes
the attachment first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.aws.errors import InvalidRequest, NotFound
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_filters
from capa_py.engine.traits import Traits
from resources._common import carries, ec2_by_filter, ec2_create_tags, ec2_items, split_id, tag_specifications

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:AttachInternetGateway",
    "ec2:CreateInternetGateway",
    "ec2:DeleteInternetGateway",
    "ec2:DescribeInternetGateways",
    "ec2:DetachInternetGateway",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

# AWS answers a detach of a gateway that is not attached to that VPC with this code; it means "already gone".
_NOT_ATTACHED = "Gateway.NotAttached"
# DescribeInternetGateways reports a live attachment as "available" (VPC gateways) or "attached".
_LIVE_ATTACHMENT_STATES = frozenset({"attaching", "attached", "available"})


@dataclass(frozen=True)
class InternetGatewayDesired:
    """An internet gateway has nothing to choose: everything about it is in its tags and attachment."""

    vpc_id: str | None = None
    """The cluster's VPC it is made for (not sent: a gateway is created detached, then attached). The
    gateway is made only after that VPC and deleted before it: see :meth:`InternetGateway.made_after`."""


@dataclass(frozen=True)
class InternetGatewayAttachmentDesired:
    internet_gateway_id: str
    vpc_id: str


def _observed_gateway(gateway: Mapping[str, Any]) -> Observed:
    attachments = [
        {"vpc_id": a.get("VpcId"), "state": a.get("State")} for a in gateway.get("Attachments", [])
    ]
    attached = [a for a in attachments if a["state"] in _LIVE_ATTACHMENT_STATES]
    return Observed(
        id=gateway["InternetGatewayId"],
        tags=tag_dict(gateway.get("Tags")),
        state="attached" if attached else "detached",
        attributes={"attachments": attachments},
    )


class InternetGateway(ResourceClass[InternetGatewayDesired]):
    """An internet gateway. ``delete`` of an id that does not exist raises
    :class:`~capa_py.aws.errors.NotFound` (``InvalidInternetGatewayID.NotFound``); of an attached gateway,
    :class:`~capa_py.aws.errors.DependencyViolation`."""

    kind = "internet-gateway"
    service = "ec2"
    create_operation = "CreateInternetGateway"
    traits = Traits(tag_on_create=True, taggable=True)
    """CreateInternetGateway accepts TagSpecifications (tag_on_create); it has no ClientToken; CreateTags tags
    it later (taggable)."""

    def made_after(self, desired: InternetGatewayDesired) -> str | None:
        return desired.vpc_id

    def create(
        self, desired: InternetGatewayDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.ec2.call("CreateInternetGateway", **tag_specifications("internet-gateway", tags))
        return _observed_gateway(response["InternetGateway"])

    def describe_by_id(self, resource_id: str) -> Observed | None:
        gateways = ec2_items(
            self.aws.ec2, "DescribeInternetGateways", "InternetGateways", InternetGatewayIds=[resource_id]
        )
        return _observed_gateway(gateways[0]) if gateways else None

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        gateways = ec2_by_filter(
            self.aws.ec2, "DescribeInternetGateways", "InternetGateways", "internet-gateway-id", resource_ids
        )
        return {o.id: o for o in map(_observed_gateway, gateways) if o.id in resource_ids}

    def describe_by_tags(
        self, tags: Mapping[str, str], desired: InternetGatewayDesired | None
    ) -> list[Observed]:
        gateways = ec2_items(
            self.aws.ec2, "DescribeInternetGateways", "InternetGateways", Filters=tag_filters(tags)
        )
        return [o for o in map(_observed_gateway, gateways) if carries(o.tags, tags)]

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def delete(self, resource_id: str) -> None:
        self.aws.ec2.call("DeleteInternetGateway", InternetGatewayId=resource_id)

    def key_of(self, desired: InternetGatewayDesired) -> str:
        return "internet-gateway"

    def fingerprint(self, desired: InternetGatewayDesired) -> dict[str, str]:
        return {}


def attachment_id(internet_gateway_id: str, vpc_id: str) -> str:
    return f"{internet_gateway_id}:{vpc_id}"


class InternetGatewayAttachment(ResourceClass[InternetGatewayAttachmentDesired]):
    """The attachment of an internet gateway to a VPC, id ``igw-…:vpc-…``. Attaching a pair that is already
    attached raises :class:`~capa_py.aws.errors.AlreadyExists` (``Resource.AlreadyAssociated``); ``delete``
    of a pair that is not attached raises :class:`~capa_py.aws.errors.NotFound`."""

    kind = "internet-gateway-attachment"
    reads_within = InternetGateway.kind
    service = "ec2"
    create_operation = "AttachInternetGateway"
    traits = Traits(natural_key=True)
    """AttachInternetGateway has no TagSpecifications and no ClientToken, and an attachment cannot be tagged;
    the (VPC, gateway) pair finds it (natural_key)."""

    def create(
        self, desired: InternetGatewayAttachmentDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        self.aws.ec2.call(
            "AttachInternetGateway",
            after_create=True,  # the gateway and the VPC may be moments old
            InternetGatewayId=desired.internet_gateway_id,
            VpcId=desired.vpc_id,
        )
        return self._observed(desired.internet_gateway_id, desired.vpc_id, "attached")

    def describe_by_id(self, resource_id: str) -> Observed | None:
        gateway_id, vpc_id = split_id(resource_id, ":", self.kind)
        return self._lookup(gateway_id, vpc_id)

    def describe_by_key(self, desired: InternetGatewayAttachmentDesired) -> Observed | None:
        return self._lookup(desired.internet_gateway_id, desired.vpc_id)

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        """Attachments of gateways observed moments ago (``within``) are read from that observation; the
        other gateways are described, all in one call."""
        pairs = {tuple(split_id(rid, ":", self.kind)) for rid in resource_ids}
        gateway_ids = {g for g, _ in pairs}
        found: dict[str, Observed] = {}
        for cached in sorted((o for o in within if o.id in gateway_ids), key=lambda o: o.id):
            gateway_id = cached.id
            for attachment in cached.attributes["attachments"]:
                pair = (gateway_id, attachment["vpc_id"])
                if pair in pairs and attachment["state"] in _LIVE_ATTACHMENT_STATES:
                    observed = self._observed(gateway_id, attachment["vpc_id"], attachment["state"])
                    found[observed.id] = observed
        pairs = {p for p in pairs if attachment_id(*p) not in found}
        gateways = ec2_by_filter(
            self.aws.ec2,
            "DescribeInternetGateways",
            "InternetGateways",
            "internet-gateway-id",
            {gateway for gateway, _ in pairs},
        )
        for gateway in gateways:
            for attachment in gateway.get("Attachments", []):
                pair = (gateway["InternetGatewayId"], attachment.get("VpcId"))
                if pair in pairs and attachment.get("State") in _LIVE_ATTACHMENT_STATES:
                    observed = self._observed(pair[0], str(pair[1]), attachment["State"])
                    found[observed.id] = observed
        return found

    def parent_of(self, desired: InternetGatewayAttachmentDesired) -> str | None:
        return desired.internet_gateway_id

    def delete(self, resource_id: str) -> None:
        gateway_id, vpc_id = split_id(resource_id, ":", self.kind)
        try:
            self.aws.ec2.call("DetachInternetGateway", InternetGatewayId=gateway_id, VpcId=vpc_id)
        except InvalidRequest as exc:
            if exc.code != _NOT_ATTACHED:
                raise
            raise NotFound(str(exc), exc.service, exc.operation, exc.code) from exc

    def mismatches(self, observed: Observed, desired: InternetGatewayAttachmentDesired) -> list[Mismatch]:
        found = observed.attributes
        return compare(
            {
                "internetGatewayId": (desired.internet_gateway_id, found.get("internet_gateway_id")),
                "vpcId": (desired.vpc_id, found.get("vpc_id")),
            }
        )

    def key_of(self, desired: InternetGatewayAttachmentDesired) -> str:
        return attachment_id(desired.internet_gateway_id, desired.vpc_id)

    def fingerprint(self, desired: InternetGatewayAttachmentDesired) -> dict[str, str]:
        return {"internet_gateway_id": desired.internet_gateway_id, "vpc_id": desired.vpc_id}

    def _lookup(self, gateway_id: str, vpc_id: str) -> Observed | None:
        gateways = ec2_items(
            self.aws.ec2, "DescribeInternetGateways", "InternetGateways", InternetGatewayIds=[gateway_id]
        )
        for gateway in gateways:
            for attachment in gateway.get("Attachments", []):
                if attachment.get("VpcId") == vpc_id and attachment.get("State") in _LIVE_ATTACHMENT_STATES:
                    return self._observed(gateway_id, vpc_id, attachment["State"])
        return None

    @staticmethod
    def _observed(gateway_id: str, vpc_id: str, state: str) -> Observed:
        return Observed(
            id=attachment_id(gateway_id, vpc_id),
            state=state,
            attributes={"internet_gateway_id": gateway_id, "vpc_id": vpc_id},
        )
