"""Route 53 private hosted zones and their record sets, and S3 buckets, for the audit.

All three are listed account-wide (Route 53 is global; ``ListBuckets`` returns every region's buckets), so
both discovery modes list them once per audit, like IAM, rather than once per region: ``ListHostedZones``
and ``ListTagsForResources`` (10 zones a call), ``GetHostedZone`` for the VPC of each private zone, and
``ListResourceRecordSets`` for the record sets of the zones that are a cluster's (every record set but the
zone's own SOA and NS, which go with it); ``ListBuckets`` and ``GetBucketTagging`` per bucket (S3 has no
batch tag read). A record set cannot carry tags: it is a part of its zone and is deleted before it (a zone
refuses its delete while it holds one). A bucket is deleted emptied (:meth:`resources.bucket.Bucket.delete`
removes every object version and delete marker first): what a cluster's bucket holds is capa-py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capa_app.audit.model import GLOBAL_REGION, Found
from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClients
from capa_py.engine.tags import owning_cluster
from resources.bucket import Bucket
from resources.hosted_zone import TAGS_PER_CALL, fqdn, zone_id
from resources.record_set import record_set_id

IAM_ACTIONS: tuple[str, ...] = (
    "route53:GetHostedZone",
    "route53:ListHostedZones",
    "route53:ListResourceRecordSets",
    "route53:ListTagsForResources",
    "s3:ListAllMyBuckets",
)

GLOBAL_KINDS = frozenset({"hosted-zone", "record-set", "bucket"})
"""Kinds listed once per audit, whatever the regions."""

_ZONE_OWN_RECORDS = ("SOA", "NS")


def describe_hosted_zones(aws: AWSClients, wanted: Callable[[str | None], bool]) -> list[Found]:
    """Private hosted zones and, for those a wanted cluster owns, their record sets."""
    route53 = aws.client("route53")
    zones = [
        z for z in route53.pages("ListHostedZones", "HostedZones") if z.get("Config", {}).get("PrivateZone")
    ]
    ids = [zone_id(z["Id"]) for z in zones]
    tags: dict[str, dict[str, str]] = {}
    for start in range(0, len(ids), TAGS_PER_CALL):
        batch = ids[start : start + TAGS_PER_CALL]
        response = route53.call("ListTagsForResources", ResourceType="hostedzone", ResourceIds=batch)
        for tag_set in response.get("ResourceTagSets", []):
            tags[zone_id(tag_set["ResourceId"])] = {
                t["Key"]: t.get("Value", "") for t in tag_set.get("Tags", [])
            }
    found: list[Found] = []
    for zone in zones:
        zid = zone_id(zone["Id"])
        zone_tags = tags.get(zid, {})
        try:
            vpcs = route53.call("GetHostedZone", Id=zid).get("VPCs", [])
        except NotFound:
            continue
        vpc_ids = sorted(v.get("VPCId", "") for v in vpcs)
        found.append(
            Found(
                GLOBAL_REGION,
                "hosted-zone",
                zid,
                zone_tags,
                state="available",
                vpc_id=vpc_ids[0] if vpc_ids else None,
                name=zone.get("Name"),
                attributes={"name": fqdn(zone.get("Name", "")), "vpc_id": ",".join(vpc_ids)},
            )
        )
        if wanted(owning_cluster(zone_tags)):
            found.extend(record_sets_of(aws, zid, zone.get("Name", "")))
    return found


def record_sets_of(aws: AWSClients, zid: str, zone_name: str) -> list[Found]:
    """A zone's record sets, but the SOA and NS of its apex (which go with the zone)."""
    params: dict[str, Any] = {"HostedZoneId": zid}
    found: list[Found] = []
    while True:
        try:
            page = aws.client("route53").call("ListResourceRecordSets", **params)
        except NotFound:
            return found
        for record in page.get("ResourceRecordSets", []):
            if record["Type"] in _ZONE_OWN_RECORDS and fqdn(record["Name"]) == fqdn(zone_name):
                continue
            found.append(
                Found(
                    GLOBAL_REGION,
                    "record-set",
                    record_set_id(zid, record["Name"], record["Type"]),
                    state="available",
                    parent=zid,
                    name=fqdn(record["Name"]),
                    attributes={"type": record["Type"]},
                )
            )
        if not page.get("IsTruncated"):
            return found
        params = {
            "HostedZoneId": zid,
            "StartRecordName": page["NextRecordName"],
            "StartRecordType": page["NextRecordType"],
        }


def describe_buckets(aws: AWSClients, wanted: Callable[[str | None], bool]) -> list[Found]:
    """The buckets a wanted cluster owns, each under its own region."""
    buckets = Bucket(aws)
    found: list[Found] = []
    for listed in aws.client("s3").call("ListBuckets").get("Buckets", []):
        observed = buckets.describe_by_id(listed["Name"])
        if observed is None or not wanted(owning_cluster(observed.tags)):
            continue
        found.append(
            Found(
                listed.get("BucketRegion") or observed.attributes.get("region") or aws.region,
                "bucket",
                observed.id,
                observed.tags,
                state="available",
                created_at=listed.get("CreationDate"),
                name=observed.id,
            )
        )
    return found
