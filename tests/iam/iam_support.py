"""What IAM holds, read straight from the endpoint (boto3, not capa-py's code), for the IAM tests."""

from __future__ import annotations

from typing import Any

from capa_py.aws.session import AWSClients


def iam_inventory(aws: AWSClients) -> dict[str, Any]:
    """Every role, instance profile and customer managed policy, with their tags, links and versions."""
    iam = aws.client("iam").raw
    roles: dict[str, Any] = {}
    for role in iam.list_roles()["Roles"]:
        name = role["RoleName"]
        attached = iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]
        tags = iam.list_role_tags(RoleName=name)["Tags"]
        roles[name] = {
            "tags": {t["Key"]: t["Value"] for t in tags},
            "policies": sorted(p["PolicyName"] for p in attached),
        }
    profiles: dict[str, Any] = {}
    for profile in iam.list_instance_profiles()["InstanceProfiles"]:
        name = profile["InstanceProfileName"]
        # GetInstanceProfile, not ListInstanceProfileTags: moto 5.2.5 answers the latter with HTTP 500.
        tags = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get("Tags", [])
        profiles[name] = {
            "tags": {t["Key"]: t["Value"] for t in tags},
            "roles": sorted(r["RoleName"] for r in profile["Roles"]),
        }
    policies: dict[str, Any] = {}
    for policy in iam.list_policies(Scope="Local")["Policies"]:
        tags = iam.list_policy_tags(PolicyArn=policy["Arn"])["Tags"]
        versions = iam.list_policy_versions(PolicyArn=policy["Arn"])["Versions"]
        policies[policy["PolicyName"]] = {
            "tags": {t["Key"]: t["Value"] for t in tags},
            "versions": sorted(v["VersionId"] for v in versions),
            "default": policy["DefaultVersionId"],
        }
    return {"roles": roles, "profiles": profiles, "policies": policies}
