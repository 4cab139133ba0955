"""The API server's listener (ELBv2 ``CreateListener``): TCP 6443 on the load balancer, forwarding to the
target group. A listener is unique per (load balancer, port), its natural key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_list
from capa_py.engine.traits import Traits
from resources._elbv2 import API_SERVER_PORT, add_tags, many, tagged, with_tags

IAM_ACTIONS: tuple[str, ...] = (
    "elasticloadbalancing:CreateListener",
    "elasticloadbalancing:DeleteListener",
    "elasticloadbalancing:DescribeListeners",
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:ModifyListener",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""


@dataclass(frozen=True)
class ListenerDesired:
    load_balancer_arn: str
    target_group_arn: str
    port: int = API_SERVER_PORT
    protocol: str = "TCP"


def _forward_target(listener: Mapping[str, Any]) -> str | None:
    for action in listener.get("DefaultActions", []):
        if action.get("Type") == "forward":
            if action.get("TargetGroupArn"):
                return str(action["TargetGroupArn"])
            groups = action.get("ForwardConfig", {}).get("TargetGroups", [])
            if len(groups) == 1:
                return str(groups[0]["TargetGroupArn"])
    return None


def _observed_listener(listener: Mapping[str, Any]) -> Observed:
    return Observed(
        id=listener["ListenerArn"],
        state="active",
        attributes={
            "load_balancer_arn": listener.get("LoadBalancerArn"),
            "port": listener.get("Port"),
            "protocol": listener.get("Protocol"),
            "target_group_arn": _forward_target(listener),
        },
    )


def _forward(target_group_arn: str) -> list[dict[str, Any]]:
    return [{"Type": "forward", "TargetGroupArn": target_group_arn}]


class Listener(ResourceClass[ListenerDesired]):
    """A listener forwarding a port to the target group, by ARN. ``delete`` of an ARN that does not exist
    raises :class:`~capa_py.aws.errors.NotFound` (``ListenerNotFound``); deleting the load balancer deletes
    its listeners."""

    kind = "listener"
    service = "elbv2"
    create_operation = "CreateListener"
    traits = Traits(tag_on_create=True, taggable=True, natural_key=True)
    """CreateListener accepts Tags (tag_on_create); it has no ClientToken; AddTags tags it later (taggable); a
    load balancer has one listener per port, so (load balancer, port) finds it (natural_key)."""
    tracks_updates = True

    def parent_of(self, desired: ListenerDesired) -> str | None:
        return desired.load_balancer_arn

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        return many(self, "DescribeListeners", "Listeners", "ListenerArns", resource_ids, _observed_listener)

    def create(self, desired: ListenerDesired, tags: Mapping[str, str] | None, token: str | None) -> Observed:
        response = self.aws.elbv2.call(
            "CreateListener",
            after_create=True,  # the load balancer and the target group may be moments old
            LoadBalancerArn=desired.load_balancer_arn,
            Protocol=desired.protocol,
            Port=desired.port,
            DefaultActions=_forward(desired.target_group_arn),
            **({"Tags": tag_list(tags)} if tags else {}),
        )
        observed = _observed_listener(response["Listeners"][0])
        observed.tags = dict(tags or {})
        return observed

    def describe_by_id(self, resource_id: str) -> Observed | None:
        try:
            listeners = self.aws.elbv2.call("DescribeListeners", ListenerArns=[resource_id])["Listeners"]
        except NotFound:
            return None
        return with_tags(self, _observed_listener(listeners[0])) if listeners else None

    def describe_by_key(self, desired: ListenerDesired) -> Observed | None:
        for listener in self._listeners_of(desired.load_balancer_arn):
            if listener.attributes["port"] == desired.port:
                return with_tags(self, listener)
        return None

    def describe_by_tags(self, tags: Mapping[str, str], desired: ListenerDesired | None) -> list[Observed]:
        """Listeners carrying the tags. A listener never moves between load balancers, so with ``desired``
        only its load balancer is searched; without, every load balancer's listeners are."""
        if desired is not None:
            lb_arns = [desired.load_balancer_arn]
        else:
            lb_arns = [
                lb["LoadBalancerArn"] for lb in self.aws.elbv2.pages("DescribeLoadBalancers", "LoadBalancers")
            ]
        listeners = [listener for arn in lb_arns for listener in self._listeners_of(arn)]
        return tagged(self, listeners, tags)

    def mismatches(self, observed: Observed, desired: ListenerDesired) -> list[Mismatch]:
        found = observed.attributes
        return compare(
            {
                "loadBalancerArn": (desired.load_balancer_arn, found.get("load_balancer_arn")),
                "port": (desired.port, found.get("port")),
                "protocol": (desired.protocol, found.get("protocol")),
            }
        )

    def update(self, observed: Observed, desired: ListenerDesired) -> bool:
        if observed.attributes.get("target_group_arn") == desired.target_group_arn:
            return False
        self.aws.elbv2.call(
            "ModifyListener",
            after_create=True,
            ListenerArn=observed.id,
            DefaultActions=_forward(desired.target_group_arn),
        )
        observed.attributes = {**observed.attributes, "target_group_arn": desired.target_group_arn}
        return True

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        add_tags(self, resource_id, tags)

    def delete(self, resource_id: str) -> None:
        self.aws.elbv2.call("DeleteListener", ListenerArn=resource_id)

    def key_of(self, desired: ListenerDesired) -> str:
        return f"{desired.load_balancer_arn}:{desired.port}"

    def fingerprint(self, desired: ListenerDesired) -> dict[str, str]:
        return {
            "load_balancer_arn": desired.load_balancer_arn,
            "port": str(desired.port),
            "protocol": desired.protocol,
            "target_group_arn": desired.target_group_arn,
        }

    def _listeners_of(self, load_balancer_arn: str) -> list[Observed]:
        try:
            return [
                _observed_listener(listener)
                for listener in self.aws.elbv2.pages(
                    "DescribeListeners", "Listeners", LoadBalancerArn=load_balancer_arn
                )
            ]
        except NotFound:
            return []
