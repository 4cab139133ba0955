"""Systems Manager Parameter Store parameters (``PutParameter``): a machine's bootstrap data, kept out of
its user data, when ``spec.cloudInit.secureSecretsBackend`` is ``ssm-parameter-store``.

As Cluster API Provider AWS does with that backend, the data (gzipped, in chunks) is stored as
``SecureString`` parameters named ``/cluster.x-k8s.io/<id>/<n>`` (SSM refuses names that begin with ``aws``
or ``ssm``, so CAPA's ``aws.`` prefix is dropped), and the instance fetches them with its role's permission
(:mod:`controllers.services.bootstrap`). A parameter's value is text: the gzipped chunk is stored
base64-encoded, at most :data:`MAX_VALUE` characters, which keeps it in the standard tier (4 KB, no charge;
the advanced tier's 8 KB is paid per parameter and month).

``PutParameter`` takes ``Tags`` (but not together with ``Overwrite``, which capa-py never sends) and no
client token, and a parameter's name is unique in its account and region: strategy class 2, tags at create
and a natural key. A repeated ``PutParameter`` of a name that exists is refused (``ParameterAlreadyExists``)
rather than duplicated. The parameter's id is its name. ``AddTagsToResource`` tags it later; ``delete`` is
``DeleteParameter``. The value is never logged, fingerprinted or put in an observation.
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
    "ssm:AddTagsToResource",
    "ssm:DeleteParameter",
    "ssm:DescribeParameters",
    "ssm:ListTagsForResource",
    "ssm:PutParameter",
)

NAME_PREFIX = "/cluster.x-k8s.io/"
"""Where Cluster API Provider AWS's bootstrap parameters live; the nodes' role may read and delete there."""

MAX_VALUE = 4096
"""The standard tier's limit on a value, in characters."""


@dataclass(frozen=True)
class ParameterDesired:
    name: str
    value: str = field(default="", repr=False)
    """The parameter's value (stored as ``SecureString``). Secret: never logged, fingerprinted, in repr."""
    description: str = ""


def _observed(parameter: Mapping[str, Any], tags: Mapping[str, str]) -> Observed:
    return Observed(
        id=str(parameter["Name"]),
        tags=dict(tags),
        state="available",
        created_at=parameter.get("LastModifiedDate"),
        attributes={
            "arn": parameter.get("ARN"),
            "name": parameter.get("Name"),
            "type": parameter.get("Type"),
        },
    )


class Parameter(ResourceClass[ParameterDesired]):
    """A Parameter Store parameter. ``delete`` of a name that does not exist raises NotFound
    (``ParameterNotFound``); ``describe_by_id`` of one is None."""

    kind = "parameter"
    service = "ssm"
    create_operation = "PutParameter"
    traits = Traits(tag_on_create=True, client_token=False, natural_key=True, taggable=True)
    """PutParameter accepts Tags (tag_on_create) and no idempotency token; the name is unique in the account
    and region (natural_key); AddTagsToResource tags it later (taggable)."""

    def create(
        self, desired: ParameterDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        if len(desired.value) > MAX_VALUE:
            raise ValueError(f"parameter {desired.name}: value longer than {MAX_VALUE} characters")
        params: dict[str, Any] = {
            "Name": desired.name,
            "Value": desired.value,
            "Type": "SecureString",
            "Tier": "Standard",
        }
        if desired.description:
            params["Description"] = desired.description
        if tags:
            params["Tags"] = tag_list(tags)
        # Not repeated after an unknown outcome (a 5xx, a lost connection): without Overwrite, a repeat of a
        # put that happened is refused (ParameterAlreadyExists); the engine's next pass finds it by tags.
        self.aws.client("ssm").call_with("PutParameter", params, repeat_safe=False)
        return Observed(
            id=desired.name,
            tags=dict(tags or {}),
            state="available",
            attributes={"name": desired.name, "type": "SecureString"},
        )

    def _tags(self, name: str) -> dict[str, str]:
        try:
            response = self.aws.client("ssm").call(
                "ListTagsForResource", ResourceType="Parameter", ResourceId=name
            )
        except NotFound:
            return {}
        return tag_dict(response.get("TagList"))

    def _described(self, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return list(
            self.aws.client("ssm").pages("DescribeParameters", "Parameters", ParameterFilters=filters)
        )

    def describe_by_id(self, resource_id: str) -> Observed | None:
        found = self._described([{"Key": "Name", "Option": "Equals", "Values": [resource_id]}])
        for parameter in found:
            if parameter.get("Name") == resource_id:
                return _observed(parameter, self._tags(resource_id))
        return None

    def describe_by_key(self, desired: ParameterDesired) -> Observed | None:
        return self.describe_by_id(desired.name)

    def describe_by_tags(self, tags: Mapping[str, str], desired: ParameterDesired | None) -> list[Observed]:
        filters = [
            {"Key": f"tag:{key}", "Option": "Equals", "Values": [value]}
            for key, value in sorted(tags.items())
        ]
        found = [_observed(p, self._tags(str(p["Name"]))) for p in self._described(filters)]
        return [o for o in found if carries(o.tags, tags)]

    def listed(self) -> list[Observed]:
        """Every ``SecureString`` parameter of the region (``DescribeParameters``, paginated), each with its
        tags (``ListTagsForResource``: one call per parameter)."""
        described = self._described([{"Key": "Type", "Option": "Equals", "Values": ["SecureString"]}])
        return [_observed(p, self._tags(str(p["Name"]))) for p in described]

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        if tags:
            self.aws.client("ssm").call(
                "AddTagsToResource", ResourceType="Parameter", ResourceId=resource_id, Tags=tag_list(tags)
            )

    def delete(self, resource_id: str) -> None:
        self.aws.client("ssm").call("DeleteParameter", Name=resource_id)

    def key_of(self, desired: ParameterDesired) -> str:
        return f"parameter {desired.name}"

    def fingerprint(self, desired: ParameterDesired) -> dict[str, str]:
        """The name only: never the value, nor a digest of it."""
        return {"name": desired.name}
