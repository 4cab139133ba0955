"""The least-privilege IAM policies: what capa-py's controller and operator call, what its machines need.

The controller's and the operator's actions are not written here: every module that calls AWS declares
``IAM_ACTIONS`` (the actions its own calls need, checked against its calls by
``tests/aws/test_iam_declarations.py``), and :data:`CONTROLLER_MODULES` / :data:`OPERATOR_MODULES` name the
modules each policy collects. **A new module that calls AWS joins a policy by one line in one of those two
tuples**; the declarations test fails, naming it, until it does.

* ``controller``: the AWSCluster and AWSMachine controllers (``capa controller``, ``capa apply``), plus what
  AWS checks inside a call rather than as a call of its own (:data:`CONTROLLER_IMPLIED`).
* ``operator``: the person (or pipeline) that runs ``capa``: the controller's actions, which ``capa apply``
  runs in process, and the audit's and ``capa iam``'s.
* ``control-plane``: the control-plane machines' role, for the AWS cloud provider running on them
  (cloud-provider-aws: nodes' addresses and zones, Services of type LoadBalancer, routes).
* ``nodes``: every machine's role: pulling images from ECR, and reading then deleting its bootstrap data in
  Secrets Manager (only secrets under ``aws.cluster.x-k8s.io/``, Cluster API Provider AWS's prefix) or in
  Parameter Store (only parameters under ``/cluster.x-k8s.io/``), or reading its Ignition data from the
  cluster's bucket (only keys under ``control-plane/`` and ``node/``).

Resources are scoped where AWS allows it: IAM roles and instance profiles by CAPA's name suffix, secrets and
parameters by ARN prefix, service-linked roles by service name, ``sts:AssumeRole`` by the ARNs of the roles
the controller assumes with its own credentials (:func:`assumed_roles`: the role identities without a
``sourceIdentityRef`` or whose source is the controller's identity; a role assumed from a static identity's
key, or from another role, is its source principal's business) — on ``*`` only when none is known.
EC2 and Elastic Load Balancing actions stay on ``*``: capa-py's tags name the cluster in the tag *key*, which
an IAM condition cannot match by pattern, and describes do not support resource-level permissions.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from capa_py.api.aws_identity import CONTROLLER_IDENTITY_KIND, AWSClusterRoleIdentity
from capa_py.api.meta import KubeObject

ASSUME_ROLE = "sts:AssumeRole"
"""Granted on the role ARNs the controller assumes when they are known (:func:`grants_for`)."""

PolicyFor = Literal["controller", "operator", "control-plane", "nodes"]
POLICY_KINDS: tuple[PolicyFor, ...] = ("controller", "operator", "control-plane", "nodes")

CONTROLLER_MODULES: tuple[str, ...] = (
    "controllers.identity",
    "controllers.services.bastion",
    "controllers.services.ignition",
    "controllers.references",
    "controllers.services.images",
    "controllers.services.network",
    "controllers.services.objectstore",
    "resources._common",
    "resources._elbv2",
    "resources.autoscaling_group",
    "resources.bucket",
    "resources.elastic_ip",
    "resources.instance",
    "resources.hosted_zone",
    "resources.internet_gateway",
    "resources.launch_template",
    "resources.listener",
    "resources.load_balancer",
    "resources.nat_gateway",
    "resources.parameter",
    "resources.record_set",
    "resources.route",
    "resources.route_table",
    "resources.secret",
    "resources.security_group",
    "resources.subnet",
    "resources.target_group",
    "resources.vpc",
)
"""The modules whose calls the controller makes (one line per module)."""

OPERATOR_MODULES: tuple[str, ...] = (
    "capa_app.audit.deleters",
    "capa_app.audit.discovery",
    "capa_app.audit.dns_kinds",
    "capa_app.audit.ec2_kinds",
    "capa_app.audit.iam_kinds",
    "capa_app.audit.lb_kinds",
    "capa_app.iam.bootstrap",
    "resources.listing",
)
"""The modules only the ``capa`` command runs (the audit, ``capa iam``); the operator also gets the
controller's."""

