"""Security groups (``CreateSecurityGroup``) and their ingress rules.

A group's name is unique in its VPC (``InvalidGroup.Duplicate`` otherwise), so (VPC, name) is a natural
key. Ingress rules are the mutable attributes: :meth:`SecurityGroup.create` makes the empty group in one
call, and :meth:`SecurityGroup.update` authorizes the missing rules and revokes the extra ones, treating
``InvalidPermission.Duplicate`` / ``InvalidPermission.NotFound`` as already done (another reconcile got
there first). Egress is left at AWS's default (all traffic).

Rules may name another group as their source, and AWS refuses to delete a group that another group's rule
still references. :meth:`SecurityGroup.delete` therefore first revokes this group's own rules that reference
other groups, so that deleting the cluster's groups converges in any order (a delete that is still blocked
raises the retryable :class:`~capa_py.aws.errors.DependencyViolation`), and
:meth:`SecurityGroup.revoke_references_to` removes references to a group from groups the caller names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from capa_py.aws.errors import AlreadyExists, NotFound
from capa_py.engine.resource import Mismatch, Observed, ResourceClass, compare, tag_dict, tag_filters
from capa_py.engine.traits import Traits
from resources._common import carries, ec2_by_filter, ec2_create_tags, ec2_items, tag_specifications

IAM_ACTIONS: tuple[str, ...] = (
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:CreateSecurityGroup",
    "ec2:DeleteSecurityGroup",
    "ec2:DescribeSecurityGroups",
    "ec2:RevokeSecurityGroupIngress",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

SELF = "self"
"""``IngressRule.source_group_id`` naming the group the rule belongs to (its id is not known up front)."""

ALL_PROTOCOLS = "-1"
_DUPLICATE = "InvalidPermission.Duplicate"
_PERMISSION_NOT_FOUND = "InvalidPermission.NotFound"


@dataclass(frozen=True)
class IngressRule:
    """One ingress rule: a protocol and port range from exactly one source, a CIDR or a group.

    ``protocol`` is ``tcp``, ``udp``, ``icmp`` or ``-1`` (all, ports ignored). The description is written
    when the rule is authorized but is not part of the rule's identity.
    """

    protocol: str
    from_port: int | None = None
    to_port: int | None = None
    cidr_block: str | None = None
    source_group_id: str | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if (self.cidr_block is None) == (self.source_group_id is None):
            raise ValueError("an ingress rule needs exactly one of cidr_block and source_group_id")


@dataclass(frozen=True)
class SecurityGroupDesired:
    vpc_id: str
    group_name: str
    description: str
    ingress: tuple[IngressRule, ...] = ()
    manage_rules: bool = True
    """False: make (or find) the group but leave its rules as they are — for a first pass that only needs
    the group ids that rules will name."""


class RuleKey(NamedTuple):
    """What makes two ingress rules the same rule to AWS."""

    protocol: str
    from_port: int | None
    to_port: int | None
    source_kind: str  # "cidr", "group" or "prefix-list"
    source: str


def _ports(protocol: str, from_port: Any, to_port: Any) -> tuple[int | None, int | None]:
    if protocol == ALL_PROTOCOLS:
        return None, None
    return (None if from_port is None else int(from_port)), (None if to_port is None else int(to_port))


def rule_key(rule: IngressRule, group_id: str) -> RuleKey:
    protocol = rule.protocol.lower()
    from_port, to_port = _ports(protocol, rule.from_port, rule.to_port)
    if rule.cidr_block is not None:
        return RuleKey(protocol, from_port, to_port, "cidr", rule.cidr_block)
    source = group_id if rule.source_group_id == SELF else str(rule.source_group_id)
    return RuleKey(protocol, from_port, to_port, "group", source)


def observed_rules(permissions: Iterable[Mapping[str, Any]]) -> dict[RuleKey, str]:
    """Flatten ``IpPermissions`` into one entry per (protocol, ports, source), with its description."""
    rules: dict[RuleKey, str] = {}
    for permission in permissions:
        protocol = str(permission.get("IpProtocol", ALL_PROTOCOLS)).lower()
        from_port, to_port = _ports(protocol, permission.get("FromPort"), permission.get("ToPort"))
        for item in permission.get("IpRanges", []):
            rules[RuleKey(protocol, from_port, to_port, "cidr", item["CidrIp"])] = item.get("Description", "")
        for item in permission.get("Ipv6Ranges", []):
            rules[RuleKey(protocol, from_port, to_port, "cidr", item["CidrIpv6"])] = item.get(
                "Description", ""
            )
        for item in permission.get("UserIdGroupPairs", []):
            rules[RuleKey(protocol, from_port, to_port, "group", item["GroupId"])] = item.get(
                "Description", ""
            )
        for item in permission.get("PrefixListIds", []):
            key = RuleKey(protocol, from_port, to_port, "prefix-list", item["PrefixListId"])
            rules[key] = item.get("Description", "")
    return rules


def ip_permission(key: RuleKey, description: str = "") -> dict[str, Any]:
    """The ``IpPermissions`` element for one rule."""
    permission: dict[str, Any] = {"IpProtocol": key.protocol}
    if key.from_port is not None:
        permission["FromPort"] = key.from_port
    if key.to_port is not None:
        permission["ToPort"] = key.to_port
    described = {"Description": description} if description else {}
    if key.source_kind == "group":
        permission["UserIdGroupPairs"] = [{"GroupId": key.source, **described}]
    elif key.source_kind == "prefix-list":
        permission["PrefixListIds"] = [{"PrefixListId": key.source, **described}]
    elif ":" in key.source:
        permission["Ipv6Ranges"] = [{"CidrIpv6": key.source, **described}]
    else:
        permission["IpRanges"] = [{"CidrIp": key.source, **described}]
    return permission


def _observed(group: Mapping[str, Any]) -> Observed:
    rules = observed_rules(group.get("IpPermissions", []))
    return Observed(
        id=group["GroupId"],
        tags=tag_dict(group.get("Tags")),
        state="available",
        attributes={
            "vpc_id": group.get("VpcId"),
            "group_name": group.get("GroupName"),
            "description": group.get("Description"),
            "ingress": [
                {**key._asdict(), "description": text} for key, text in sorted(rules.items(), key=str)
            ],
        },
    )


def _rule_keys(observed: Observed) -> set[RuleKey]:
    return {
        RuleKey(r["protocol"], r["from_port"], r["to_port"], r["source_kind"], r["source"])
        for r in observed.attributes.get("ingress", [])
    }


class SecurityGroup(ResourceClass[SecurityGroupDesired]):
    """A VPC security group. ``delete`` of an id that does not exist raises
    :class:`~capa_py.aws.errors.NotFound` (``InvalidGroup.NotFound``); of a group another group's rules
    still reference, :class:`~capa_py.aws.errors.DependencyViolation`. Ingress is reconciled by
    :meth:`update`, never by :meth:`create`."""

    kind = "security-group"
    service = "ec2"
    create_operation = "CreateSecurityGroup"
    traits = Traits(tag_on_create=True, taggable=True, natural_key=True)
    """CreateSecurityGroup accepts TagSpecifications (tag_on_create); it has no ClientToken; CreateTags tags
    it later (taggable); a group name is unique in its VPC, so (VPC, name) finds it (natural_key)."""
    tracks_updates = True

    def parent_of(self, desired: SecurityGroupDesired) -> str | None:
        return desired.vpc_id

    def create(
        self, desired: SecurityGroupDesired, tags: Mapping[str, str] | None, token: str | None
    ) -> Observed:
        response = self.aws.ec2.call(
            "CreateSecurityGroup",
            after_create=True,  # the VPC may be moments old
            VpcId=desired.vpc_id,
            GroupName=desired.group_name,
            Description=desired.description,
            **tag_specifications("security-group", tags),
        )
        return Observed(
            id=response["GroupId"],
            tags=tag_dict(response.get("Tags")) or dict(tags or {}),
            state="available",
            attributes={
                "vpc_id": desired.vpc_id,
                "group_name": desired.group_name,
                "description": desired.description,
                "ingress": [],
            },
        )

    def describe_by_id(self, resource_id: str) -> Observed | None:
        groups = ec2_items(self.aws.ec2, "DescribeSecurityGroups", "SecurityGroups", GroupIds=[resource_id])
        return _observed(groups[0]) if groups else None

    def describe_many(self, resource_ids: list[str], within: Sequence[Observed] = ()) -> dict[str, Observed]:
        groups = ec2_by_filter(
            self.aws.ec2, "DescribeSecurityGroups", "SecurityGroups", "group-id", resource_ids
        )
        return {o.id: o for o in map(_observed, groups) if o.id in resource_ids}

    def describe_by_tags(
        self, tags: Mapping[str, str], desired: SecurityGroupDesired | None
    ) -> list[Observed]:
        groups = ec2_items(
            self.aws.ec2, "DescribeSecurityGroups", "SecurityGroups", Filters=tag_filters(tags)
        )
        return [o for o in map(_observed, groups) if carries(o.tags, tags)]

    def describe_by_key(self, desired: SecurityGroupDesired) -> Observed | None:
        filters = [
            {"Name": "vpc-id", "Values": [desired.vpc_id]},
            {"Name": "group-name", "Values": [desired.group_name]},
        ]
        groups = ec2_items(self.aws.ec2, "DescribeSecurityGroups", "SecurityGroups", Filters=filters)
        return _observed(groups[0]) if groups else None

    def mismatches(self, observed: Observed, desired: SecurityGroupDesired) -> list[Mismatch]:
        found = observed.attributes
        return compare(
            {
                "vpcId": (desired.vpc_id, found.get("vpc_id")),
                "groupName": (desired.group_name, found.get("group_name")),
            }
        )

    def tag(self, resource_id: str, tags: Mapping[str, str]) -> None:
        ec2_create_tags(self.aws, resource_id, tags)

    def update(self, observed: Observed, desired: SecurityGroupDesired) -> bool:
        """Authorize missing ingress rules, then revoke extra ones (in that order, so that a rule being
        changed never leaves a window with neither)."""
        if not desired.manage_rules:
            return False
        wanted = {rule_key(rule, observed.id): rule.description for rule in desired.ingress}
        present = _rule_keys(observed)
        missing = [ip_permission(key, text) for key, text in wanted.items() if key not in present]
        # A revoked rule carries the description it was found with: AWS matches rules without it, but
        # moto matches a source-group rule only with it (and would leave the rule in place).
        found_text = {
            RuleKey(r["protocol"], r["from_port"], r["to_port"], r["source_kind"], r["source"]): str(
                r.get("description") or ""
            )
            for r in observed.attributes.get("ingress", [])
        }
        extra = [
            ip_permission(key, found_text.get(key, "")) for key in sorted(present - wanted.keys(), key=str)
        ]
        changed = False
        if missing:
            changed |= self._authorize(observed.id, missing)
        if extra:
            changed |= self._revoke(observed.id, extra)
        if missing or extra:
            # Duplicates and rules already gone count as done: the group now holds exactly these.
            observed.attributes["ingress"] = [
                {**key._asdict(), "description": text} for key, text in sorted(wanted.items(), key=str)
            ]
        return changed

    def delete(self, resource_id: str) -> None:
        observed = self.describe_by_id(resource_id)
        if observed is None:
            raise NotFound(
                f"ec2:DeleteSecurityGroup: {resource_id} does not exist", "ec2", "DeleteSecurityGroup"
            )
        references = [
            ip_permission(key)
            for key in sorted(_rule_keys(observed), key=str)
            if key.source_kind == "group" and key.source != resource_id
        ]
        if references:
            self._revoke(resource_id, references)
        self.aws.ec2.call("DeleteSecurityGroup", GroupId=resource_id)

    def revoke_references_to(self, group_id: str, in_group_ids: Iterable[str]) -> int:
        """Revoke the ingress rules of the named groups that reference ``group_id``; returns how many.

        Only the groups the caller names are touched (its own), never every group in the account.
        """
        others = [g for g in dict.fromkeys(in_group_ids) if g != group_id]
        if not others:
            return 0
        revoked = 0
        for group in ec2_items(self.aws.ec2, "DescribeSecurityGroups", "SecurityGroups", GroupIds=others):
            keys = [k for k in observed_rules(group.get("IpPermissions", [])) if k.source == group_id]
            if keys and self._revoke(group["GroupId"], [ip_permission(k) for k in sorted(keys, key=str)]):
                revoked += len(keys)
        return revoked

    def key_of(self, desired: SecurityGroupDesired) -> str:
        return f"{desired.vpc_id}/{desired.group_name}"

    def fingerprint(self, desired: SecurityGroupDesired) -> dict[str, str]:
        return {"vpc_id": desired.vpc_id, "group_name": desired.group_name}

    # -- rule calls --------------------------------------------------------------------------------------
    def _authorize(self, group_id: str, permissions: list[dict[str, Any]]) -> bool:
        """Authorize in one call; when some rule already exists, fall back to one call per rule."""
        try:
            self.aws.ec2.call(
                "AuthorizeSecurityGroupIngress",
                after_create=True,
                GroupId=group_id,
                IpPermissions=permissions,
            )
            return True
        except AlreadyExists as exc:
            if exc.code != _DUPLICATE:
                raise
            if len(permissions) == 1:
                return False
        # Every rule gets its own call: no short-circuit once one of them succeeds.
        results = [self._authorize(group_id, [permission]) for permission in permissions]
        return any(results)

    def _revoke(self, group_id: str, permissions: list[dict[str, Any]]) -> bool:
        """Revoke in one call; when some rule is already gone, fall back to one call per rule."""
        try:
            # Not after_create: InvalidPermission.NotFound is an answer here, not eventual consistency.
            response = self.aws.ec2.call(
                "RevokeSecurityGroupIngress", GroupId=group_id, IpPermissions=permissions
            )
        except NotFound as exc:
            # InvalidPermission.NotFound: the rule is gone. InvalidGroup.NotFound: a group a rule names is
            # gone (an emulator lets it be deleted while referenced), so there is nothing to revoke.
            if exc.code not in (_PERMISSION_NOT_FOUND, "InvalidGroup.NotFound"):
                raise
            if len(permissions) == 1:
                return False
            results = [self._revoke(group_id, [permission]) for permission in permissions]
            return any(results)
        # For VPC groups AWS answers success and lists rules it did not find as UnknownIpPermissions.
        return len(response.get("UnknownIpPermissions", [])) < len(permissions)
