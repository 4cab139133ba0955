"""What the ELBv2 resource modules share: tags read with ``DescribeTags`` (ELBv2 has no ``tag:`` filter, so
lookups by tags list the resources and read their tags, 20 ARNs a call) and describes by ARN in batches."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import Any

from capa_py.aws.errors import NotFound
from capa_py.cache.known import MISS, known_of
from capa_py.engine.resource import Observed, ResourceClass, tag_list
from resources._common import (
    ATTRIBUTE_FRESHNESS,
    ELBV2_DESCRIBE_BATCH,
    ELBV2_DESCRIBE_TAGS_BATCH,
    carries,
    elbv2_tags,
)

IAM_ACTIONS: tuple[str, ...] = ("elasticloadbalancing:AddTags",)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

API_SERVER_PORT = 6443
ELBV2_LISTED_WHOLE = frozenset({"DescribeLoadBalancers", "DescribeTargetGroups"})
"""The describes that list every resource of their kind when given no ARN (``DescribeListeners`` needs a
load balancer or listener ARNs)."""
ELBV2_PAGE_SIZE = 400
"""``PageSize`` of an ELBv2 listing: the largest AWS allows."""


def add_tags(resource: ResourceClass[Any], arn: str, tags: Mapping[str, str]) -> None:
    if tags:
        resource.aws.elbv2.call("AddTags", after_create=True, ResourceArns=[arn], Tags=tag_list(tags))
        known_of(resource.aws).forget(("elbv2-tags", arn))


NAMES_FRESHNESS = 5.0
"""How long the names a listing of every load balancer (or target group) of the region saw answer a
lookup by name: the engine looks a name up right after listing the kind by tags, in the same ensure."""


def tagged(
    resource: ResourceClass[Any],
    observed: list[Observed],
    tags: Mapping[str, str],
    whole_region: bool = False,
) -> list[Observed]:
    """Fill in each resource's tags and keep those carrying every one of ``tags``. With ``whole_region``
    (``observed`` is every resource of the kind in the region) the names it holds are kept for
    :func:`by_listed_name`."""
    found = elbv2_tags(resource.aws, [o.id for o in observed])
    for o in observed:
        o.tags = found.get(o.id, {})
    if whole_region:
        names = {str(o.attributes.get("name")): o for o in observed}
        known_of(resource.aws).learn(("elbv2-names", resource.kind), names)
    return [o for o in observed if carries(o.tags, tags)]


def by_listed_name(resource: ResourceClass[Any], name: str) -> Any:
    """The resource named ``name`` as the region's listing of the kind made moments ago saw it (None: the
    name was free then), or :data:`MISS` when no such listing is at hand."""
    names = known_of(resource.aws).recalled(("elbv2-names", resource.kind), NAMES_FRESHNESS)
    if names is MISS:
        return MISS
    return copy.deepcopy(names.get(name))


def named(resource: ResourceClass[Any], observed: Observed | None, name: str) -> None:
    """After a create of ``name``: the listing now holds it (``observed``) — or, after a create whose
    outcome is unknown (None), the listing is forgotten and the next lookup asks AWS."""
    known = known_of(resource.aws)
    key = ("elbv2-names", resource.kind)
    names = known.recalled(key, NAMES_FRESHNESS)
    if observed is None or names is MISS:
        known.forget(key)
        return
    known.learn(key, {**names, name: copy.deepcopy(observed)})


def create_named(
    resource: ResourceClass[Any], name: str, create: Callable[[], Observed], tags: Mapping[str, str] | None
) -> Observed:
    """Create ``name`` through ``create`` (the call, its answer parsed), tagged with ``tags``; the region's
    listing then holds it, or is forgotten when the call failed and its outcome is unknown (see
    :func:`named`)."""
    try:
        observed = create()
    except Exception:
        named(resource, None, name)
        raise
    observed.tags = dict(tags or {})
    named(resource, observed, name)
    return observed


def many(
    resource: ResourceClass[Any],
    operation: str,
    result_key: str,
    parameter: str,
    arns: list[str],
    parse: Callable[[Mapping[str, Any]], Observed],
) -> dict[str, Observed]:
    """Several ELBv2 resources by ARN with their tags: a describe per 20 ARNs, then a ``DescribeTags`` per
    20 of those found. An ARN that no longer exists fails the whole describe, so that batch is asked again
    one ARN at a time.

    More ARNs than one describe takes, of a kind the region lists whole (load balancers, target groups),
    are read from one listing of the kind, paged by :data:`ELBV2_PAGE_SIZE`: the describes then cost the
    same for 200 clusters as for 20."""
    found: dict[str, Observed] = {}
    if len(arns) > ELBV2_DESCRIBE_BATCH and operation in ELBV2_LISTED_WHOLE:
        wanted = set(arns)
        pages = resource.aws.elbv2.pages(operation, result_key, PageSize=ELBV2_PAGE_SIZE)
        found = {o.id: o for o in map(parse, pages) if o.id in wanted}
        arns = []
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
    tags = tags_with_siblings(resource, list(found))
    for observed in found.values():
        observed.tags = tags.get(observed.id, {})
    return found


_ELBV2_KINDS = ("load-balancer", "target-group", "listener")
TAGS_FRESHNESS = ATTRIBUTE_FRESHNESS
"""How long tags read with ``DescribeTags`` serve the refreshes that follow (of their kind, or of another
ELBv2 kind in the same pass). Unlike EC2's, an ELBv2 describe returns no tags, and ``DescribeTags`` takes
20 ARNs: reading them at every refresh would cost a call per 20 resources, 30 calls for 200 clusters'
load balancers, target groups and listeners. Only capa-py's own ``AddTags`` (which forgets what was read)
or a person changes them, so they are reused as long as attributes are; a tag removed by hand is seen
within that bound."""


def tags_with_siblings(resource: ResourceClass[Any], arns: list[str]) -> dict[str, dict[str, str]]:
    """Tags of ``arns``; one ``DescribeTags`` (per 20 ARNs) also reads the tags of the load balancers,
    target groups and listeners due for a refresh (when the process keeps what it knows), so that the
    pass's refresh of those kinds asks for no tags of its own."""
    known = known_of(resource.aws)
    tags: dict[str, dict[str, str]] = {}
    unknown: list[str] = []
    for arn in arns:
        recalled = known.recalled(("elbv2-tags", arn), TAGS_FRESHNESS)
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
        if arn in read:
            known.learn(("elbv2-tags", arn), read[arn])
    tags.update({arn: read[arn] for arn in unknown if arn in read})
    return tags


def with_tags(resource: ResourceClass[Any], observed: Observed) -> Observed:
    with suppress(NotFound):  # deleted between the two calls: the caller's next describe says so
        observed.tags = elbv2_tags(resource.aws, [observed.id]).get(observed.id, {})
    return observed
