"""An S3 general purpose bucket (``CreateBucket``), id = the bucket's name.

A bucket name is unique across AWS, so the name is a natural key; ``CreateBucket`` takes no token. botocore's
model gives ``CreateBucketConfiguration`` a ``Tags`` member: on AWS the bucket is tagged by its create
(strategy class 1). moto 5.2 and LocalStack accept that member and drop the tags, so their endpoint profiles
lower ``tag_on_create`` and the engine tags with ``PutBucketTagging`` afterwards (class 3, made idempotent by
the name). ``PutBucketTagging`` replaces the whole tag set, so :meth:`Bucket.tag` merges with what is there.
:meth:`Bucket.delete` empties the bucket first (every object version and delete marker): a bucket capa-py
made holds only what capa-py put there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClient
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_list
from capa_py.engine.traits import Traits
from resources._common import carries

IAM_ACTIONS: tuple[str, ...] = (
    "s3:CreateBucket",
    "s3:DeleteBucket",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:GetBucketTagging",
    "s3:ListAllMyBuckets",
    "s3:ListBucket",
    "s3:ListBucketVersions",
    "s3:PutBucketTagging",
    "s3:TagResource",
)
"""IAM actions, which differ from the API's operation names (HeadBucket is ``s3:ListBucket``, ListBuckets
``s3:ListAllMyBuckets``, ListObjectVersions ``s3:ListBucketVersions``; tags given to CreateBucket need
``s3:TagResource`` as well)."""

DELETE_OBJECTS_BATCH = 1000
"""``DeleteObjects`` takes at most 1000 keys per call."""


@dataclass(frozen=True)
class BucketDesired:
    name: str


class Bucket(ResourceClass[BucketDesired]):
    """A bucket in the clients' region. ``delete`` of a bucket that does not exist raises
    :class:`~capa_py.aws.errors.NotFound` (``NoSuchBucket``)."""

    kind = "bucket"
    service = "s3"
    create_operation = "CreateBucket"
    traits = Traits(tag_on_create=True, natural_key=True, taggable=True)
    """CreateBucket takes CreateBucketConfiguration.Tags (tag_on_create) and no token; PutBucketTagging tags
    it later (taggable); a bucket name is unique across AWS (natural_key)."""

    @property
    def _s3(self) -> AWSClient:
        return self.aws.client("s3")

    def create(self, desired: BucketDesired, tags: Mapping[str, str] | None, token: str | None) -> Observed:
        configuration: dict[str, Any] = {}
        if self.aws.region != "us-east-1":
            configuration["LocationConstraint"] = self.aws.region
        if tags:
            configuration["Tags"] = tag_list(tags)
        params: dict[str, Any] = {"Bucket": desired.name}
        if configuration:
            params["CreateBucketConfiguration"] = configuration
        self._s3.call("CreateBucket", **params)
        return Observed(id=desired.name, tags=dict(tags or {}), attributes={"region": self.aws.region})

    def _tags_of(self, name: str) -> dict[str, str]:
        try:
            response = self._s3.call("GetBucketTagging", Bucket=name)
        except NotFound:  # NoSuchTagSet: a bucket without tags
            return {}
        return tag_dict(response.get("TagSet"))

    def describe_by_id(self, resource_id: str) -> Observed | None:
        try:
            head = self._s3.call("HeadBucket", Bucket=resource_id)
        except NotFound:
            return None
        try:
            tags = self._tags_of(resource_id)
        except NotFound:
            return None
        return Observed(id=resource_id, tags=tags, attributes={"region": head.get("BucketRegion")})

    def describe_by_key(self, desired: BucketDesired) -> Observed | None:
        return self.describe_by_id(desired.name)

    def describe_by_tags(self, tags: Mapping[str, str], desired: BucketDesired | None) -> list[Observed]:
        # With the desired name, only that bucket can be it (its name is its key): one look, not a scan.
        names = [desired.name] if desired is not None else self.names()
        found = [self.describe_by_id(name) for name in names]
        return [o for o in found if o is not None and carries(o.tags, tags)]

    def names(self) -> list[str]:
        """Every bucket of the account (ListBuckets is account-wide, whatever the region)."""
        return [b["Name"] for b in self._s3.call("ListBuckets").get("Buckets", [])]

    def mismatches(self, observed: Observed, desired: BucketDesired) -> list[Mismatch]:
        return compare({"BucketRegion": (self.aws.region, observed.attributes.get("region"))})

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        if not tags:
            return
        merged = {**self._tags_of(resource_id), **tags}
        self._s3.call(
            "PutBucketTagging", after_create=True, Bucket=resource_id, Tagging={"TagSet": tag_list(merged)}
        )

    def empty(self, resource_id: str) -> int:
        """Delete every object version and delete marker; returns how many."""
        keys: list[dict[str, str]] = []
        params: dict[str, Any] = {"Bucket": resource_id}
        while True:
            page = self._s3.call("ListObjectVersions", **params)
            for item in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                keys.append({"Key": item["Key"], "VersionId": item["VersionId"]})
            if not page.get("IsTruncated"):
                break
            params = {
                "Bucket": resource_id,
                "KeyMarker": page.get("NextKeyMarker"),
                "VersionIdMarker": page.get("NextVersionIdMarker"),
            }
        for start in range(0, len(keys), DELETE_OBJECTS_BATCH):
            batch = keys[start : start + DELETE_OBJECTS_BATCH]
            self._s3.call("DeleteObjects", Bucket=resource_id, Delete={"Objects": batch, "Quiet": True})
        return len(keys)

    def delete(self, resource_id: str) -> None:
        self.empty(resource_id)
        self._s3.call("DeleteBucket", Bucket=resource_id)

    def key_of(self, desired: BucketDesired) -> str:
        return f"bucket {desired.name}"

    def fingerprint(self, desired: BucketDesired) -> dict[str, str]:
        return {"name": desired.name}