ROLE_SUFFIX = ".cluster-api-provider-aws.sigs.k8s.io"
"""Cluster API Provider AWS's names end so: ``nodes.cluster-api-provider-aws.sigs.k8s.io``."""

BOOTSTRAP_SECRET_PREFIX = "aws.cluster.x-k8s.io/"
"""Where Cluster API Provider AWS (and capa-py) keeps a machine's bootstrap data in Secrets Manager."""

BOOTSTRAP_PARAMETER_PREFIX = "cluster.x-k8s.io/"
"""Where they keep it in SSM Parameter Store (``secureSecretsBackend: ssm-parameter-store``): parameter
``/cluster.x-k8s.io/<id>/<n>``, whose ARN is ``arn:…:parameter/cluster.x-k8s.io/<id>/<n>``."""


IGNITION_CONTROL_PLANE_PREFIX = "control-plane/"
IGNITION_NODE_PREFIX = "node/"
"""Where a machine's Ignition data is in the cluster's bucket (``<prefix><AWSMachine name>``, CAPA's keys)."""


@dataclass(frozen=True)
class Grant:
    """One statement: actions on resources, under a condition."""

    actions: tuple[str, ...]
    resources: tuple[str, ...] = ("*",)
    condition: dict[str, Any] = field(default_factory=dict)
    why: str = ""


CONTROLLER_IMPLIED: tuple[Grant, ...] = (
    Grant(
        ("iam:PassRole",),
        (f"arn:*:iam::*:role/*{ROLE_SUFFIX}",),
        why="RunInstances with an instance profile passes its role: AWS checks iam:PassRole inside the call",
    ),
    Grant(
        ("iam:CreateServiceLinkedRole",),
        ("arn:*:iam::*:role/aws-service-role/elasticloadbalancing.amazonaws.com/*",),
        {"StringLike": {"iam:AWSServiceName": "elasticloadbalancing.amazonaws.com"}},
        why="the first load balancer of an account makes Elastic Load Balancing's service-linked role",
    ),
    Grant(
        ("iam:CreateServiceLinkedRole",),
        ("arn:*:iam::*:role/aws-service-role/spot.amazonaws.com/*",),
        {"StringLike": {"iam:AWSServiceName": "spot.amazonaws.com"}},
        why="the first Spot Instance of an account makes EC2 Spot's service-linked role",
    ),
    Grant(
        ("iam:CreateServiceLinkedRole",),
        ("arn:*:iam::*:role/aws-service-role/autoscaling.amazonaws.com/*",),
        {"StringLike": {"iam:AWSServiceName": "autoscaling.amazonaws.com"}},
        why="the first Auto Scaling group of an account makes Auto Scaling's service-linked role",
    ),
)
"""What AWS authorizes inside the controller's calls, not as calls of their own (no module can declare
them, and no call log sees them)."""

_IAM_ACCOUNT_WIDE = frozenset(
    {"iam:GetAccountAuthorizationDetails", "iam:ListInstanceProfiles", "iam:ListPolicies"}
)
"""IAM listings: they name no resource, so only ``*`` grants them."""

_CONTROLLER_IAM_RESOURCES = ("arn:*:iam::*:instance-profile/*",)
"""The controller reads the instance profile a machine names (any name the user gives)."""

_OPERATOR_IAM_RESOURCES = (
    f"arn:*:iam::*:role/*{ROLE_SUFFIX}",
    f"arn:*:iam::*:instance-profile/*{ROLE_SUFFIX}",
    f"arn:*:iam::*:policy/*{ROLE_SUFFIX}",
)
"""The operator changes only IAM resources named the way ``capa iam bootstrap`` (and CAPA) names them."""


