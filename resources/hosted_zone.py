"""A Route 53 private hosted zone (``CreateHostedZone``), id ``Z…`` (without the ``/hostedzone/`` prefix).

The create takes no tags (``ChangeTagsForResource`` tags it afterwards) and a ``CallerReference``, Route 53's
idempotency token: botocore's model does not mark the member with the ``idempotencyToken`` trait, but the
API reference documents it as the string that lets a failed ``CreateHostedZone`` be retried without
creating twice, and ``HostedZoneAlreadyExists`` as the answer when a zone was already made with that caller
reference. So :meth:`HostedZone.create`, given the engine's token as the caller reference, answers that error
with the zone the reference made (every zone reports its ``CallerReference``): the same token always gives
the same zone, whether AWS returns it again or refuses the repeat. A zone name is not unique (several zones,
public or private, may share one), so there is no natural key: strategy class 2 on AWS, class 3 where
tokens are not honoured (the ``moto`` and ``localstack`` profiles).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capa_py.aws.errors import AlreadyExists, NotFound
from capa_py.aws.session import AWSClient
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_list
from capa_py.engine.tags import owning_cluster
from capa_py.engine.traits import Traits
from resources._common import carries

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:DescribeVpcs",
    "route53:ChangeTagsForResource",
    "route53:CreateHostedZone",
    "route53:DeleteHostedZone",
    "route53:GetHostedZone",
    "route53:ListHostedZones",
    "route53:ListTagsForResource",
    "route53:ListTagsForResources",
)
"""``ec2:DescribeVpcs``: Route 53 checks the VPC a private zone is associated with."""

TAGS_PER_CALL = 10
"""Route 53 takes at most 10 tags per ``ChangeTagsForResource`` and 10 ids per ``ListTagsForResources``."""


@dataclass(frozen=True)
class HostedZoneDesired:
    name: str
    """The zone's domain name (``alpha.internal``); a trailing dot is optional."""
    vpc_id: str
    vpc_region: str
    comment: str = ""


def fqdn(name: str) -> str:
    """A domain name as Route 53 reports it: lower case, with its trailing dot."""
    return name.lower().rstrip(".") + "."


def zone_id(raw: str) -> str:
    """``/hostedzone/Z123`` → ``Z123``."""
    return raw.rsplit("/", 1)[-1]


def _observed(
    zone: Mapping[str, Any], vpcs: list[Mapping[str, Any]] | None, tags: dict[str, str]
) -> Observed:
    config = zone.get("Config", {})
    return Observed(
        id=zone_id(zone["Id"]),
        tags=tags,
        attributes={
            "name": zone.get("Name"),
            "private": bool(config.get("PrivateZone")),
            "caller_reference": zone.get("CallerReference"),
            "vpc_ids": sorted(v.get("VPCId", "") for v in vpcs) if vpcs is not None else None,
            "record_count": zone.get("ResourceRecordSetCount"),
        },
    )


