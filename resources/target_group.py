"""The API server's target group (ELBv2 ``CreateTargetGroup``, TCP 6443, instance targets) and the instances
registered with it (``RegisterTargets``).

A target group's name is unique per account and region (its natural key). A registration cannot be tagged
and takes no token; it is keyed by (target group, instance) and its id is ``<target group ARN>|i-…``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.cache.known import MISS
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_list
from capa_py.engine.traits import Traits
from resources._common import (
    ATTRIBUTE_FRESHNESS,
    split_id,
)
from resources._elbv2 import API_SERVER_PORT, add_tags, by_listed_name, create_named, many, tagged, with_tags

IAM_ACTIONS: tuple[str, ...] = (
    "elasticloadbalancing:CreateTargetGroup",
    "elasticloadbalancing:DeleteTargetGroup",
    "elasticloadbalancing:DeregisterTargets",
    "elasticloadbalancing:DescribeTargetGroups",
    "elasticloadbalancing:DescribeTargetHealth",
    "elasticloadbalancing:RegisterTargets",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""


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
        return create_named(
            self,
            desired.name,
            lambda: _observed_tg(self._create_call(desired, tags)["TargetGroups"][0]),
            tags,
        )

    def _create_call(self, desired: TargetGroupDesired, tags: Mapping[str, str] | None) -> dict[str, Any]:
        return self.aws.elbv2.call(
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

    def creates_first_in(self, desired: TargetGroupDesired) -> str | None:
        """The target group's VPC: ``CreateTargetGroup`` of a name taken with other settings is
        ``DuplicateTargetGroupName`` (moto refuses any taken name), and with the same settings — the same
        VPC — answers the group that has them, which in a VPC this process has just made is its own."""
        return desired.vpc_id

    def describe_by_id(self, resource_id: str) -> Observed | None:
        return self._describe(TargetGroupArns=[resource_id])

    def describe_by_key(self, desired: TargetGroupDesired) -> Observed | None:
        listed = by_listed_name(self, desired.name)
        if listed is not MISS:
            result: Observed | None = listed
            return result
        return self._describe(Names=[desired.name])

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        return many(
            self, "DescribeTargetGroups", "TargetGroups", "TargetGroupArns", resource_ids, _observed_tg
        )

    def describe_by_tags(self, tags: Mapping[str, str], desired: TargetGroupDesired | None) -> list[Observed]:
        tgs = [_observed_tg(tg) for tg in self.aws.elbv2.pages("DescribeTargetGroups", "TargetGroups")]
        return tagged(self, tgs, tags, whole_region=True)

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
        add_tags(self, resource_id, tags)

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
        return with_tags(self, _observed_tg(tgs[0])) if tgs else None


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
