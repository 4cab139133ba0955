"""Discovery: every AWS resource that may be a cluster's, found with the tagging API or with describe calls.

Two roads to the same answer (``--discovery``):

* ``tagging-api`` asks the Resource Groups Tagging API (``GetResources``, paginated) for what carries a
  cluster's owned tag — one call per cluster tag key, the keys listed with ``GetTagKeys`` when every
  cluster is audited — then describes those resources by id, per kind, for what classification needs (state,
  VPC, creation time) and to drop what the tagging API still lists after a delete. The kinds it does not
  return (:data:`TAGGING_API_GAPS`: elastic IPs, launch templates, Auto Scaling groups, VPC endpoints,
  classic load balancers — moto 5.2 misses them all) are described in full.
* ``describe`` lists every kind with its own describe call, once, and keeps the owned ones; for accounts
  where the tagging API is not available.

Both then take the same steps, so they agree: whatever lies inside a managed VPC, tagged or not (network
interfaces left by terminated instances, hand-made groups and tables); untagged resources of the kinds an
intent record is waiting for; the parts of what was found (routes and subnet associations of route tables,
gateway attachments, listeners, target registrations); the rules of other groups that reference an owned
security group (they block its deletion); Secrets Manager secrets and Parameter Store SecureString
parameters (a machine's bootstrap data), listed whole with their tags; and IAM, which is global and which
neither API lists by tag.
Route 53 private hosted zones (with the record sets of the owned ones) and S3 buckets are listed once per
audit too (:mod:`capa_app.audit.dns_kinds`): Route 53 is global and ``ListBuckets`` is account-wide.

What goes with its owner is left out: in-use network interfaces and volumes, the instances of a live Auto
Scaling group, an instance's or a NAT gateway's interface, a VPC's default group and main route table.
Resource types the tagging API returns but the audit has no describe calls for are kept under
``<service>:<type>`` (reported, never deleted), which is the one way the two modes can differ.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from capa_app.audit.arns import parse_arn
from capa_app.audit.asg_kinds import GROUP_NAME_TAG, describe_autoscaling_groups
from capa_app.audit.dns_kinds import GLOBAL_KINDS, describe_buckets, describe_hosted_zones
from capa_app.audit.ec2_kinds import (
    EC2_KINDS,
    describe_ec2,
    internet_gateway_parts,
    route_table_parts,
    security_group_rules_referencing,
)
from capa_app.audit.iam_kinds import describe_bootstrap_policies, describe_iam, made_by_iam_bootstrap
from capa_app.audit.lb_kinds import LB_KINDS, listeners_of, registrations_of
from capa_app.audit.model import DiscoveryMode, Found
from capa_app.audit.secret_kinds import describe_parameters, describe_secrets
from capa_py.aws.session import AWSClients, ClientPool
from capa_py.engine.resource import tag_dict
from capa_py.engine.tags import CLUSTER_TAG_PREFIX, OWNED, cluster_tag_key
from capa_py.logging import get_logger

IAM_ACTIONS: tuple[str, ...] = (
    "tag:GetResources",
    "tag:GetTagKeys",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

_log = get_logger("audit.discovery")

TOP_LEVEL_KINDS = (
    "vpc",
    "subnet",
    "internet-gateway",
    "elastic-ip",
    "nat-gateway",
    "route-table",
    "security-group",
    "network-interface",
    "volume",
    "instance",
    "launch-template",
    "autoscaling-group",
    "vpc-endpoint",
    "load-balancer",
    "target-group",
    "classic-load-balancer",
)
"""Kinds listed on their own (the rest are parts of these)."""

IN_VPC_KINDS = (
    "subnet",
    "internet-gateway",
    "nat-gateway",
    "route-table",
    "security-group",
    "network-interface",
    "instance",
    "vpc-endpoint",
    "load-balancer",
    "target-group",
    "classic-load-balancer",
)
"""Kinds that live inside a VPC, listed whatever their tags inside managed VPCs."""

TAGGING_API_GAPS = (
    "elastic-ip",
    "launch-template",
    "autoscaling-group",
    "vpc-endpoint",
    "classic-load-balancer",
)
"""Kinds the tagging API may not return (moto 5.2 misses them): described in full in tagging-api mode."""

PART_KINDS = frozenset({"listener", "security-group-rule"})
"""Taggable parts: found through their parent in both modes, so tagging-API hits of these are not used."""

IAM_KINDS = frozenset({"iam-role", "iam-instance-profile", "iam-policy"})

LISTED_IN_FULL = frozenset({"secret", "parameter"})
"""Kinds listed whole in both modes (Secrets Manager's ``ListSecrets`` returns the tags; Parameter Store's
``SecureString`` parameters with ``ListTagsForResource``): tagging-API hits of these are not used."""


@dataclass(frozen=True)
class DiscoveryScope:
    """What one region's discovery looks for."""

    clusters: frozenset[str] | None = None
    """Cluster names whose owned resources are wanted; None: every cluster's."""
    recorded_vpcs: frozenset[str] = frozenset()
    """VPCs the store records as managed (their tags may be gone)."""
    intent_kinds: frozenset[str] = frozenset()
    """Kinds an intent record waits for: their untagged resources are candidates."""

    def wants(self, cluster: str | None) -> bool:
        return cluster is not None and (self.clusters is None or cluster in self.clusters)