CONTROL_PLANE_ACTIONS: tuple[str, ...] = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeTags",
    "ec2:AttachVolume",
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:CreateRoute",
    "ec2:CreateSecurityGroup",
    "ec2:CreateTags",
    "ec2:CreateVolume",
    "ec2:DeleteRoute",
    "ec2:DeleteSecurityGroup",
    "ec2:DeleteVolume",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeImages",
    "ec2:DescribeInstances",
    "ec2:DescribeRegions",
    "ec2:DescribeRouteTables",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVolumes",
    "ec2:DescribeVpcs",
    "ec2:DetachVolume",
    "ec2:ModifyInstanceAttribute",
    "ec2:ModifyVolume",
    "ec2:RevokeSecurityGroupIngress",
    "elasticloadbalancing:AddTags",
    "elasticloadbalancing:ApplySecurityGroupsToLoadBalancer",
    "elasticloadbalancing:AttachLoadBalancerToSubnets",
    "elasticloadbalancing:ConfigureHealthCheck",
    "elasticloadbalancing:CreateListener",
    "elasticloadbalancing:CreateLoadBalancer",
    "elasticloadbalancing:CreateLoadBalancerListeners",
    "elasticloadbalancing:CreateLoadBalancerPolicy",
    "elasticloadbalancing:CreateTargetGroup",
    "elasticloadbalancing:DeleteListener",
    "elasticloadbalancing:DeleteLoadBalancer",
    "elasticloadbalancing:DeleteLoadBalancerListeners",
    "elasticloadbalancing:DeleteTargetGroup",
    "elasticloadbalancing:DeregisterInstancesFromLoadBalancer",
    "elasticloadbalancing:DeregisterTargets",
    "elasticloadbalancing:DescribeListeners",
    "elasticloadbalancing:DescribeLoadBalancerAttributes",
    "elasticloadbalancing:DescribeLoadBalancerPolicies",
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:DescribeTargetGroups",
    "elasticloadbalancing:DescribeTargetHealth",
    "elasticloadbalancing:DetachLoadBalancerFromSubnets",
    "elasticloadbalancing:ModifyListener",
    "elasticloadbalancing:ModifyLoadBalancerAttributes",
    "elasticloadbalancing:ModifyTargetGroup",
    "elasticloadbalancing:RegisterInstancesWithLoadBalancer",
    "elasticloadbalancing:RegisterTargets",
    "elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer",
    "elasticloadbalancing:SetLoadBalancerPoliciesOfListener",
    "kms:DescribeKey",
)
"""What the AWS cloud provider (cloud-provider-aws's cloud controller manager) calls from the control plane:
node addresses, zones and lifecycle (EC2 describes), Services of type LoadBalancer (classic and network
load balancers, their security group rules), pod routes (route tables), and volume attach/detach of the
in-tree volume path; kms:DescribeKey for encrypted volumes."""

NODES_GRANTS: tuple[Grant, ...] = (
    Grant(
        (
            "ecr:BatchCheckLayerAvailability",
            "ecr:BatchGetImage",
            "ecr:DescribeRepositories",
            "ecr:GetAuthorizationToken",
            "ecr:GetDownloadUrlForLayer",
            "ecr:GetRepositoryPolicy",
            "ecr:ListImages",
        ),
        why="kubelet's ECR credential provider pulls images from the account's registries",
    ),
    Grant(
        ("secretsmanager:DeleteSecret", "secretsmanager:GetSecretValue"),
        (f"arn:*:secretsmanager:*:*:secret:{BOOTSTRAP_SECRET_PREFIX}*",),
        why="a machine reads its bootstrap data at boot, then deletes it",
    ),
    Grant(
        ("ssm:DeleteParameter", "ssm:GetParameter"),
        (f"arn:*:ssm:*:*:parameter/{BOOTSTRAP_PARAMETER_PREFIX}*",),
        why="a machine reads its bootstrap data from Parameter Store at boot (decrypted), then deletes it",
    ),
    Grant(
        ("s3:GetObject",),
        (f"arn:*:s3:::*/{IGNITION_CONTROL_PLANE_PREFIX}*", f"arn:*:s3:::*/{IGNITION_NODE_PREFIX}*"),
        why="Ignition reads a machine's data from the cluster's bucket (spec.s3Bucket) at boot: the bucket's "
        "name is the user's, the keys are capa-py's",
    ),
)


