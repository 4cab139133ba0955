"""``capa iam bootstrap`` and ``capa iam delete``: the roles, instance profiles and policies, made by name.

Cluster API Provider AWS's ``clusterawsadm bootstrap iam`` makes them through a CloudFormation stack; here
they are made directly, each found by its name first, so a re-run (after a crash, too) converges instead of
duplicating: IAM names are unique in an account, and every create here carries its tags (strategy class 1
with a natural key). What is made:

* three customer managed policies (``controllers.``, ``control-plane.`` and ``nodes.`` followed by
  :data:`~capa_app.iam.policy.ROLE_SUFFIX`), whose documents are :func:`~capa_app.iam.policy.policy_document`;
  a changed document becomes a new default version, the oldest non-default version deleted first when the
  policy has AWS's limit of five;
* three roles of the same names that EC2 instances may assume, the controllers' policy attached to the
  controllers' role, the control plane's and the nodes' to the control plane's, the nodes' to the nodes';
* an instance profile per role, of the role's name, holding it.

Each carries ``capa-py.io/store=<store uid>``: a same-named resource that another store made, or that
carries no store tag, is never adopted (:class:`ForeignIAMResource`, before anything is changed).
``capa iam delete`` removes only this store's, in dependency order: roles out of profiles, profiles,
policies detached from roles, roles, then the policies with their old versions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from capa_app.iam.policy import ROLE_SUFFIX, PolicyFor, policy_document
from capa_py.aws.errors import NotFound
from capa_py.aws.session import AWSClient, AWSClients
from capa_py.engine.tags import STORE_TAG
from capa_py.logging import get_logger

IAM_ACTIONS: tuple[str, ...] = (
    "iam:AddRoleToInstanceProfile",
    "iam:AttachRolePolicy",
    "iam:CreateInstanceProfile",
    "iam:CreatePolicy",
    "iam:CreatePolicyVersion",
    "iam:CreateRole",
    "iam:DeleteInstanceProfile",
    "iam:DeletePolicy",
    "iam:DeletePolicyVersion",
    "iam:DeleteRole",
    "iam:DetachRolePolicy",
    "iam:GetInstanceProfile",
    "iam:GetPolicy",
    "iam:GetPolicyVersion",
    "iam:GetRole",
    "iam:ListAttachedRolePolicies",
    "iam:ListPolicyVersions",
    "iam:RemoveRoleFromInstanceProfile",
    "iam:UpdateAssumeRolePolicy",
    "sts:GetCallerIdentity",
)
"""The IAM actions the AWS calls of this module need (collected by ``capa iam policy``)."""

_log = get_logger("iam")

MADE_BY_TAG = "capa-py.io/made-by"
MADE_BY = "capa-iam-bootstrap"
"""The second tag of what ``capa iam bootstrap`` makes: the audit lists these as managed, not leaks."""

MAX_POLICY_VERSIONS = 5
"""AWS keeps at most five versions of a managed policy."""

TRUST_POLICY: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}
"""Who may assume the roles: EC2 instances (machines, and a controller on an instance)."""


@dataclass(frozen=True)
class RoleSpec:
    name: str
    policies: tuple[str, ...]
    """The managed policies (by name) attached to the role."""


def _name(prefix: str) -> str:
    return prefix + ROLE_SUFFIX


POLICIES: dict[str, PolicyFor] = {
    _name("controllers"): "controller",
    _name("control-plane"): "control-plane",
    _name("nodes"): "nodes",
}
"""The managed policies, by name, and the document each carries."""

ROLES: tuple[RoleSpec, ...] = (
    RoleSpec(_name("controllers"), (_name("controllers"),)),
    RoleSpec(_name("control-plane"), (_name("control-plane"), _name("nodes"))),
    RoleSpec(_name("nodes"), (_name("nodes"),)),
)
"""The roles, each with an instance profile of its name."""


class ForeignIAMResource(Exception):
    """A resource of one of the bootstrap's names exists and is not this store's: never adopted."""


@dataclass(frozen=True)
class Step:
    """One change to make, in order: ``operation`` on ``target`` (what the plan prints)."""

    operation: str
    target: str
    detail: str = ""
    params: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def describe(self) -> str:
        return f"{self.operation} {self.target}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class Observed:
    """What exists of the bootstrap's names, with the store tag of each."""

    account: str
    partition: str
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    """name → ``{"arn", "tags", "document", "versions"}`` (documents and versions read only when needed)."""
    roles: dict[str, dict[str, Any]] = field(default_factory=dict)
    """name → ``{"tags", "trust", "attached"}``."""
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    """name → ``{"tags", "roles"}``."""

    def policy_arn(self, name: str) -> str:
        return f"arn:{self.partition}:iam::{self.account}:policy/{name}"


