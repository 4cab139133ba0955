"""IAM roles and instance profiles that carry a cluster's tag.

IAM is global (one listing per audit, whatever the regions) and absent from the Resource Groups Tagging API
(moto's and, for roles, AWS's), so both discovery modes describe it. ``ListRoles`` does not return tags;
``GetAccountAuthorizationDetails`` does, for every role and the instance profiles it is in, in one
paginated call instead of one ``ListRoleTags`` per role. IAM paginates with ``IsTruncated``/``Marker``
(not ``NextMarker``), so the pages are walked here. The parsers are the audit's own: no resource class
models IAM (capa-py names the instance profile a machine uses but does not make it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from capa_app.audit.model import GLOBAL_REGION, Found
from capa_py.aws.session import AWSClients
from capa_py.engine.resource import tag_dict

IAM_ACTIONS: tuple[str, ...] = (
    "iam:GetAccountAuthorizationDetails",
    "iam:ListInstanceProfiles",
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
