"""The control-plane load balancer: a network load balancer (ELBv2 ``CreateLoadBalancer``); its target group
(``CreateTargetGroup``, TCP 6443) and the instances registered with it (``RegisterTargets``) are in
:mod:`resources.target_group`, its listener (``CreateListener``) in :mod:`resources.listener`.

Load balancers and target groups have user-chosen names, unique per account and region, which are their
natural keys; a listener is unique per (load balancer, port). ELBv2 tags at create (``Tags``) and later with
``AddTags``, and has no ``tag:`` filter, so lookups by tags list the resources and read their tags with
``DescribeTags`` (20 ARNs a call). A registration cannot be tagged and takes no token; it is keyed by
(target group, instance) and its id is ``<target group ARN>|i-…``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.cache.known import MISS, known_of
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_list
from capa_py.engine.traits import Traits
from resources._common import (
    ATTRIBUTE_FRESHNESS,
)
from resources._elbv2 import add_tags, by_listed_name, create_named, many, tagged, with_tags

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:DescribeSubnets",
    "elasticloadbalancing:CreateLoadBalancer",
    "elasticloadbalancing:DeleteLoadBalancer",
    "elasticloadbalancing:DescribeLoadBalancerAttributes",
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:ModifyLoadBalancerAttributes",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

CROSS_ZONE = "load_balancing.cross_zone.enabled"


@dataclass(frozen=True)
class LoadBalancerDesired:
    name: str
    subnet_ids: tuple[str, ...]
    scheme: str = "internet-facing"
    cross_zone: bool = False
    """The ``load_balancing.cross_zone.enabled`` attribute (off by default on a network load balancer)."""
    security_group_ids: tuple[str, ...] = ()
    """Given at create only: AWS never adds groups to a network load balancer created without any."""


def _observed_lb(lb: Mapping[str, Any]) -> Observed:
    return Observed(
        id=lb["LoadBalancerArn"],
        state=lb.get("State", {}).get("Code"),
        created_at=lb.get("CreatedTime"),
        attributes={
            "name": lb.get("LoadBalancerName"),
            "dns_name": lb.get("DNSName"),
            "scheme": lb.get("Scheme"),
            "type": lb.get("Type"),
            "vpc_id": lb.get("VpcId"),
            "subnet_ids": sorted(z["SubnetId"] for z in lb.get("AvailabilityZones", []) if z.get("SubnetId")),
            "security_group_ids": sorted(lb.get("SecurityGroups", [])),
        },
    )


class LoadBalancer(ResourceClass[LoadBalancerDesired]):
    """A network load balancer, by ARN. ``delete`` of an ARN that does not exist is a no-op: AWS documents
    that ``DeleteLoadBalancer`` of a load balancer already deleted succeeds (and moto agrees)."""

    kind = "load-balancer"
    service = "elbv2"
    create_operation = "CreateLoadBalancer"
    traits = Traits(tag_on_create=True, taggable=True, natural_key=True)
    """CreateLoadBalancer accepts Tags (tag_on_create); it has no ClientToken; AddTags tags it later
    (taggable); its Name is unique per account and region (natural_key)."""
    tracks_updates = True  # the cross-zone attribute is kept as a fact, not in the observation

    def create(
        self, desired: LoadBalancerDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        observed = create_named(
            self,
            desired.name,
            lambda: _observed_lb(self._create_call(desired, tags)["LoadBalancers"][0]),
            tags,
        )
        # A new network load balancer does not balance across zones until told to.
        known_of(self.aws).learn(("lb-attribute", observed.id, CROSS_ZONE), "false")
        return observed

    def _create_call(self, desired: LoadBalancerDesired, tags: Mapping[str, str] | None) -> dict[str, Any]:
        return self.aws.elbv2.call(
            "CreateLoadBalancer",
            after_create=True,  # the subnets may be moments old
            Name=desired.name,
            Type="network",
            Scheme=desired.scheme,
            Subnets=list(desired.subnet_ids),
            IpAddressType="ipv4",
            **({"SecurityGroups": list(desired.security_group_ids)} if desired.security_group_ids else {}),
            **({"Tags": tag_list(tags)} if tags else {}),
        )

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        return many(
            self, "DescribeLoadBalancers", "LoadBalancers", "LoadBalancerArns", resource_ids, _observed_lb
        )

    def describe_by_id(self, resource_id: str) -> Observed | None:
        observed = self.poll(resource_id)
        return None if observed is None else with_tags(self, observed)

    def poll(self, resource_id: str) -> Observed | None:
        """The load balancer's state and DNS name, without its tags (a wait's poll)."""
        try:
            lbs = self.aws.elbv2.call("DescribeLoadBalancers", LoadBalancerArns=[resource_id])[
                "LoadBalancers"
            ]
        except NotFound:
            return None
        return _observed_lb(lbs[0]) if lbs else None

    def describe_by_key(self, desired: LoadBalancerDesired) -> Observed | None:
        listed = by_listed_name(self, desired.name)
        if listed is not MISS:
            result: Observed | None = listed
            return result
        try:
            lbs = self.aws.elbv2.call("DescribeLoadBalancers", Names=[desired.name])["LoadBalancers"]
        except NotFound:
            return None
        return with_tags(self, _observed_lb(lbs[0])) if lbs else None

    def describe_by_tags(
        self, tags: Mapping[str, str], desired: LoadBalancerDesired | None
    ) -> list[Observed]:
        lbs = [_observed_lb(lb) for lb in self.aws.elbv2.pages("DescribeLoadBalancers", "LoadBalancers")]
        return tagged(self, lbs, tags, whole_region=True)

    def mismatches(self, observed: Observed, desired: LoadBalancerDesired) -> list[Mismatch]:
        """Name, scheme and type, and the VPC: the desired subnets' VPC (asked only when adopting)."""
        found = observed.attributes
        pairs: dict[str, tuple[Any, Any]] = {
            "loadBalancerName": (desired.name, found.get("name")),
            "scheme": (desired.scheme, found.get("scheme")),
            "type": ("network", found.get("type")),
        }
        if found.get("vpc_id") and desired.subnet_ids:
            subnets = self.aws.ec2.call("DescribeSubnets", SubnetIds=[desired.subnet_ids[0]])["Subnets"]
            pairs["vpcId"] = (subnets[0].get("VpcId") if subnets else None, found.get("vpc_id"))
        return compare(pairs)

    def is_ready(self, observed: Observed) -> bool:
        return observed.state == "active"

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        add_tags(self, resource_id, tags)

    def update(self, observed: Observed, desired: LoadBalancerDesired) -> bool:
        """Cross-zone load balancing, on create and whenever the spec changes it."""

        def read() -> str:
            attributes = self.aws.elbv2.call(
                "DescribeLoadBalancerAttributes", after_create=True, LoadBalancerArn=observed.id
            ).get("Attributes", [])
            return str(next((a.get("Value") for a in attributes if a.get("Key") == CROSS_ZONE), "false"))

        key = ("lb-attribute", observed.id, CROSS_ZONE)
        known = known_of(self.aws)
        current = known.value(key, ATTRIBUTE_FRESHNESS, read)
        wanted = "true" if desired.cross_zone else "false"
        if current == wanted:
            return False
        self.aws.elbv2.call(
            "ModifyLoadBalancerAttributes",
            after_create=True,
            LoadBalancerArn=observed.id,
            Attributes=[{"Key": CROSS_ZONE, "Value": wanted}],
        )
        known.learn(key, wanted)
        return True

    def delete(self, resource_id: str) -> None:
        self.aws.elbv2.call("DeleteLoadBalancer", LoadBalancerArn=resource_id)

    def key_of(self, desired: LoadBalancerDesired) -> str:
        return desired.name

    def fingerprint(self, desired: LoadBalancerDesired) -> dict[str, str]:
        return {
            "name": desired.name,
            "scheme": desired.scheme,
            "subnet_ids": ",".join(sorted(desired.subnet_ids)),
        }
