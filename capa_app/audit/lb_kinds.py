"""Describe calls for load balancers: ELBv2 load balancers, target groups, listeners and registrations, and
classic load balancers — each item turned into a :class:`Found`. The ELBv2 kinds are parsed by their
resource classes (:mod:`resources.listing`); classic load balancers, which no resource class models (capa-py
makes network load balancers only; CAPA's default is classic), keep a parser here.

Neither ELB API filters by tag or by VPC, so both list and read tags in batches of 20 (``DescribeTags``'
limit); narrowing to ids or VPCs happens here. A describe by ids fails as a whole when one of them is gone,
so a failed batch is retried one id at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from capa_app.audit.ec2_kinds import found_from
from capa_app.audit.model import Found
from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClient, AWSClients
from capa_py.engine.resource import tag_dict
from resources.listing import parse_listener, parse_load_balancer, parse_registration, parse_target_group

IAM_ACTIONS: tuple[str, ...] = (
    "elasticloadbalancing:DescribeListeners",
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:DescribeTags",
    "elasticloadbalancing:DescribeTargetGroups",
    "elasticloadbalancing:DescribeTargetHealth",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

TAGS_PER_CALL = 20
"""``DescribeTags`` of both ELB APIs takes at most 20 resources."""


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
    observed = [parse_load_balancer(i, tags.get(i["LoadBalancerArn"], {})) for i in items]
    found = found_from(aws.region, "load-balancer", observed)
    return _narrow(found, vpc_ids)


def describe_target_groups(
    aws: AWSClients, *, ids: Sequence[str] | None = None, vpc_ids: Sequence[str] | None = None
) -> list[Found]:
    items = _list_or_get(aws.elbv2, "DescribeTargetGroups", "TargetGroups", "TargetGroupArns", ids)
    tags = _tags(aws.elbv2, "ResourceArns", "ResourceArn", [i["TargetGroupArn"] for i in items])
    observed = [parse_target_group(i, tags.get(i["TargetGroupArn"], {})) for i in items]
    found = found_from(aws.region, "target-group", observed)
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
        for listener in found_from(
            aws.region,
            "listener",
            [parse_listener(i, tags.get(i["ListenerArn"], {})) for i in items],
        ):
            listener.vpc_id = lb.vpc_id
            listener.parent = lb.id
            listener.name = f"{listener.attributes.get('protocol')}:{listener.attributes.get('port')}"
            found.append(listener)
    return found


def registrations_of(aws: AWSClients, target_groups: Iterable[Found]) -> list[Found]:
    """The instances registered with the given target groups, ids as the engine records them."""
    found: list[Found] = []
    for tg in target_groups:
        try:
            response = aws.elbv2.call("DescribeTargetHealth", TargetGroupArn=tg.id)
        except NotFound:
            continue
        registrations = [
            parse_registration(tg.id, description)
            for description in response.get("TargetHealthDescriptions", [])
        ]
        for registration in found_from(aws.region, "target-registration", filter(None, registrations)):
            registration.vpc_id = tg.vpc_id
            registration.parent = tg.id
            found.append(registration)
    return found


LB_KINDS: dict[str, Callable[..., list[Found]]] = {
    "load-balancer": describe_load_balancers,
    "target-group": describe_target_groups,
    "classic-load-balancer": describe_classic_load_balancers,
}
