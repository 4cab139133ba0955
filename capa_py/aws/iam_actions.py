"""The IAM action an AWS API operation needs, for the least-privilege policies.

Every module that calls AWS declares, at module level, ``IAM_ACTIONS: tuple[str, ...]``: the IAM actions its
calls need, sorted. Most actions are the service's IAM prefix and the operation's name (``ec2:CreateVpc``);
the prefix is not always the botocore service name (``elbv2`` and ``elb`` are ``elasticloadbalancing``,
the tagging API is ``tag``), and some operations are authorized by an action of another name (S3's
``HeadBucket`` is ``s3:ListBucket``): :data:`ACTION_OF_OPERATION` lists those, and :func:`iam_action` is the
one place that turns an operation into an action. ``tests/aws/test_iam_declarations.py`` derives each
module's actions from its calls with this function and fails when a declaration differs.
"""

from __future__ import annotations

IAM_PREFIX: dict[str, str] = {
    "autoscaling": "autoscaling",
    "ec2": "ec2",
    "elb": "elasticloadbalancing",
    "elbv2": "elasticloadbalancing",
    "iam": "iam",
    "resourcegroupstaggingapi": "tag",
    "route53": "route53",
    "s3": "s3",
    "secretsmanager": "secretsmanager",
    "ssm": "ssm",
    "sts": "sts",
}
"""The IAM service prefix of each botocore service capa-py calls."""

ACTION_OF_OPERATION: dict[tuple[str, str], str] = {
    # S3 authorizes several API operations by an action of another name (the S3 user guide's
    # "Actions, resources, and condition keys for Amazon S3").
    ("s3", "DeleteObjects"): "s3:DeleteObject",
    ("s3", "DeletePublicAccessBlock"): "s3:PutBucketPublicAccessBlock",
    ("s3", "GetBucketEncryption"): "s3:GetEncryptionConfiguration",
    ("s3", "GetPublicAccessBlock"): "s3:GetBucketPublicAccessBlock",
    ("s3", "HeadBucket"): "s3:ListBucket",
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "ListBuckets"): "s3:ListAllMyBuckets",
    ("s3", "ListObjectVersions"): "s3:ListBucketVersions",
    ("s3", "ListObjects"): "s3:ListBucket",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "PutBucketEncryption"): "s3:PutEncryptionConfiguration",
    ("s3", "PutBucketLifecycleConfiguration"): "s3:PutLifecycleConfiguration",
    ("s3", "PutPublicAccessBlock"): "s3:PutBucketPublicAccessBlock",
}
"""Operations whose IAM action is not ``<prefix>:<operation>``."""

ALSO_NEEDED: dict[tuple[str, str], tuple[str, ...]] = {
    # Deleting a given version of an object (a bucket is emptied version by version) is its own action.
    ("s3", "DeleteObjects"): ("s3:DeleteObjectVersion",),
    # CreateBucket with CreateBucketConfiguration.Tags is authorized by s3:TagResource as well.
    ("s3", "CreateBucket"): ("s3:TagResource",),
    # A private hosted zone's VPC is checked with the caller's own permission.
    ("route53", "CreateHostedZone"): ("ec2:DescribeVpcs",),
}
"""Operations that need more than one action (with some of their parameters: granted whenever the
operation is)."""


def iam_actions(service: str, operation: str) -> tuple[str, ...]:
    """The IAM actions ``operation`` of ``service`` may need (:func:`iam_action`'s, :data:`ALSO_NEEDED`)."""
    return (iam_action(service, operation), *ALSO_NEEDED.get((service, operation), ()))


def iam_action(service: str, operation: str) -> str:
    """The IAM action that authorizes ``operation`` of botocore service ``service``."""
    mapped = ACTION_OF_OPERATION.get((service, operation))
    if mapped is not None:
        return mapped
    try:
        return f"{IAM_PREFIX[service]}:{operation}"
    except KeyError:
        raise ValueError(f"no IAM prefix known for AWS service {service!r}: add it to IAM_PREFIX") from None
