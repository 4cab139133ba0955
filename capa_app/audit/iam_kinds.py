"""IAM roles and instance profiles that carry a cluster's tag.

IAM is global (one listing per audit, whatever the regions) and absent from the Resource Groups Tagging API
(moto's and, for roles, AWS's), so both discovery modes describe it. ``ListRoles`` does not return tags;
``GetAccountAuthorizationDetails`` does, for every role and the instance profiles it is in, in one
paginated call instead of one ``ListRoleTags`` per role. IAM paginates with ``IsTruncated``/``Marker``
(not ``NextMarker``), so the pages are walked here. The parsers are the audit's own: no resource class
models IAM (capa-py names the instance profile a machine uses; ``capa iam bootstrap`` makes the roles,
instance profiles and managed policies of Cluster API Provider AWS's names).

What ``capa iam bootstrap`` made carries no cluster's tag but :data:`~capa_app.iam.bootstrap.MADE_BY_TAG`
and a store's: :func:`made_by_iam_bootstrap` tells discovery to keep it and classification to judge it by
the store (this store's: managed, left for ``capa iam delete``; another's: foreign, out of the default
scope). Its managed policies (kind ``iam-policy``) are found by name (``ListPolicies`` of the account's own
policies, then ``GetPolicy`` for the tags of those with the bootstrap's names: the listing has no tags).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from capa_app.audit.model import GLOBAL_REGION, Found
from capa_app.iam.bootstrap import MADE_BY, MADE_BY_TAG, POLICIES
from capa_py.aws.session import AWSClients
from capa_py.engine.resource import tag_dict

IAM_ACTIONS: tuple[str, ...] = (
    "iam:GetAccountAuthorizationDetails",
    "iam:GetPolicy",
    "iam:ListInstanceProfiles",
    "iam:ListPolicies",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""


def iam_pages(aws: AWSClients, operation: str, result_key: str, **params: Any) -> Iterator[dict[str, Any]]:
    while True:
        page = aws.client("iam").call(operation, **params)
        yield from page.get(result_key, [])
        if not page.get("IsTruncated") or not page.get("Marker"):
            return
        params = {**params, "Marker": page["Marker"]}


def describe_iam(aws: AWSClients) -> list[Found]:
    """Every role and instance profile, with tags (filtering to the owned ones is the caller's)."""
    roles: list[Found] = []
    profiles: dict[str, Found] = {}
    for role in iam_pages(aws, "GetAccountAuthorizationDetails", "RoleDetailList", Filter=["Role"]):
        in_profiles = role.get("InstanceProfileList", [])
        roles.append(
            Found(
                GLOBAL_REGION,
                "iam-role",
                role["RoleName"],
                tag_dict(role.get("Tags")),
                state="available",
                created_at=role.get("CreateDate"),
                name=role.get("Arn"),
                attributes={"instance_profiles": [p["InstanceProfileName"] for p in in_profiles]},
            )
        )
        for profile in in_profiles:
            profiles.setdefault(profile["InstanceProfileName"], _profile(profile))
    for profile in iam_pages(aws, "ListInstanceProfiles", "InstanceProfiles"):
        listed = _profile(profile)
        known = profiles.setdefault(listed.id, listed)
        known.tags = known.tags or listed.tags
    return [*roles, *profiles.values()]


def _profile(profile: dict[str, Any]) -> Found:
    return Found(
        GLOBAL_REGION,
        "iam-instance-profile",
        profile["InstanceProfileName"],
        tag_dict(profile.get("Tags")),
        state="available",
        created_at=profile.get("CreateDate"),
        name=profile.get("Arn"),
        attributes={"roles": [r["RoleName"] for r in profile.get("Roles", [])]},
    )


def made_by_iam_bootstrap(tags: dict[str, str]) -> bool:
    """Whether ``capa iam bootstrap`` (of some store) made the resource carrying ``tags``."""
    return tags.get(MADE_BY_TAG) == MADE_BY


def describe_bootstrap_policies(aws: AWSClients) -> list[Found]:
    """The account's managed policies of the bootstrap's names, with their tags."""
    found: list[Found] = []
    for policy in iam_pages(aws, "ListPolicies", "Policies", Scope="Local"):
        if policy["PolicyName"] not in POLICIES:
            continue
        detail = aws.client("iam").call("GetPolicy", PolicyArn=policy["Arn"])["Policy"]
        found.append(
            Found(
                GLOBAL_REGION,
                "iam-policy",
                policy["PolicyName"],
                tag_dict(detail.get("Tags")),
                state="available",
                created_at=policy.get("CreateDate"),
                name=policy["Arn"],
            )
        )
    return found
