"""Small helpers the EC2 and ELBv2 resource modules share: tag specifications, tag matching, lookups.

Kept here so each resource module reads as its calls; nothing in this module decides *when* to call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClient, AWSClients
from capa_py.engine.resource import tag_list

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:CreateTags",
    "elasticloadbalancing:DescribeTags",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

ELBV2_DESCRIBE_TAGS_BATCH = 20
"""ELBv2 ``DescribeTags`` takes at most 20 resource ARNs per call."""
ELBV2_DESCRIBE_BATCH = 20
"""ELBv2 describes take at most 20 ARNs (or names) per call."""
EC2_FILTER_VALUES = 100
"""Filter values sent in one EC2 describe (a batch of ids larger than this takes several calls)."""
ATTRIBUTE_FRESHNESS = 3600.0
"""How long an attribute read with a call of its own (a VPC's DNS settings, a load balancer's cross-zone
flag) is reused: they change only when someone changes them, and each costs a call per resource."""


def tag_specifications(resource_types: str | Iterable[str], tags: Mapping[str, str] | None) -> dict[str, Any]:
    """``{"TagSpecifications": [...]}`` for an EC2 create, or nothing when there are no tags to apply."""
    if not tags:
        return {}
    types = [resource_types] if isinstance(resource_types, str) else list(resource_types)
    return {"TagSpecifications": [{"ResourceType": t, "Tags": tag_list(tags)} for t in types]}


def client_token_param(token: str | None) -> dict[str, str]:
    return {"ClientToken": token} if token else {}


def carries(observed: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """Whether a resource carries every wanted tag with its value.

    Lookups filter by tags on the server *and* check here: an emulator that ignores a ``tag:`` filter (moto
    does for NAT gateways) must not make every resource look like ours.
    """
    return all(observed.get(k) == v for k, v in wanted.items())


def ec2_items(client: AWSClient, operation: str, result_key: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of an EC2 describe; an id that does not exist (``*.NotFound``) gives an empty list."""
    try:
        return list(client.pages(operation, result_key, **params))
    except NotFound:
        return []


def ec2_by_filter(
    client: AWSClient, operation: str, result_key: str, filter_name: str, ids: Iterable[str]
) -> list[dict[str, Any]]:
    """Items whose ``filter_name`` is one of ``ids``, in one call. A filter, unlike an id list, does not
    fail the whole call when one id no longer exists."""
    wanted = sorted(set(ids))
    items: list[dict[str, Any]] = []
    for start in range(0, len(wanted), EC2_FILTER_VALUES):
        batch = wanted[start : start + EC2_FILTER_VALUES]
        items += ec2_items(client, operation, result_key, Filters=[{"Name": filter_name, "Values": batch}])
    return items


def ec2_create_tags(aws: AWSClients, resource_id: str, tags: Mapping[str, str]) -> None:
    """Tag an EC2 resource; usually called right after its create, hence eventual consistency."""
    if tags:
        aws.ec2.call("CreateTags", after_create=True, Resources=[resource_id], Tags=tag_list(tags))


def elbv2_tags(aws: AWSClients, arns: Iterable[str]) -> dict[str, dict[str, str]]:
    """Tags of ELBv2 resources by ARN, in batches of :data:`ELBV2_DESCRIBE_TAGS_BATCH`."""
    arns = list(arns)
    found: dict[str, dict[str, str]] = {}
    for start in range(0, len(arns), ELBV2_DESCRIBE_TAGS_BATCH):
        batch = arns[start : start + ELBV2_DESCRIBE_TAGS_BATCH]
        response = aws.elbv2.call("DescribeTags", ResourceArns=batch)
        for description in response.get("TagDescriptions", []):
            found[description["ResourceArn"]] = {
                t["Key"]: t.get("Value", "") for t in description.get("Tags", [])
            }
    return found


def split_id(resource_id: str, separator: str, kind: str, parts: int = 2) -> list[str]:
    """Split a composite id (``igw-…:vpc-…``); a malformed one is a caller bug, not drift."""
    pieces = resource_id.split(separator, parts - 1)
    if len(pieces) != parts or not all(pieces):
        raise ValueError(
            f"malformed {kind} id {resource_id!r}: expected {parts} parts joined by {separator!r}"
        )
    return pieces
