"""Small helpers the EC2 and ELBv2 resource modules share: tag specifications, tag matching, lookups.

Kept here so each resource module reads as its calls; nothing in this module decides *when* to call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClient, AWSClients
from capa_py.engine.resource import tag_list
from capa_py.engine.tags import STORE_TAG

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:CreateTags",
    "elasticloadbalancing:DescribeTags",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

ELBV2_DESCRIBE_TAGS_BATCH = 20
"""ELBv2 ``DescribeTags`` takes at most 20 resource ARNs per call."""
ELBV2_DESCRIBE_BATCH = 20
"""ELBv2 describes take at most 20 ARNs (or names) per call."""
EC2_FILTER_VALUES = 200
"""The most values AWS takes in one filter of an EC2 describe: a batch of ids larger than this is not sent
as one filter (:func:`ec2_by_filter`)."""
EC2_ID_FIELDS: dict[str, str] = {
    "allocation-id": "AllocationId",
    "group-id": "GroupId",
    "internet-gateway-id": "InternetGatewayId",
    "nat-gateway-id": "NatGatewayId",
    "route-table-id": "RouteTableId",
    "subnet-id": "SubnetId",
    "vpc-id": "VpcId",
}
"""The member of a described item holding the id an id filter matches (``instance-id`` and
``association.route-table-association-id`` match ids nested in the item: :func:`_ids_in`)."""
_NESTED_IDS = frozenset({"instance-id", "association.route-table-association-id"})
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
    client: AWSClient,
    operation: str,
    result_key: str,
    filter_name: str,
    ids: Iterable[str],
    page_size: int | None = None,
) -> list[dict[str, Any]]:
    """Items whose ``filter_name`` is one of ``ids``. A filter, unlike an id list, does not fail the whole
    call when one id no longer exists. Every listing follows ``NextToken`` through its pages; ``page_size``
    is sent as ``MaxResults`` (None: the service's own page size).

    Up to :data:`EC2_FILTER_VALUES` ids are one filter, so one listing. More than that (a region holding
    200 clusters: 1,200 subnets) would take a listing per 200 ids, so the cost of one refresh would grow
    with the number of clusters; instead every resource capa-py created (they all carry
    :data:`~capa_py.engine.tags.STORE_TAG`) is listed at once, and only the ids that listing did not return
    (resources capa-py did not create, such as a cluster's own VPC) are asked for, 200 to a filter. The
    caller keeps the items it asked for: the wider listing returns others too."""
    wanted = sorted(set(ids))
    if not wanted:
        return []
    if len(wanted) <= EC2_FILTER_VALUES or filter_name not in _NESTED_IDS | EC2_ID_FIELDS.keys():
        return _by_id_filter(client, operation, result_key, filter_name, wanted, page_size)
    tag_key = [{"Name": "tag-key", "Values": [STORE_TAG]}]
    items = _listed(client, operation, result_key, tag_key, page_size)
    seen = {i for item in items for i in _ids_in(filter_name, item)}
    missing = [i for i in wanted if i not in seen]
    return items + _by_id_filter(client, operation, result_key, filter_name, missing, page_size)


def _by_id_filter(
    client: AWSClient,
    operation: str,
    result_key: str,
    filter_name: str,
    ids: list[str],
    page_size: int | None,
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for start in range(0, len(ids), EC2_FILTER_VALUES):
        batch = ids[start : start + EC2_FILTER_VALUES]
        items += _listed(client, operation, result_key, [{"Name": filter_name, "Values": batch}], page_size)
    return items


def _listed(
    client: AWSClient, operation: str, result_key: str, filters: list[dict[str, Any]], page_size: int | None
) -> list[dict[str, Any]]:
    return ec2_items(
        client,
        operation,
        result_key,
        Filters=filters,
        **({"MaxResults": page_size} if page_size is not None else {}),
    )


def _ids_in(filter_name: str, item: Mapping[str, Any]) -> list[str]:
    """The ids in a described item that ``filter_name`` matches."""
    if filter_name == "instance-id":  # a reservation
        return [i["InstanceId"] for i in item.get("Instances", [])]
    if filter_name == "association.route-table-association-id":  # a route table
        return [a["RouteTableAssociationId"] for a in item.get("Associations", [])]
    value = item.get(EC2_ID_FIELDS[filter_name])
    return [value] if value else []


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
