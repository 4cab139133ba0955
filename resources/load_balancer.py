"""The control-plane load balancer: a network load balancer (ELBv2 ``CreateLoadBalancer``), its target group
(``CreateTargetGroup``, TCP 6443), its listener (``CreateListener``) and the instances registered with the
target group (``RegisterTargets``).

Load balancers and target groups have user-chosen names, unique per account and region, which are their
natural keys; a listener is unique per (load balancer, port). ELBv2 tags at create (``Tags``) and later with
``AddTags``, and has no ``tag:`` filter, so lookups by tags list the resources and read their tags with
``DescribeTags`` (20 ARNs a call). A registration cannot be tagged and takes no token; it is keyed by
(target group, instance) and its id is ``<target group ARN>|i-…``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.cache.known import MISS, known_of
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_list
from capa_py.engine.traits import Traits
from resources._common import (
    ATTRIBUTE_FRESHNESS,
    ELBV2_DESCRIBE_BATCH,
    ELBV2_DESCRIBE_TAGS_BATCH,
    carries,
    elbv2_tags,
    split_id,
)

API_SERVER_PORT = 6443


def _add_tags(resource: ResourceClass[Any], arn: str, tags: Mapping[str, str]) -> None:
    if tags:
        resource.aws.elbv2.call("AddTags", after_create=True, ResourceArns=[arn], Tags=tag_list(tags))


def _tagged(
    resource: ResourceClass[Any], observed: list[Observed], tags: Mapping[str, str]
) -> list[Observed]:
    """Fill in each resource's tags and keep those carrying every one of ``tags``."""
    found = elbv2_tags(resource.aws, [o.id for o in observed])
    for o in observed:
        o.tags = found.get(o.id, {})
    return [o for o in observed if carries(o.tags, tags)]


def _many(
    resource: ResourceClass[Any],
    operation: str,
    result_key: str,
    parameter: str,
    arns: list[str],
    parse: Callable[[Mapping[str, Any]], Observed],
) -> dict[str, Observed]:
    """Several ELBv2 resources by ARN with their tags: a describe per 20 ARNs, then a ``DescribeTags`` per
    20 of those found. An ARN that no longer exists fails the whole describe, so that batch is asked again
    one ARN at a time."""
    found: dict[str, Observed] = {}
    for start in range(0, len(arns), ELBV2_DESCRIBE_BATCH):
        batch = arns[start : start + ELBV2_DESCRIBE_BATCH]
        try:
            params: dict[str, Any] = {parameter: batch}
            items = resource.aws.elbv2.call(operation, **params)[result_key]
        except NotFound:
            items = []
            for arn in batch if len(batch) > 1 else []:
                with suppress(NotFound):
                    one: dict[str, Any] = {parameter: [arn]}
                    items += resource.aws.elbv2.call(operation, **one)[result_key]
        for item in items:
            observed = parse(item)
            if observed.id in arns:
                found[observed.id] = observed
    tags = _tags_with_siblings(resource, list(found))
    for observed in found.values():
        observed.tags = tags.get(observed.id, {})
    return found


_ELBV2_KINDS = ("load-balancer", "target-group", "listener")
_SIBLING_TAGS_FRESHNESS = 5.0
"""How long tags read with another ELBv2 kind's refresh serve this kind's own refresh (in the same pass)."""


def _tags_with_siblings(resource: ResourceClass[Any], arns: list[str]) -> dict[str, dict[str, str]]:
    """Tags of ``arns``; one ``DescribeTags`` (per 20 ARNs) also reads the tags of the load balancers,
    target groups and listeners due for a refresh (when the process keeps what it knows), so that the
    pass's refresh of those kinds asks for no tags of its own."""
    known = known_of(resource.aws)
    tags: dict[str, dict[str, str]] = {}
    unknown: list[str] = []
    for arn in arns:
        recalled = known.recalled(("elbv2-tags", arn), _SIBLING_TAGS_FRESHNESS)
        if recalled is MISS:
            unknown.append(arn)
        else:
            tags[arn] = recalled
    if not unknown:
        return tags
    siblings = [
        arn for kind in _ELBV2_KINDS if kind != resource.kind for arn in known.due(kind) if arn not in unknown
    ]
    room = -len(unknown) % ELBV2_DESCRIBE_TAGS_BATCH  # what the last DescribeTags has left: no extra call
    wanted = unknown + siblings[:room]
    read = elbv2_tags(resource.aws, wanted)
    for arn in wanted:
        if arn in read and arn not in unknown:
            known.learn(("elbv2-tags", arn), read[arn])
    tags.update({arn: read[arn] for arn in unknown if arn in read})
    return tags


