"""Security group ingress reconciliation and deletion order against moto."""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.aws.errors import AlreadyExists, NotFound
from resources.security_group import (
    SELF,
    IngressRule,
    RuleKey,
    SecurityGroup,
    SecurityGroupDesired,
    ip_permission,
)
from tests.resources.builders import Builder

API = IngressRule("tcp", 6443, 6443, cidr_block="0.0.0.0/0", description="Kubernetes API")
SSH = IngressRule("tcp", 22, 22, cidr_block="10.0.0.0/16")
ETCD_FROM_SELF = IngressRule("tcp", 2379, 2380, source_group_id=SELF, description="etcd")


def _ingress(group: SecurityGroup, group_id: str) -> set[tuple[object, ...]]:
    observed = group.describe_by_id(group_id)
    assert observed is not None
    return {
        (r["protocol"], r["from_port"], r["to_port"], r["source"]) for r in observed.attributes["ingress"]
    }


def test_update_authorizes_missing_and_revokes_extra_rules(build: Builder) -> None:
    groups = SecurityGroup(build.aws)
    vpc_id = build.vpc().id
    desired = SecurityGroupDesired(vpc_id, "alpha-controlplane", "control plane", (API, SSH, ETCD_FROM_SELF))
    group = groups.create(desired, build.tags("controlplane"), None)
    assert _ingress(groups, group.id) == set(), "create makes the group only; update brings the rules"

    assert groups.update(group, desired) is True
    assert _ingress(groups, group.id) == {
        ("tcp", 6443, 6443, "0.0.0.0/0"),
        ("tcp", 22, 22, "10.0.0.0/16"),
        ("tcp", 2379, 2380, group.id),
    }

    narrower = SecurityGroupDesired(vpc_id, "alpha-controlplane", "control plane", (API, ETCD_FROM_SELF))
    observed = groups.describe_by_id(group.id)
    assert observed is not None
    assert groups.update(observed, narrower) is True
    assert _ingress(groups, group.id) == {("tcp", 6443, 6443, "0.0.0.0/0"), ("tcp", 2379, 2380, group.id)}
    final = groups.describe_by_id(group.id)
    assert final is not None
    assert groups.update(final, narrower) is False


def test_update_from_a_stale_observation_treats_duplicates_and_missing_rules_as_done(build: Builder) -> None:
    """Two reconciles racing: the second acts on what the first already did and changes nothing."""
    groups = SecurityGroup(build.aws)
    desired = SecurityGroupDesired(build.vpc().id, "alpha-node", "nodes", (API, SSH))
    group = groups.create(desired, None, None)
    stale = groups.describe_by_id(group.id)
    assert stale is not None
    assert groups.update(stale, desired) is True

    assert groups.update(stale, desired) is False, "InvalidPermission.Duplicate is already done"

    current = groups.describe_by_id(group.id)
    assert current is not None
    assert groups.update(current, SecurityGroupDesired(desired.vpc_id, "alpha-node", "nodes", (API,))) is True
    assert (
        groups.update(current, SecurityGroupDesired(desired.vpc_id, "alpha-node", "nodes", (API,))) is False
    ), "revoking a rule already revoked is already done"


def test_group_name_is_unique_in_its_vpc(build: Builder) -> None:
    groups = SecurityGroup(build.aws)
    desired = SecurityGroupDesired(build.vpc().id, "alpha-lb", "load balancer")
    created = groups.create(desired, None, None)
    with pytest.raises(AlreadyExists):
        groups.create(desired, None, None)
    found = groups.describe_by_key(desired)
    assert found is not None
    assert found.id == created.id
    assert groups.describe_by_key(SecurityGroupDesired(build.vpc().id, "alpha-lb", "load balancer")) is None


