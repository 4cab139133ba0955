"""The cluster's object store: the S3 bucket its machines read their Ignition bootstrap data from.

``spec.s3Bucket`` (Cluster API Provider AWS's field) names a bucket. :func:`reconcile_bucket` makes it
through the engine with the existing :class:`~resources.bucket.Bucket` class (tags on create on AWS, class 1;
on moto and LocalStack, which drop the create's tags, tagged after — class 3, made idempotent by the name),
then gives it the bucket policy CAPA gives it: every request over plain HTTP refused (not against an
endpoint served over plain HTTP, a local one, where capa-py's own calls would be refused), and the roles
of the named instance profiles (a profile made by ``capa iam bootstrap`` or ``clusterawsadm`` carries a role
of the same name) allowed ``s3:GetObject`` on ``control-plane/*`` and ``node/*``. The policy needs the
account id (``GetCallerIdentity``), asked only when the policy the bucket has (``GetBucketPolicy``) does not
name those roles on those keys already: a pass over a bucket whose policy is right puts nothing.

:data:`DELETION` deletes the bucket with the cluster: :meth:`~resources.bucket.Bucket.delete` empties it
first (every object version and delete marker: a machine's data left by a machine deleted without its
cluster controller running, say), where CAPA skips a bucket that is not empty.

The machines' side (the objects) is :mod:`controllers.services.ignition`.
"""

from __future__ import annotations

import json
from typing import Any

from capa_py.api.aws import AWSCluster, S3Bucket
from capa_py.aws.errors import NotFound
from capa_py.ctrlkit.action import Context
from controllers.aws_scope import SCOPE
from controllers.services.cluster_scope import ClusterScope, Deletion, RoleList, roles
from resources.bucket import Bucket, BucketDesired

IAM_ACTIONS: tuple[str, ...] = ("s3:GetBucketPolicy", "s3:PutBucketPolicy", "sts:GetCallerIdentity")
"""The calls made here; the bucket itself is made, tagged and deleted through its resource class."""

BUCKET_ROLE = "ignition-bucket"
CONTROL_PLANE_PREFIX = "control-plane/"
NODE_PREFIX = "node/"


def partition_of(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def wants_bucket(ctx: Context) -> bool:
    """Whether the cluster names a bucket (``spec.s3Bucket``)."""
    scope: ClusterScope = ctx.values[SCOPE]
    return scope.obj.spec.s3_bucket is not None


def readers(bucket: S3Bucket) -> list[tuple[str, str, str]]:
    """(statement id, role name, key prefix) of each role the policy lets read: the control plane's role
    on ``control-plane/*``, each nodes' role on ``node/*``."""
    found: list[tuple[str, str, str]] = []
    if bucket.control_plane_iam_instance_profile:
        found.append(("ControlPlaneRead", bucket.control_plane_iam_instance_profile, CONTROL_PLANE_PREFIX))
    for index, profile in enumerate(dict.fromkeys(bucket.nodes_iam_instance_profiles)):
        found.append((f"NodesRead{index}", profile, NODE_PREFIX))
    return found


def bucket_policy(bucket: S3Bucket, account: str, region: str, tls_only: bool = True) -> dict[str, Any]:
    """The bucket's policy document (CAPA's statements: TLS only, then the readers). ``tls_only=False``
    leaves the first out: against an endpoint served over plain HTTP (moto, LocalStack, which enforce
    bucket policies) it would refuse capa-py's own object calls."""
    partition = partition_of(region)
    statements: list[dict[str, Any]] = []
    if tls_only:
        statements.append(
            {
                "Sid": "ForceSSLOnlyAccess",
                "Effect": "Deny",
                "Principal": {"AWS": ["*"]},
                "Action": ["s3:*"],
                "Resource": [f"arn:{partition}:s3:::{bucket.name}/*"],
                "Condition": {"Bool": {"aws:SecureTransport": False}},
            }
        )
    for sid, role, prefix in readers(bucket):
        statements.append(
            {
                "Sid": sid,
                "Effect": "Allow",
                "Principal": {"AWS": [f"arn:{partition}:iam::{account}:role/{role}"]},
                "Action": ["s3:GetObject"],
                "Resource": [f"arn:{partition}:s3:::{bucket.name}/{prefix}*"],
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def _shape(policy: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A policy with the account left out: what :func:`reconcile_bucket` compares (so that the account is
    asked only when the policy has to be put)."""
    shape: list[tuple[Any, ...]] = []
    for statement in policy.get("Statement", []):
        principal = statement.get("Principal", {})
        principals = principal.get("AWS", []) if isinstance(principal, dict) else [principal]
        if isinstance(principals, str):
            principals = [principals]
        resources = statement.get("Resource", [])
        if isinstance(resources, str):
            resources = [resources]
        actions = statement.get("Action", [])
        if isinstance(actions, str):
            actions = [actions]
        shape.append(
            (
                statement.get("Sid"),
                statement.get("Effect"),
                tuple(sorted(p.rsplit(":", 1)[-1] for p in principals)),
                tuple(sorted(actions)),
                tuple(sorted(resources)),
                json.dumps(statement.get("Condition", {}), sort_keys=True).lower(),
            )
        )
    return sorted(shape, key=repr)


def _current_policy(scope: ClusterScope, name: str) -> dict[str, Any] | None:
    try:
        text = scope.aws.client("s3").call("GetBucketPolicy", Bucket=name).get("Policy")
    except NotFound:  # NoSuchBucketPolicy
        return None
    if not text:
        return None
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def reconcile_bucket(scope: ClusterScope) -> None:
    obj: AWSCluster = scope.obj
    bucket = obj.spec.s3_bucket
    if bucket is None:
        return
    scope.ensure(Bucket(scope.aws), BUCKET_ROLE, BucketDesired(bucket.name))
    region = scope.aws.region
    tls_only = not (scope.aws.endpoint or "").startswith("http://")
    wanted_shape = _shape(bucket_policy(bucket, "account", region, tls_only))
    current = _current_policy(scope, bucket.name)
    if current is not None and _shape(current) == wanted_shape:
        return
    account = scope.aws.client("sts").call("GetCallerIdentity")["Account"]
    policy = bucket_policy(bucket, str(account), region, tls_only)
    scope.aws.client("s3").call(
        "PutBucketPolicy", after_create=True, Bucket=bucket.name, Policy=json.dumps(policy, sort_keys=True)
    )


def _bucket_roles() -> RoleList:
    """The bucket's role when the cluster names a bucket or one is recorded (or intended): a cluster that
    never had one costs no S3 call to delete."""
    every = roles(BUCKET_ROLE)

    def wanted(scope: ClusterScope) -> list[str]:
        if scope.obj.spec.s3_bucket is None and scope.kind_of(BUCKET_ROLE) is None:
            return []
        return every(scope)

    return wanted


DELETION = (Deletion("DeleteS3Bucket", lambda r: Bucket(r.vpc.aws), _bucket_roles()),)
"""The bucket, emptied then deleted (its objects are the machines' data: nothing else of the cluster
depends on it)."""

__all__ = [
    "BUCKET_ROLE",
    "CONTROL_PLANE_PREFIX",
    "DELETION",
    "IAM_ACTIONS",
    "NODE_PREFIX",
    "bucket_policy",
    "partition_of",
    "readers",
    "reconcile_bucket",
    "wants_bucket",
]