def _with_tags(resource: ResourceClass[Any], observed: Observed) -> Observed:
    with suppress(NotFound):  # deleted between the two calls: the caller's next describe says so
        observed.tags = elbv2_tags(resource.aws, [observed.id]).get(observed.id, {})
    return observed


# -- load balancer -------------------------------------------------------------------------------------


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
        response = self.aws.elbv2.call(
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
        observed = _observed_lb(response["LoadBalancers"][0])
        observed.tags = dict(tags or {})
        # A new network load balancer does not balance across zones until told to.
        known_of(self.aws).learn(("lb-attribute", observed.id, CROSS_ZONE), "false")
        return observed

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        return _many(
            self, "DescribeLoadBalancers", "LoadBalancers", "LoadBalancerArns", resource_ids, _observed_lb
        )

    def describe_by_id(self, resource_id: str) -> Observed | None:
        try:
            lbs = self.aws.elbv2.call("DescribeLoadBalancers", LoadBalancerArns=[resource_id])[
                "LoadBalancers"
            ]
        except NotFound:
            return None
        return _with_tags(self, _observed_lb(lbs[0])) if lbs else None

    def describe_by_key(self, desired: LoadBalancerDesired) -> Observed | None:
        try:
            lbs = self.aws.elbv2.call("DescribeLoadBalancers", Names=[desired.name])["LoadBalancers"]
        except NotFound:
            return None
        return _with_tags(self, _observed_lb(lbs[0])) if lbs else None

    def describe_by_tags(
        self, tags: Mapping[str, str], desired: LoadBalancerDesired | None
    ) -> list[Observed]:
        lbs = [_observed_lb(lb) for lb in self.aws.elbv2.pages("DescribeLoadBalancers", "LoadBalancers")]
        return _tagged(self, lbs, tags)

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
        _add_tags(self, resource_id, tags)

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


# -- target group --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetGroupDesired:
    name: str
    vpc_id: str
    port: int = API_SERVER_PORT
    protocol: str = "TCP"


def _observed_tg(tg: Mapping[str, Any]) -> Observed:
    return Observed(
        id=tg["TargetGroupArn"],
        state="active" if tg.get("LoadBalancerArns") else "unused",
        attributes={
            "name": tg.get("TargetGroupName"),
            "vpc_id": tg.get("VpcId"),
            "port": tg.get("Port"),
            "protocol": tg.get("Protocol"),
            "health_check_protocol": tg.get("HealthCheckProtocol"),
            "load_balancer_arns": list(tg.get("LoadBalancerArns", [])),
        },
    )


class TargetGroup(ResourceClass[TargetGroupDesired]):
    """The API server target group (TCP, instance targets, TCP health check), by ARN. ``delete`` of an ARN
    that does not exist raises :class:`~capa_py.aws.errors.NotFound` (``TargetGroupNotFound``); of a group a
    listener still forwards to, :class:`~capa_py.aws.errors.DependencyViolation` (``ResourceInUse``)."""

    kind = "target-group"
    service = "elbv2"
    create_operation = "CreateTargetGroup"
    traits = Traits(tag_on_create=True, taggable=True, natural_key=True)
    """CreateTargetGroup accepts Tags (tag_on_create); it has no ClientToken; AddTags tags it later
    (taggable); its Name is unique per account and region (natural_key)."""

    def create(
        self, desired: TargetGroupDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.elbv2.call(
            "CreateTargetGroup",
            after_create=True,  # the VPC may be moments old
            Name=desired.name,
            Protocol=desired.protocol,
            Port=desired.port,
            VpcId=desired.vpc_id,
            TargetType="instance",
            HealthCheckEnabled=True,
            HealthCheckProtocol="TCP",
            HealthCheckPort="traffic-port",
            **({"Tags": tag_list(tags)} if tags else {}),
        )
        observed = _observed_tg(response["TargetGroups"][0])
        observed.tags = dict(tags or {})
        return observed

    def describe_by_id(self, resource_id: str) -> Observed | None:
        return self._describe(TargetGroupArns=[resource_id])

    def describe_by_key(self, desired: TargetGroupDesired) -> Observed | None:
        return self._describe(Names=[desired.name])

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        return _many(
            self, "DescribeTargetGroups", "TargetGroups", "TargetGroupArns", resource_ids, _observed_tg
        )

    def describe_by_tags(self, tags: Mapping[str, str], desired: TargetGroupDesired | None) -> list[Observed]:
        tgs = [_observed_tg(tg) for tg in self.aws.elbv2.pages("DescribeTargetGroups", "TargetGroups")]
        return _tagged(self, tgs, tags)

    def mismatches(self, observed: Observed, desired: TargetGroupDesired) -> list[Mismatch]:
        found = observed.attributes
        return compare(
            {
                "targetGroupName": (desired.name, found.get("name")),
                "protocol": (desired.protocol, found.get("protocol")),
                "port": (desired.port, found.get("port")),
                "vpcId": (desired.vpc_id, found.get("vpc_id")),
            }
        )

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        _add_tags(self, resource_id, tags)

    def delete(self, resource_id: str) -> None:
        self.aws.elbv2.call("DeleteTargetGroup", TargetGroupArn=resource_id)

    def key_of(self, desired: TargetGroupDesired) -> str:
        return desired.name

    def fingerprint(self, desired: TargetGroupDesired) -> dict[str, str]:
        return {
            "name": desired.name,
            "vpc_id": desired.vpc_id,
            "port": str(desired.port),
            "protocol": desired.protocol,
        }

    def _describe(self, **params: Any) -> Observed | None:
        try:
            tgs = self.aws.elbv2.call("DescribeTargetGroups", **params)["TargetGroups"]
        except NotFound:
            return None
        return _with_tags(self, _observed_tg(tgs[0])) if tgs else None


# -- listener ------------------------------------------------------------------------------------------


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
        return _many(self, "DescribeListeners", "Listeners", "ListenerArns", resource_ids, _observed_listener)

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
        return _with_tags(self, _observed_listener(listeners[0])) if listeners else None

    def describe_by_key(self, desired: ListenerDesired) -> Observed | None:
        for listener in self._listeners_of(desired.load_balancer_arn):
            if listener.attributes["port"] == desired.port:
                return _with_tags(self, listener)
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
        return _tagged(self, listeners, tags)

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
        _add_tags(self, resource_id, tags)

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


# -- target registration -------------------------------------------------------------------------------

# A registration is gone when AWS says the target is not registered, or is being deregistered.
_NOT_REGISTERED_REASONS = frozenset({"Target.NotRegistered", "Target.DeregistrationInProgress"})


@dataclass(frozen=True)
class TargetRegistrationDesired:
    target_group_arn: str
    instance_id: str
    port: int | None = None
    """None: the target group's port."""


def registration_id(target_group_arn: str, instance_id: str) -> str:
    return f"{target_group_arn}|{instance_id}"


class TargetRegistration(ResourceClass[TargetRegistrationDesired]):
    """An instance registered with a target group, id ``<target group ARN>|i-…``; its state is the target's
    health (``initial``, ``healthy``, ``unhealthy``, ``unused``…). ``delete`` deregisters; when the target
    group does not exist it raises :class:`~capa_py.aws.errors.NotFound` (``TargetGroupNotFound``), and so
    does moto for a target that is not registered (``InvalidTarget``), where AWS succeeds."""

    kind = "target-registration"
    service = "elbv2"
    create_operation = "RegisterTargets"
    traits = Traits(natural_key=True)
    """RegisterTargets has no Tags and no ClientToken, and a registration cannot be tagged; (target group,
    target) finds it (natural_key)."""
    freshness = ATTRIBUTE_FRESHNESS
    """Registrations are described a target group at a time (one call per cluster, not one for every
    cluster), and only a deregistration by hand changes one: they are reused as long as attributes are."""

    def parent_of(self, desired: TargetRegistrationDesired) -> str | None:
        return desired.instance_id

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        """One ``DescribeTargetHealth`` per target group, for every target of it asked about."""
        by_group: dict[str, list[str]] = {}
        for resource_id in resource_ids:
            group, instance = split_id(resource_id, "|", self.kind)
            by_group.setdefault(group, []).append(instance)
        found: dict[str, Observed] = {}
        for group, instances in by_group.items():
            try:
                response = self.aws.elbv2.call(
                    "DescribeTargetHealth",
                    TargetGroupArn=group,
                    Targets=[self._target(i, None) for i in instances],
                )
            except NotFound:
                continue
            for description in response.get("TargetHealthDescriptions", []):
                observed = self._registration(group, description)
                if observed is not None and observed.id in resource_ids:
                    found[observed.id] = observed
        return found

    def create(
        self, desired: TargetRegistrationDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        self.aws.elbv2.call(
            "RegisterTargets",
            after_create=True,  # the instance and the target group may be moments old
            TargetGroupArn=desired.target_group_arn,
            Targets=[self._target(desired.instance_id, desired.port)],
        )
        return Observed(
            id=registration_id(desired.target_group_arn, desired.instance_id),
            state="initial",
            attributes={"target_group_arn": desired.target_group_arn, "instance_id": desired.instance_id},
        )

    def describe_by_id(self, resource_id: str) -> Observed | None:
        target_group_arn, instance_id = split_id(resource_id, "|", self.kind)
        return self._lookup(target_group_arn, instance_id, None)

    def describe_by_key(self, desired: TargetRegistrationDesired) -> Observed | None:
        return self._lookup(desired.target_group_arn, desired.instance_id, desired.port)

    def delete(self, resource_id: str) -> None:
        target_group_arn, instance_id = split_id(resource_id, "|", self.kind)
        self.aws.elbv2.call(
            "DeregisterTargets", TargetGroupArn=target_group_arn, Targets=[self._target(instance_id, None)]
        )

    def key_of(self, desired: TargetRegistrationDesired) -> str:
        return registration_id(desired.target_group_arn, desired.instance_id)

    def fingerprint(self, desired: TargetRegistrationDesired) -> dict[str, str]:
        return {"target_group_arn": desired.target_group_arn, "instance_id": desired.instance_id}

    @staticmethod
    def _target(instance_id: str, port: int | None) -> dict[str, Any]:
        return {"Id": instance_id, **({"Port": port} if port is not None else {})}

    def _lookup(self, target_group_arn: str, instance_id: str, port: int | None) -> Observed | None:
        try:
            response = self.aws.elbv2.call(
                "DescribeTargetHealth",
                TargetGroupArn=target_group_arn,
                Targets=[self._target(instance_id, port)],
            )
        except NotFound:
            return None
        for description in response.get("TargetHealthDescriptions", []):
            if description.get("Target", {}).get("Id") == instance_id:
                return self._registration(target_group_arn, description)
        return None

    @staticmethod
    def _registration(target_group_arn: str, description: Mapping[str, Any]) -> Observed | None:
        """The registration a target health description reports, or None when the target is not (or is
        no longer) registered."""
        health = description.get("TargetHealth", {})
        if health.get("Reason") in _NOT_REGISTERED_REASONS or health.get("State") == "draining":
            return None
        instance_id = str(description.get("Target", {}).get("Id"))
        return Observed(
            id=registration_id(target_group_arn, instance_id),
            state=health.get("State"),
            attributes={
                "target_group_arn": target_group_arn,
                "instance_id": instance_id,
                "port": description.get("Target", {}).get("Port"),
                "reason": health.get("Reason"),
            },
        )
