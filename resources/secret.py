"""Secrets Manager secrets (``CreateSecret``): a machine's bootstrap data, kept out of its user data.

An instance's user data is readable by anyone allowed ``ec2:DescribeInstanceAttribute``, and the bootstrap
data carries join tokens and certificates. So, as Cluster API Provider AWS does by default, the data is
stored (gzipped, in chunks) as secrets named ``aws.cluster.x-k8s.io/<id>-<n>``, and the instance gets a small
script that fetches them with its role's permission (:mod:`controllers.services.bootstrap`).

``CreateSecret`` takes ``Tags`` and a ``ClientRequestToken`` (the version id of the first version: a repeated
request with the same token and the same value is answered with the first), and a secret's name is unique in
its account and region, so a secret can be found by tags and by name: strategy class 1 with a token and a
natural key. The secret's id here is its name (``DescribeSecret`` and ``DeleteSecret`` take a name or an
ARN). ``delete`` deletes without a recovery window (``ForceDeleteWithoutRecovery``): the name is free again at
once, and nothing of the data is kept. The contents (``SecretBinary``) are never logged, fingerprinted or put
in an observation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.engine.resource import Observed, ResourceClass, tag_dict, tag_list
from capa_py.engine.traits import Traits
from resources._common import carries

IAM_ACTIONS: tuple[str, ...] = (
    "secretsmanager:CreateSecret",
    "secretsmanager:DeleteSecret",
    "secretsmanager:DescribeSecret",
    "secretsmanager:ListSecrets",
    "secretsmanager:TagResource",
)

NAME_PREFIX = "aws.cluster.x-k8s.io/"
"""Where Cluster API Provider AWS's bootstrap secrets live; the nodes' role may read and delete under it."""


@dataclass(frozen=True)
class SecretDesired:
    name: str
    data: bytes = field(default=b"", repr=False)
    """The secret's value (``SecretBinary``). Secret: never logged, never fingerprinted, not in repr."""
    description: str = ""


def _observed(secret: Mapping[str, Any]) -> Observed:
    return Observed(
        id=str(secret["Name"]),
        tags=tag_dict(secret.get("Tags")),
        state="available",
        created_at=secret.get("CreatedDate"),
        attributes={"arn": secret.get("ARN"), "name": secret.get("Name")},
    )


def _deleted(secret: Mapping[str, Any]) -> bool:
    """A secret scheduled for deletion (made by someone else with a recovery window) is not a live one."""
    return secret.get("DeletedDate") is not None


class Secret(ResourceClass[SecretDesired]):
    """A Secrets Manager secret. ``delete`` of a name that does not exist succeeds (a delete without
    recovery of a missing secret is answered as done); ``describe_by_id`` of one is None."""

    kind = "secret"
    service = "secretsmanager"
    create_operation = "CreateSecret"
    traits = Traits(tag_on_create=True, client_token=True, natural_key=True, taggable=True)
    """CreateSecret accepts Tags (tag_on_create) and ClientRequestToken (client_token); the name is unique in
    the account and region (natural_key); TagResource tags it later (taggable)."""
    create_refuses_taken_key = True
    """``CreateSecret`` of a name already taken is ``ResourceExistsException`` and makes nothing (on AWS,
    moto and LocalStack), and a role's secret has one name (``<prefix>-<index>``): the engine creates first
    and describes the name only when the create is refused."""
    id_is_key = True
    """The id is the name: a recorded name is deleted without a describe first (a forced delete of a name
    that is gone is answered as done)."""

    def create(self, desired: SecretDesired, tags: Mapping[str, str] | None, token: str | None) -> Observed:
        params: dict[str, Any] = {"Name": desired.name, "SecretBinary": desired.data}
        if desired.description:
            params["Description"] = desired.description
        if tags:
            params["Tags"] = tag_list(tags)
        if token:
            params["ClientRequestToken"] = token
        response = self.aws.client("secretsmanager").call("CreateSecret", **params)
        return Observed(
            id=desired.name,
            tags=dict(tags or {}),
            state="available",
            attributes={"arn": response.get("ARN"), "name": desired.name},
        )

    def describe_by_id(self, resource_id: str) -> Observed | None:
        try:
            secret = self.aws.client("secretsmanager").call("DescribeSecret", SecretId=resource_id)
        except NotFound:
            return None
        return None if _deleted(secret) else _observed(secret)

    def describe_by_key(self, desired: SecretDesired) -> Observed | None:
        return self.describe_by_id(desired.name)

    def describe_by_tags(self, tags: Mapping[str, str], desired: SecretDesired | None) -> list[Observed]:
        filters: list[dict[str, Any]] = []
        for key, value in sorted(tags.items()):
            filters += [{"Key": "tag-key", "Values": [key]}, {"Key": "tag-value", "Values": [value]}]
        return [o for o in self.listed(Filters=filters) if carries(o.tags, tags)]

    def listed(self, **params: Any) -> list[Observed]:
        """Every live secret ``ListSecrets`` returns (with its tags), paginated."""
        client = self.aws.client("secretsmanager")
        secrets = client.pages("ListSecrets", "SecretList", **params)
        return [_observed(s) for s in secrets if not _deleted(s)]

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        if tags:
            self.aws.client("secretsmanager").call("TagResource", SecretId=resource_id, Tags=tag_list(tags))

    def delete(self, resource_id: str) -> None:
        self.aws.client("secretsmanager").call(
            "DeleteSecret", SecretId=resource_id, ForceDeleteWithoutRecovery=True
        )

    def key_of(self, desired: SecretDesired) -> str:
        return f"secret {desired.name}"

    def fingerprint(self, desired: SecretDesired) -> dict[str, str]:
        """The name only: never the contents, nor a digest of them."""
        return {"name": desired.name}