def describe_kind(
    aws: AWSClients, kind: str, *, ids: Sequence[str] | None = None, vpc_ids: Sequence[str] | None = None
) -> list[Found]:
    if kind in EC2_KINDS:
        return describe_ec2(aws, kind, ids=ids, vpc_ids=vpc_ids)
    if kind == "autoscaling-group":
        return describe_autoscaling_groups(aws, ids=ids, vpc_ids=vpc_ids)
    return LB_KINDS[kind](aws, ids=ids, vpc_ids=vpc_ids)


@dataclass
class _Lister:
    """Describe calls for one region. In describe mode each kind is listed once and narrowed here."""

    aws: AWSClients
    listing_once: bool
    _listed: dict[str, list[Found]] = field(default_factory=dict)

    def all(self, kind: str) -> list[Found]:
        if kind not in self._listed:
            self._listed[kind] = describe_kind(self.aws, kind)
        return self._listed[kind]

    def by_ids(self, kind: str, ids: Sequence[str]) -> list[Found]:
        if self.listing_once:
            wanted = set(ids)
            return [f for f in self.all(kind) if f.id in wanted]
        return describe_kind(self.aws, kind, ids=ids)

    def in_vpcs(self, kind: str, vpc_ids: Sequence[str]) -> list[Found]:
        if not vpc_ids:
            return []
        if self.listing_once:
            wanted = set(vpc_ids)
            return [f for f in self.all(kind) if f.vpc_id in wanted]
        return describe_kind(self.aws, kind, vpc_ids=vpc_ids)


def _tagged_by_tagging_api(aws: AWSClients, lister: _Lister, scope: DiscoveryScope) -> list[Found]:
    if scope.clusters is not None:
        keys = [cluster_tag_key(c) for c in sorted(scope.clusters)]
    else:
        every_key = aws.tagging.pages("GetTagKeys", "TagKeys")
        keys = sorted(k for k in every_key if k.startswith(CLUSTER_TAG_PREFIX))
    by_kind: dict[str, dict[str, dict[str, str]]] = {}
    for key in keys:
        mappings = aws.tagging.pages(
            "GetResources",
            "ResourceTagMappingList",
            TagFilters=[{"Key": key, "Values": [OWNED]}],
            ResourcesPerPage=100,
        )
        for mapping in mappings:
            ref = parse_arn(mapping["ResourceARN"])
            by_kind.setdefault(ref.kind, {})[ref.id] = tag_dict(mapping.get("Tags"))
    found: list[Found] = []
    for kind, tagged in sorted(by_kind.items()):
        if kind in PART_KINDS or kind in IAM_KINDS or kind in LISTED_IN_FULL or kind in GLOBAL_KINDS:
            continue
        if kind in EC2_KINDS or kind in LB_KINDS or kind == "autoscaling-group":
            found.extend(f for f in lister.by_ids(kind, sorted(tagged)) if scope.wants(f.owner))
            continue
        _log.info("the tagging API returned a resource type the audit cannot describe", kind=kind)
        found.extend(
            Found(aws.region, kind, arn, tags, attributes={"arn": arn})
            for arn, tags in sorted(tagged.items())
            if scope.wants(Found(aws.region, kind, arn, tags).owner)
        )
    return found


