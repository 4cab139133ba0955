"""Describe calls for load balancers: ELBv2 load balancers, target groups, listeners and registrations, and
classic load balancers — each item turned into a :class:`Found`.

Neither ELB API filters by tag or by VPC, so both list and read tags in batches of 20 (``DescribeTags``'
limit); narrowing to ids or VPCs happens here. A describe by ids fails as a whole when one of them is gone,
so a failed batch is retried one id at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from capa_py.audit.model import Found
from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClient, AWSClients
from capa_py.engine.resource import tag_dict
from resources.target_group import registration_id

TAGS_PER_CALL = 20
"""``DescribeTags`` of both ELB APIs takes at most 20 resources."""
_NOT_REGISTERED = frozenset({"Target.NotRegistered", "Target.DeregistrationInProgress"})


def _batches(values: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(values), TAGS_PER_CALL):
        yield list(values[start : start + TAGS_PER_CALL])


def _by_ids(
    client: AWSClient, operation: str, result_key: str, id_param: str, ids: Sequence[str]
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for batch in _batches(sorted(set(ids))):
        try:
            params: dict[str, Any] = {id_param: batch}
            items.extend(client.call(operation, **params).get(result_key, []))
        except NotFound:
            for one in batch:
                try:
                    single: dict[str, Any] = {id_param: [one]}
                    items.extend(client.call(operation, **single).get(result_key, []))
                except NotFound:
                    continue
    return items


def _tags(client: AWSClient, id_param: str, id_key: str, ids: Sequence[str]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for batch in _batches(list(ids)):
        params: dict[str, Any] = {id_param: batch}
        try:
            descriptions = client.call("DescribeTags", **params).get("TagDescriptions", [])
        except NotFound:  # one of them went away meanwhile: ask one by one
            descriptions = []
            for one in batch:
                try:
                    single: dict[str, Any] = {id_param: [one]}
                    descriptions += client.call("DescribeTags", **single).get("TagDescriptions", [])
                except NotFound:
                    continue
        for description in descriptions:
            found[str(description[id_key])] = tag_dict(description.get("Tags"))
    return found


def _narrow(found: list[Found], vpc_ids: Sequence[str] | None) -> list[Found]:
    if vpc_ids is None:
        return found
    wanted = set(vpc_ids)
    return [f for f in found if f.vpc_id in wanted]


def _list_or_get(
    client: AWSClient,
    operation: str,
    result_key: str,
    id_param: str,
    ids: Sequence[str] | None,
) -> list[dict[str, Any]]:
    if ids is None:
        return list(client.pages(operation, result_key))
    return _by_ids(client, operation, result_key, id_param, ids)


def describe_load_balancers(
    aws: AWSClients, *, ids: Sequence[str] | None = None, vpc_ids: Sequence[str] | None = None
) -> list[Found]:
    items = _list_or_get(aws.elbv2, "DescribeLoadBalancers", "LoadBalancers", "LoadBalancerArns", ids)
    tags = _tags(aws.elbv2, "ResourceArns", "ResourceArn", [i["LoadBalancerArn"] for i in items])
    found = [
        Found(
            aws.region,
            "load-balancer",
            item["LoadBalancerArn"],
            tags.get(item["LoadBalancerArn"], {}),
            state=item.get("State", {}).get("Code"),
            vpc_id=item.get("VpcId"),
            created_at=item.get("CreatedTime"),
            name=item.get("LoadBalancerName"),
            attributes={"type": item.get("Type"), "scheme": item.get("Scheme")},
        )
        for item in items
    ]
    return _narrow(found, vpc_ids)


def describe_target_groups(
    aws: AWSClients, *, ids: Sequence[str] | None = None, vpc_ids: Sequence[str] | None = None
) -> list[Found]:
    items = _list_or_get(aws.elbv2, "DescribeTargetGroups", "TargetGroups", "TargetGroupArns", ids)
    tags = _tags(aws.elbv2, "ResourceArns", "ResourceArn", [i["TargetGroupArn"] for i in items])
    found = [
        Found(
            aws.region,
            "target-group",
            item["TargetGroupArn"],
            tags.get(item["TargetGroupArn"], {}),
            state="active" if item.get("LoadBalancerArns") else "unused",
            vpc_id=item.get("VpcId"),
            name=item.get("TargetGroupName"),
            attributes={"load_balancer_arns": list(item.get("LoadBalancerArns", []))},
        )
        for item in items
    ]
    return _narrow(found, vpc_ids)


def describe_classic_load_balancers(
    aws: AWSClients, *, ids: Sequence[str] | None = None, vpc_ids: Sequence[str] | None = None
) -> list[Found]:
    elb = aws.client("elb")
    items = _list_or_get(elb, "DescribeLoadBalancers", "LoadBalancerDescriptions", "LoadBalancerNames", ids)
    names = [str(i["LoadBalancerName"]) for i in items]
    tags = _tags(elb, "LoadBalancerNames", "LoadBalancerName", names)
    found = [
        Found(
            aws.region,
            "classic-load-balancer",
            item["LoadBalancerName"],
            tags.get(item["LoadBalancerName"], {}),
            state="active",
            vpc_id=item.get("VPCId"),
            created_at=item.get("CreatedTime"),
            name=item.get("DNSName"),
            attributes={"instances": [i["InstanceId"] for i in item.get("Instances", [])]},
        )
        for item in items
    ]
    return _narrow(found, vpc_ids)


def listeners_of(aws: AWSClients, load_balancers: Iterable[Found]) -> list[Found]:
    """The listeners of the given load balancers, with their tags."""
    found: list[Found] = []
    for lb in load_balancers:
        try:
            items = list(aws.elbv2.pages("DescribeListeners", "Listeners", LoadBalancerArn=lb.id))
        except NotFound:
            continue
        tags = _tags(aws.elbv2, "ResourceArns", "ResourceArn", [i["ListenerArn"] for i in items])
        found.extend(
            Found(
                aws.region,
                "listener",
                item["ListenerArn"],
                tags.get(item["ListenerArn"], {}),
                state="active",
                vpc_id=lb.vpc_id,
                parent=lb.id,
                name=f"{item.get('Protocol')}:{item.get('Port')}",
            )
            for item in items
        )
    return found


def registrations_of(aws: AWSClients, target_groups: Iterable[Found]) -> list[Found]:
    """The instances registered with the given target groups, ids as the engine records them."""
    found: list[Found] = []
    for tg in target_groups:
        try:
            response = aws.elbv2.call("DescribeTargetHealth", TargetGroupArn=tg.id)
        except NotFound:
            continue
        for description in response.get("TargetHealthDescriptions", []):
            target = description.get("Target", {})
            health = description.get("TargetHealth", {})
            gone = health.get("Reason") in _NOT_REGISTERED or health.get("State") == "draining"
            if not target.get("Id") or gone:
                continue
            found.append(
                Found(
                    aws.region,
                    "target-registration",
                    registration_id(tg.id, str(target["Id"])),
                    state=health.get("State"),
                    vpc_id=tg.vpc_id,
                    parent=tg.id,
                    attributes={"instance_id": target["Id"], "port": target.get("Port")},
                )
            )
    return found


LB_KINDS: dict[str, Callable[..., list[Found]]] = {
    "load-balancer": describe_load_balancers,
    "target-group": describe_target_groups,
    "classic-load-balancer": describe_classic_load_balancers,
}