def test_delete_revokes_the_groups_own_references_first(build: Builder) -> None:
    """AWS refuses to delete a group another group's rule references (DependencyViolation, retryable).
    Deleting a group first revokes its own rules that name other groups, so that deleting the cluster's
    groups converges in any order. moto does not enforce the refusal, so the order of calls is pinned."""
    groups = SecurityGroup(build.aws)
    vpc_id = build.vpc().id
    lb = groups.create(SecurityGroupDesired(vpc_id, "alpha-lb", "lb"), None, None)
    cp = groups.create(SecurityGroupDesired(vpc_id, "alpha-cp", "cp"), None, None)
    from_lb = IngressRule("tcp", 6443, 6443, source_group_id=lb.id)
    groups.update(cp, SecurityGroupDesired(vpc_id, "alpha-cp", "cp", (from_lb, SSH, ETCD_FROM_SELF)))

    calls: list[tuple[str, object]] = []

    def record(model: Any, params: dict[str, Any], **_: Any) -> None:
        calls.append((model.name, params.get("body", {}).get("IpPermissions.1.Groups.1.GroupId")))

    events = build.aws.ec2.raw.meta.events
    events.register("before-call.ec2", record)
    try:
        groups.delete(cp.id)
    finally:
        events.unregister("before-call.ec2", record)

    assert calls == [
        ("DescribeSecurityGroups", None),
        ("RevokeSecurityGroupIngress", lb.id),  # only the reference to another group
        ("DeleteSecurityGroup", None),
    ]
    assert groups.describe_by_id(cp.id) is None
    with pytest.raises(NotFound):
        groups.delete(cp.id)


def test_revoke_references_to_touches_only_the_named_groups(build: Builder) -> None:
    groups = SecurityGroup(build.aws)
    vpc_id = build.vpc().id
    target = groups.create(SecurityGroupDesired(vpc_id, "alpha-lb", "lb"), None, None)
    ours = groups.create(SecurityGroupDesired(vpc_id, "alpha-cp", "cp"), None, None)
    users = groups.create(SecurityGroupDesired(vpc_id, "someone-else", "not ours"), None, None)
    rule = IngressRule("tcp", 6443, 6443, source_group_id=target.id)
    groups.update(ours, SecurityGroupDesired(vpc_id, "alpha-cp", "cp", (rule, API)))
    groups.update(users, SecurityGroupDesired(vpc_id, "someone-else", "not ours", (rule,)))

    assert groups.revoke_references_to(target.id, [ours.id, target.id]) == 1

    assert _ingress(groups, ours.id) == {("tcp", 6443, 6443, "0.0.0.0/0")}
    assert _ingress(groups, users.id) == {("tcp", 6443, 6443, target.id)}, "a group we were not given"
    assert groups.revoke_references_to(target.id, [ours.id]) == 0


def test_rules_translate_to_ip_permissions() -> None:
    assert ip_permission(RuleKey("-1", None, None, "cidr", "10.0.0.0/8")) == {
        "IpProtocol": "-1",
        "IpRanges": [{"CidrIp": "10.0.0.0/8"}],
    }
    assert ip_permission(RuleKey("tcp", 443, 443, "cidr", "::/0"), "https") == {
        "IpProtocol": "tcp",
        "FromPort": 443,
        "ToPort": 443,
        "Ipv6Ranges": [{"CidrIpv6": "::/0", "Description": "https"}],
    }
    with pytest.raises(ValueError, match="exactly one of"):
        IngressRule("tcp", 22, 22)
    with pytest.raises(ValueError, match="exactly one of"):
        IngressRule("tcp", 22, 22, cidr_block="0.0.0.0/0", source_group_id="sg-1")


def test_update_revokes_a_described_rule_from_another_group(build: Builder) -> None:
    """A rule naming another group, written with a description (SSH from a bastion's group), goes when the
    spec drops it: the revoke names the description it was found with (moto leaves the rule otherwise)."""
    groups = SecurityGroup(build.aws)
    vpc_id = build.vpc().id
    bastion = groups.create(
        SecurityGroupDesired(vpc_id, "alpha-bastion", "bastion"), build.tags("bastion"), None
    )
    from_bastion = IngressRule("tcp", 22, 22, source_group_id=bastion.id, description="SSH from the bastion")
    desired = SecurityGroupDesired(vpc_id, "alpha-node", "nodes", (API, from_bastion))
    group = groups.create(desired, build.tags("node"), None)
    assert groups.update(group, desired) is True
    assert ("tcp", 22, 22, bastion.id) in _ingress(groups, group.id)

    observed = groups.describe_by_id(group.id)
    assert observed is not None
    assert groups.update(observed, SecurityGroupDesired(vpc_id, "alpha-node", "nodes", (API,))) is True
    assert _ingress(groups, group.id) == {("tcp", 6443, 6443, "0.0.0.0/0")}