def _security_group_references(aws: AWSClients, groups: list[Found]) -> list[Found]:
    """Rules of the found groups that reference an owned group of another owner (or of none)."""
    owner_of = {g.id: g.owner for g in groups}
    referencing: dict[str, str | None] = {}
    referenced: set[str] = set()
    for group in groups:
        for target in group.attributes.get("references", []):
            if target != group.id and owner_of.get(target) is not None and owner_of[target] != group.owner:
                referencing[group.id] = group.vpc_id
                referenced.add(target)
    if not referencing:
        return []
    return security_group_rules_referencing(aws, referencing, referenced)


def _belongs_to_something_else(found: Found, interfaces_in_use: set[str], groups: set[str]) -> bool:
    if found.kind == "instance":
        return found.tags.get(GROUP_NAME_TAG) in groups
    if found.kind == "security-group":
        return bool(found.attributes.get("is_default"))
    if found.kind == "route-table":
        return bool(found.attributes.get("main"))
    if found.kind == "network-interface":
        return found.id in interfaces_in_use
    return False


def discover_region(aws: AWSClients, mode: DiscoveryMode, scope: DiscoveryScope) -> list[Found]:
    """Every resource of one region the classification needs to see (see the module docstring)."""
    lister = _Lister(aws, listing_once=mode is DiscoveryMode.DESCRIBE)
    found: dict[tuple[str, str], Found] = {}

    def add(items: Iterable[Found]) -> None:
        for item in items:
            found.setdefault(item.key, item)

    def of_kind(*kinds: str) -> list[Found]:
        return [f for f in found.values() if f.kind in kinds]

    if mode is DiscoveryMode.TAGGING_API:
        add(_tagged_by_tagging_api(aws, lister, scope))
        for kind in TAGGING_API_GAPS:
            add(f for f in lister.all(kind) if scope.wants(f.owner))
    else:
        for kind in TOP_LEVEL_KINDS:
            add(f for f in lister.all(kind) if scope.wants(f.owner))
    add(f for f in describe_secrets(aws) if scope.wants(f.owner))
    add(f for f in describe_parameters(aws) if scope.wants(f.owner))
    managed_vpcs = sorted({f.id for f in of_kind("vpc")} | scope.recorded_vpcs)
    for kind in IN_VPC_KINDS:
        add(lister.in_vpcs(kind, managed_vpcs))
    for kind in sorted(scope.intent_kinds):
        if kind in TOP_LEVEL_KINDS:
            add(f for f in lister.all(kind) if f.owner is None)
    for table in of_kind("route-table"):
        add(route_table_parts(table))
    for gateway in of_kind("internet-gateway"):
        add(internet_gateway_parts(gateway))
    add(listeners_of(aws, of_kind("load-balancer")))
    add(registrations_of(aws, of_kind("target-group")))
    add(_security_group_references(aws, of_kind("security-group")))
    in_use = {
        interface
        for f in of_kind("nat-gateway", "vpc-endpoint")
        for interface in f.attributes.get("network_interface_ids", [])
    }
    groups = {f.id for f in of_kind("autoscaling-group")}
    return [f for f in found.values() if not _belongs_to_something_else(f, in_use, groups)]


def discover(
    pool: ClientPool, mode: DiscoveryMode, scopes: dict[str, DiscoveryScope], include_iam: bool = True
) -> list[Found]:
    """Discovery over every region in ``scopes`` (region → scope), plus IAM once."""
    found: list[Found] = []
    for region, scope in scopes.items():
        found.extend(discover_region(pool.for_region(region), mode, scope))
    if include_iam and scopes:
        region, scope = next(iter(scopes.items()))
        iam = [*describe_iam(pool.for_region(region)), *describe_bootstrap_policies(pool.for_region(region))]
        found.extend(f for f in iam if scope.wants(f.owner) or made_by_iam_bootstrap(f.tags))
    if scopes:
        region, scope = next(iter(scopes.items()))
        aws = pool.for_region(region)
        found.extend(describe_hosted_zones(aws, scope.wants))
        found.extend(describe_buckets(aws, scope.wants))
    return found