class HostedZone(ResourceClass[HostedZoneDesired]):
    """A private hosted zone associated with one VPC. ``delete`` of a zone that does not exist raises
    :class:`~capa_py.aws.errors.NotFound` (``NoSuchHostedZone``); of a zone still holding record sets
    other than its SOA and NS, :class:`~capa_py.aws.errors.DependencyViolation` (``HostedZoneNotEmpty``)."""

    kind = "hosted-zone"
    service = "route53"
    create_operation = "CreateHostedZone"
    traits = Traits(client_token=True, taggable=True)
    """CreateHostedZone takes no Tags (ChangeTagsForResource tags it afterwards: taggable) and a
    CallerReference, documented as its idempotency token (client_token); zone names are not unique, so
    there is no natural key."""

    @property
    def _route53(self) -> AWSClient:
        return self.aws.client("route53")

    def create(
        self, desired: HostedZoneDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        params: dict[str, Any] = {
            "Name": fqdn(desired.name),
            "VPC": {"VPCRegion": desired.vpc_region, "VPCId": desired.vpc_id},
            "HostedZoneConfig": {"PrivateZone": True, "Comment": desired.comment},
        }
        if token is None:
            # The caller reference is required; without a token honoured, a unique one per attempt, and a
            # create whose outcome is unknown is not repeated (the engine's intent finds it instead).
            params["CallerReference"] = uuid.uuid4().hex
            response = self._route53.call_with("CreateHostedZone", params, repeat_safe=False)
        else:
            try:
                response = self._route53.call("CreateHostedZone", CallerReference=token, **params)
            except AlreadyExists:
                made = self._by_caller_reference(token)
                if made is None:
                    raise
                return made
        return _observed(response["HostedZone"], response.get("VPC") and [response["VPC"]], {})

    def _by_caller_reference(self, reference: str) -> Observed | None:
        for zone in self._route53.pages("ListHostedZones", "HostedZones"):
            if zone.get("CallerReference") == reference:
                return self.describe_by_id(zone_id(zone["Id"]))
        return None

    def describe_by_id(self, resource_id: str) -> Observed | None:
        try:
            response = self._route53.call("GetHostedZone", Id=resource_id)
        except NotFound:
            return None
        return _observed(response["HostedZone"], response.get("VPCs", []), self._tags_of(resource_id))

    def _tags_of(self, resource_id: str) -> dict[str, str]:
        try:
            response = self._route53.call(
                "ListTagsForResource", ResourceType="hostedzone", ResourceId=resource_id
            )
        except NotFound:
            return {}
        return tag_dict(response.get("ResourceTagSet", {}).get("Tags"))

    def _tags_of_many(self, ids: list[str]) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for start in range(0, len(ids), TAGS_PER_CALL):
            batch = ids[start : start + TAGS_PER_CALL]
            response = self._route53.call(
                "ListTagsForResources", ResourceType="hostedzone", ResourceIds=batch
            )
            for tag_set in response.get("ResourceTagSets", []):
                found[zone_id(tag_set["ResourceId"])] = tag_dict(tag_set.get("Tags"))
        return found

    def _private_zones(self, name: str | None = None) -> list[Mapping[str, Any]]:
        zones = self._route53.pages("ListHostedZones", "HostedZones")
        return [
            z
            for z in zones
            if z.get("Config", {}).get("PrivateZone") and (name is None or z.get("Name") == fqdn(name))
        ]

    def describe_by_tags(self, tags: Mapping[str, str], desired: HostedZoneDesired | None) -> list[Observed]:
        zones = {zone_id(z["Id"]): z for z in self._private_zones()}
        tag_sets = self._tags_of_many(sorted(zones))
        return [
            _observed(zones[i], None, tag_sets.get(i, {}))
            for i in sorted(zones)
            if carries(tag_sets.get(i, {}), tags)
        ]

    def describe_candidates(self, desired: HostedZoneDesired) -> list[Observed]:
        """Private zones of the desired name that no cluster owns."""
        zones = {zone_id(z["Id"]): z for z in self._private_zones(desired.name)}
        tag_sets = self._tags_of_many(sorted(zones))
        return [
            _observed(zones[i], None, tag_sets.get(i, {}))
            for i in sorted(zones)
            if owning_cluster(tag_sets.get(i, {})) is None
        ]

    def mismatches(self, observed: Observed, desired: HostedZoneDesired) -> list[Mismatch]:
        vpc_ids = observed.attributes.get("vpc_ids")
        return compare(
            {
                "Name": (fqdn(desired.name), observed.attributes.get("name")),
                "VPCs": (desired.vpc_id, ",".join(vpc_ids) if vpc_ids is not None else None),
            }
        )

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        pairs = tag_list(tags)
        for start in range(0, len(pairs), TAGS_PER_CALL):
            self._route53.call(
                "ChangeTagsForResource",
                after_create=True,
                ResourceType="hostedzone",
                ResourceId=resource_id,
                AddTags=pairs[start : start + TAGS_PER_CALL],
            )

    def delete(self, resource_id: str) -> None:
        self._route53.call("DeleteHostedZone", Id=resource_id)

    def key_of(self, desired: HostedZoneDesired) -> str:
        return f"private hosted zone {fqdn(desired.name)} in {desired.vpc_id}"

    def fingerprint(self, desired: HostedZoneDesired) -> dict[str, str]:
        return {"name": fqdn(desired.name), "vpc_id": desired.vpc_id}
