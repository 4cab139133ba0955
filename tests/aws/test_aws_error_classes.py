"""Error codes are classified per service (EC2, ELBv2, IAM, STS), with a shared fallback."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from capa_py.aws import errors


def _classified(service: str, code: str, status: int = 400) -> errors.AWSError:
    exc = ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op"
    )
    return errors.classify(exc, service, "Op")


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("RequestLimitExceeded", errors.Throttled),
        ("InsufficientInstanceCapacity", errors.Transient),
        ("InvalidVpcID.NotFound", errors.NotFound),
        ("InvalidSubnetID.NotFound", errors.NotFound),
        ("InvalidGroup.NotFound", errors.NotFound),
        ("InvalidAMIID.NotFound", errors.InvalidRequest),
        ("InvalidKeyPair.NotFound", errors.InvalidRequest),
        ("IdempotentParameterMismatch", errors.InvalidRequest),
        ("InvalidIPAddress.InUse", errors.DependencyViolation),
        ("Resource.AlreadyAssociated", errors.AlreadyExists),
        ("UnauthorizedOperation", errors.PermissionDenied),
    ],
)
def test_ec2_codes(code: str, expected: type[errors.AWSError]) -> None:
    assert type(_classified("ec2", code)) is expected


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("PriorRequestNotComplete", 429, errors.Throttled),
        ("InsufficientCapacity", 500, errors.Transient),
        ("ResourceInUse", 400, errors.DependencyViolation),
        ("LoadBalancerNotFound", 400, errors.NotFound),
        ("TargetGroupNotFound", 400, errors.NotFound),
        ("SubnetNotFound", 400, errors.InvalidRequest),
        ("InvalidSecurityGroup", 400, errors.InvalidRequest),
        ("AllocationIdNotFound", 400, errors.InvalidRequest),
        ("DuplicateTargetGroupName", 400, errors.AlreadyExists),
        ("TooManyLoadBalancers", 400, errors.InvalidRequest),
        ("ValidationError", 400, errors.InvalidRequest),
    ],
)
def test_elbv2_codes(code: str, status: int, expected: type[errors.AWSError]) -> None:
    assert type(_classified("elbv2", code, status)) is expected


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchEntity", 404, errors.NotFound),
        ("EntityAlreadyExists", 409, errors.AlreadyExists),
        ("DeleteConflict", 409, errors.DependencyViolation),
        ("ConcurrentModification", 409, errors.Busy),
        ("LimitExceeded", 409, errors.InvalidRequest),
        ("ServiceFailure", 500, errors.Transient),
        ("Throttling", 400, errors.Throttled),
        ("AccessDenied", 403, errors.PermissionDenied),
    ],
)
def test_iam_codes(code: str, status: int, expected: type[errors.AWSError]) -> None:
    assert type(_classified("iam", code, status)) is expected


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ExpiredTokenException", 400, errors.PermissionDenied),
        ("RegionDisabledException", 403, errors.PermissionDenied),
        ("InvalidClientTokenId", 403, errors.PermissionDenied),
        ("IDPCommunicationError", 400, errors.Transient),
        ("MalformedPolicyDocument", 400, errors.InvalidRequest),
    ],
)
def test_sts_codes(code: str, status: int, expected: type[errors.AWSError]) -> None:
    assert type(_classified("sts", code, status)) is expected


def test_the_same_code_means_what_its_service_means() -> None:
    # A subnet the ELBv2 request names that does not exist: the request is wrong, retrying cannot help;
    # without a service of its own the *NotFound shape means a missing resource (drift).
    assert type(_classified("elbv2", "SubnetNotFound")) is errors.InvalidRequest
    assert type(_classified("rds", "SubnetNotFound")) is errors.NotFound
    # IAM's LimitExceeded is a quota; it is no throttling signal, and it is not retried.
    assert not isinstance(_classified("iam", "LimitExceeded", 409), errors.Retryable)
    # IAM's ConcurrentModification is a refusal worth repeating; nowhere else is it known.
    assert isinstance(_classified("iam", "ConcurrentModification", 409), errors.Retryable)
    assert type(_classified("ec2", "ConcurrentModification")) is errors.InvalidRequest
    # ResourceInUse: ELBv2 target group still used by a listener, a delete to repeat.
    assert type(_classified("elbv2", "ResourceInUse")) is errors.DependencyViolation


def test_unknown_codes_fall_back_on_their_shape_and_status() -> None:
    assert type(_classified("ec2", "InvalidSomething.NotFound")) is errors.NotFound
    assert type(_classified("elbv2", "SomethingNew", 503)) is errors.Transient
    assert type(_classified("sts", "SomethingNew", 429)) is errors.Throttled
    assert type(_classified("iam", "SomethingNew")) is errors.InvalidRequest


def test_an_invalid_reference_names_its_field() -> None:
    exc = errors.InvalidReference("spec.network.vpc.id", "vpc-0abc does not exist in us-east-1")
    assert isinstance(exc, errors.Fatal)
    assert exc.code == "InvalidReference"
    assert exc.field == "spec.network.vpc.id"
    assert str(exc) == "spec.network.vpc.id: vpc-0abc does not exist in us-east-1"