def declared_actions(module_names: tuple[str, ...]) -> tuple[str, ...]:
    """The union of the modules' ``IAM_ACTIONS``, sorted."""
    actions: set[str] = set()
    for name in module_names:
        module = importlib.import_module(name)
        declared = getattr(module, "IAM_ACTIONS", None)
        if declared is None:
            raise LookupError(f"{name} is listed in a policy but declares no IAM_ACTIONS")
        actions.update(declared)
    return tuple(sorted(actions))


def assumed_roles(identities: Iterable[KubeObject]) -> tuple[str, ...]:
    """The ARNs of the roles the controller assumes with its own credentials, among ``identities``: the
    role identities without a source, or whose source is the controller's identity (sorted, once each)."""
    return tuple(
        sorted(
            {
                identity.spec.role_arn
                for identity in identities
                if isinstance(identity, AWSClusterRoleIdentity)
                and (
                    identity.spec.source_identity_ref is None
                    or identity.spec.source_identity_ref.kind == CONTROLLER_IDENTITY_KIND
                )
            }
        )
    )


def _grants_of(
    actions: tuple[str, ...],
    iam_resources: tuple[str, ...],
    what: str,
    assume_roles: tuple[str, ...] | None = None,
) -> list[Grant]:
    grants: list[Grant] = []
    if ASSUME_ROLE in actions:
        actions = tuple(a for a in actions if a != ASSUME_ROLE)
        if assume_roles is None:
            grants.append(Grant((ASSUME_ROLE,), why=f"{what}: role identities, none known: every role"))
        elif assume_roles:
            grants.append(Grant((ASSUME_ROLE,), assume_roles, why=f"{what}: the role identities' roles"))
    unscoped = tuple(a for a in actions if not a.startswith("iam:"))
    if unscoped:
        grants.append(
            Grant(unscoped, why=f"{what}: EC2, Elastic Load Balancing, tagging: not scopable by name")
        )
    listings = tuple(a for a in actions if a in _IAM_ACCOUNT_WIDE)
    if listings:
        grants.append(Grant(listings, why=f"{what}: IAM listings name no resource"))
    named = tuple(a for a in actions if a.startswith("iam:") and a not in _IAM_ACCOUNT_WIDE)
    if named:
        grants.append(Grant(named, iam_resources, why=f"{what}: IAM resources by name"))
    return grants


def grants_for(kind: PolicyFor, assume_roles: tuple[str, ...] | None = None) -> tuple[Grant, ...]:
    """The statements of one policy. ``assume_roles``: the roles the controller assumes with its own
    credentials (``sts:AssumeRole`` on them; none when empty), ``None`` when they are not known (on ``*``)."""
    if kind == "nodes":
        return NODES_GRANTS
    if kind == "control-plane":
        return (Grant(CONTROL_PLANE_ACTIONS, why="the AWS cloud provider on the control plane"),)
    controller = declared_actions(CONTROLLER_MODULES)
    grants = _grants_of(controller, _CONTROLLER_IAM_RESOURCES, "the controller", assume_roles)
    grants.extend(CONTROLLER_IMPLIED)
    if kind == "operator":
        only = tuple(a for a in declared_actions(OPERATOR_MODULES) if a not in controller)
        grants += _grants_of(only, _OPERATOR_IAM_RESOURCES, "the operator")
    return tuple(grants)


def granted_actions(kind: PolicyFor) -> frozenset[str]:
    """Every action one policy grants (whatever the resource)."""
    return frozenset(action for grant in grants_for(kind) for action in grant.actions)


def policy_document(kind: PolicyFor, assume_roles: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The IAM policy document (``Version`` 2012-10-17) of one policy (``assume_roles`` as
    :func:`grants_for` takes them)."""
    statements: list[dict[str, Any]] = []
    for grant in grants_for(kind, assume_roles):
        statement: dict[str, Any] = {
            "Effect": "Allow",
            "Action": list(grant.actions),
            "Resource": list(grant.resources) if len(grant.resources) > 1 else grant.resources[0],
        }
        if grant.condition:
            statement["Condition"] = grant.condition
        statements.append(statement)
    return {"Version": "2012-10-17", "Statement": statements}