def _tags(items: list[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in items or []}


def _document(raw: Any) -> Any:
    """A policy document as IAM returns it: a dict, or URL-encoded JSON text."""
    return json.loads(unquote(raw)) if isinstance(raw, str) else raw


def _tag_list(store_uid: str) -> list[dict[str, str]]:
    return [{"Key": STORE_TAG, "Value": store_uid}, {"Key": MADE_BY_TAG, "Value": MADE_BY}]


def observe(aws: AWSClients) -> Observed:
    """Every resource of the bootstrap's names: a ``GetRole``/``GetInstanceProfile``/``GetPolicy`` each."""
    iam = aws.client("iam")
    identity = aws.client("sts").call("GetCallerIdentity")
    arn = str(identity.get("Arn", "arn:aws:"))
    observed = Observed(account=str(identity["Account"]), partition=arn.split(":")[1] or "aws")
    for name in POLICIES:
        try:
            policy = iam.call("GetPolicy", PolicyArn=observed.policy_arn(name))["Policy"]
        except NotFound:
            continue
        observed.policies[name] = {
            "arn": policy["Arn"],
            "tags": _tags(policy.get("Tags")),
            "default_version": policy.get("DefaultVersionId"),
        }
    for spec in ROLES:
        try:
            role = iam.call("GetRole", RoleName=spec.name)["Role"]
        except NotFound:
            pass
        else:
            attached = iam.call("ListAttachedRolePolicies", RoleName=spec.name).get("AttachedPolicies", [])
            observed.roles[spec.name] = {
                "tags": _tags(role.get("Tags")),
                "trust": _document(role.get("AssumeRolePolicyDocument")),
                "attached": {p["PolicyArn"] for p in attached},
            }
        try:
            profile = iam.call("GetInstanceProfile", InstanceProfileName=spec.name)["InstanceProfile"]
        except NotFound:
            continue
        observed.profiles[spec.name] = {
            "tags": _tags(profile.get("Tags")),
            "roles": [r["RoleName"] for r in profile.get("Roles", [])],
        }
    return observed


def _foreign(kind: str, name: str, tags: dict[str, str], store_uid: str) -> str | None:
    owner = tags.get(STORE_TAG)
    if owner == store_uid:
        return None
    who = f"capa-py store {owner}" if owner else "no capa-py store (CAPA, by hand, or untagged)"
    return f"{kind} {name} exists and was made by {who}"


def check_ownership(observed: Observed, store_uid: str) -> None:
    """Refuse, naming each, when a resource of the bootstrap's names is not this store's."""
    problems = [
        problem
        for kind, found in (
            ("IAM policy", observed.policies),
            ("IAM role", observed.roles),
            ("instance profile", observed.profiles),
        )
        for name, item in sorted(found.items())
        if (problem := _foreign(kind, name, item["tags"], store_uid)) is not None
    ]
    if problems:
        raise ForeignIAMResource(
            "; ".join(problems)
            + ": capa iam bootstrap never adopts another's resource (delete or rename it, "
            "or run with the store that made it)"
        )


def plan_bootstrap(aws: AWSClients, observed: Observed, store_uid: str) -> list[Step]:
    """The changes that make the bootstrap's resources exist as wanted (none when they already do)."""
    check_ownership(observed, store_uid)
    iam = aws.client("iam")
    tags = _tag_list(store_uid)
    steps: list[Step] = []
    for name, kind in POLICIES.items():
        document = policy_document(kind)
        found = observed.policies.get(name)
        if found is None:
            params = {"PolicyName": name, "PolicyDocument": json.dumps(document), "Tags": tags}
            steps.append(Step("CreatePolicy", name, params=params))
            continue
        steps += _policy_version_steps(iam, name, found, document)
    for spec in ROLES:
        role = observed.roles.get(spec.name)
        if role is None:
            params = {
                "RoleName": spec.name,
                "AssumeRolePolicyDocument": json.dumps(TRUST_POLICY),
                "Tags": tags,
            }
            steps.append(Step("CreateRole", spec.name, params=params))
        elif role["trust"] != TRUST_POLICY:
            params = {"RoleName": spec.name, "PolicyDocument": json.dumps(TRUST_POLICY)}
            steps.append(Step("UpdateAssumeRolePolicy", spec.name, "trust policy changed", params))
        attached = role["attached"] if role is not None else set()
        for policy in spec.policies:
            arn = observed.policy_arn(policy)
            if arn not in attached:
                params = {"RoleName": spec.name, "PolicyArn": arn}
                steps.append(Step("AttachRolePolicy", spec.name, f"policy {policy}", params))
        profile = observed.profiles.get(spec.name)
        if profile is None:
            params = {"InstanceProfileName": spec.name, "Tags": tags}
            steps.append(Step("CreateInstanceProfile", spec.name, params=params))
        if profile is None or spec.name not in profile["roles"]:
            params = {"InstanceProfileName": spec.name, "RoleName": spec.name}
            steps.append(Step("AddRoleToInstanceProfile", spec.name, f"role {spec.name}", params))
    return steps


def _policy_version_steps(iam: AWSClient, name: str, found: dict[str, Any], document: Any) -> list[Step]:
    arn = found["arn"]
    current = iam.call("GetPolicyVersion", PolicyArn=arn, VersionId=found["default_version"])
    if _document(current["PolicyVersion"].get("Document")) == document:
        return []
    steps: list[Step] = []
    versions = iam.call("ListPolicyVersions", PolicyArn=arn).get("Versions", [])
    if len(versions) >= MAX_POLICY_VERSIONS:
        old = sorted((v for v in versions if not v.get("IsDefaultVersion")), key=lambda v: v["CreateDate"])
        params = {"PolicyArn": arn, "VersionId": old[0]["VersionId"]}
        steps.append(Step("DeletePolicyVersion", name, f"oldest version {old[0]['VersionId']}", params))
    params = {"PolicyArn": arn, "PolicyDocument": json.dumps(document), "SetAsDefault": True}
    steps.append(
        Step("CreatePolicyVersion", name, "document changed: the new version is the default", params)
    )
    return steps


def plan_delete(aws: AWSClients, observed: Observed, store_uid: str) -> tuple[list[Step], list[str]]:
    """The changes that remove this store's bootstrap resources, and what is left alone (and why)."""
    iam = aws.client("iam")
    steps: list[Step] = []
    skipped: list[str] = []
    ours_roles = {n for n, r in observed.roles.items() if r["tags"].get(STORE_TAG) == store_uid}
    for name, profile in sorted(observed.profiles.items()):
        if (problem := _foreign("instance profile", name, profile["tags"], store_uid)) is not None:
            skipped.append(problem)
            continue
        for role in profile["roles"]:
            params = {"InstanceProfileName": name, "RoleName": role}
            steps.append(Step("RemoveRoleFromInstanceProfile", name, f"role {role}", params))
        steps.append(Step("DeleteInstanceProfile", name, params={"InstanceProfileName": name}))
    for name, role in sorted(observed.roles.items()):
        if name not in ours_roles:
            skipped.append(str(_foreign("IAM role", name, role["tags"], store_uid)))
            continue
        for arn in sorted(role["attached"]):
            steps.append(Step("DetachRolePolicy", name, arn, {"RoleName": name, "PolicyArn": arn}))
        steps.append(Step("DeleteRole", name, params={"RoleName": name}))
    for name, policy in sorted(observed.policies.items()):
        if (problem := _foreign("IAM policy", name, policy["tags"], store_uid)) is not None:
            skipped.append(problem)
            continue
        versions = iam.call("ListPolicyVersions", PolicyArn=policy["arn"]).get("Versions", [])
        for version in versions:
            if not version.get("IsDefaultVersion"):
                params = {"PolicyArn": policy["arn"], "VersionId": version["VersionId"]}
                steps.append(Step("DeletePolicyVersion", name, f"version {version['VersionId']}", params))
        steps.append(Step("DeletePolicy", name, params={"PolicyArn": policy["arn"]}))
    return steps, skipped


def apply_steps(aws: AWSClients, steps: list[Step]) -> None:
    """Make the changes, in order (each one a single call, safe to repeat after a crash: the next run
    observes what was done and plans only the rest)."""
    iam = aws.client("iam")
    for step in steps:
        _log.info("iam change", operation=step.operation, target=step.target, detail=step.detail or None)
        iam.call(step.operation, **step.params)
