"""AWS error classification: one place that turns botocore errors into types the code branches on.

``AWSError``
 ├─ ``Retryable``            try again with backoff
 │   ├─ ``Throttled``         the API asked us to slow down (RequestLimitExceeded, Throttling, …)
 │   │   └─ ``Busy``          another request is changing the resource (IAM ConcurrentModification)
 │   ├─ ``Transient``         5xx, timeouts, connection resets
 │   └─ ``DependencyViolation`` a delete raced a dependent that is still going away
 ├─ ``NotFound``             the resource does not exist (drift, or eventual consistency after a create)
 ├─ ``AlreadyExists``        a natural key (name, rule, route) is taken
 └─ ``Fatal``                retrying cannot help: permission, validation, quota, a bad AMI
     ├─ ``PermissionDenied``
     └─ ``InvalidRequest``
         └─ ``InvalidReference`` a resource the spec names does not exist (``field`` says which)

Codes are classified per service (:data:`SERVICE_CODES`: EC2, ELBv2, IAM, STS, Secrets Manager, Route 53,
S3, Auto Scaling) with a shared fallback, so one code can mean different things in different services. Each
error keeps the service, operation and error code, and chains the botocore exception.
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)


class AWSError(Exception):
    """Base of every classified AWS error."""

    def __init__(self, message: str, service: str = "", operation: str = "", code: str = "") -> None:
        self.service = service
        self.operation = operation
        self.code = code
        super().__init__(message)


class Retryable(AWSError):
    """Try again with backoff: nothing about the request is wrong."""


class Throttled(Retryable):
    """AWS asked us to slow down; the request was refused, so repeating it is always safe."""


class Transient(Retryable):
    """A 5xx, a timeout or a dropped connection: the outcome is unknown."""


class Busy(Throttled):
    """The resource is being changed by another request (IAM's ConcurrentModification): refused, so
    repeating it is safe."""


class DependencyViolation(Retryable):
    """A delete raced a dependent that is still going away; wait and delete again."""


class NotFound(AWSError):
    """The resource does not exist: drift of a recorded id, or eventual consistency after a create."""


class AlreadyExists(AWSError):
    """A natural key (a name, a rule, a route, an association) is already taken."""


class Fatal(AWSError):
    """Retrying cannot help: report it on the object and back off."""


class PermissionDenied(Fatal):
    """The credentials may not make this call."""


class InvalidRequest(Fatal):
    """The request is wrong: a validation error, a quota, a bad AMI or key pair."""


class InvalidReference(InvalidRequest):
    """A resource the spec names (a VPC, subnet or security group id, an AMI, a key pair, an instance
    profile) does not exist. Raised by controllers with the field path, never from an error code alone:
    the same code about a resource we recorded is drift."""

    def __init__(self, field: str, message: str, service: str = "", operation: str = "") -> None:
        self.field = field
        super().__init__(f"{field}: {message}", service, operation, "InvalidReference")


class MissingCredentials(Fatal):
    """No credentials and no endpoint: nothing to talk to."""


# -- classification tables -------------------------------------------------------------------------------
# One table per service (codes as each service's API reference and botocore's service models name them),
# then a shared fallback for codes every AWS query API uses. The same code can mean different things in
# different services: ELBv2's SubnetNotFound names a subnet in the *request* (the request is wrong, retrying
# cannot help), while an EC2 *.NotFound about a resource we recorded is drift; IAM's LimitExceeded is a
# quota, not throttling; IAM's ConcurrentModification is a refusal worth repeating.

THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "RequestThrottled",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)

TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)

PERMISSION_CODES = frozenset(
    {
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "AuthFailure",
        "OptInRequired",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
        "ExpiredToken",
        "MissingAuthenticationToken",
    }
)

SHARED_CODES: dict[str, type[AWSError]] = {
    **dict.fromkeys(THROTTLING_CODES, Throttled),
    **dict.fromkeys(TRANSIENT_CODES, Transient),
    **dict.fromkeys(PERMISSION_CODES, PermissionDenied),
    "DependencyViolation": DependencyViolation,
    "ResourceInUse": DependencyViolation,
    "ResourceNotFoundException": NotFound,
    "AlreadyExists": AlreadyExists,
    "ValidationError": InvalidRequest,
    "InvalidParameterValue": InvalidRequest,
    "InvalidParameterCombination": InvalidRequest,
    "MissingParameter": InvalidRequest,
}
"""Codes every service means the same way; consulted after the service's own table."""

EC2_CODES: dict[str, type[AWSError]] = {
    "RequestLimitExceeded": Throttled,
    "InsufficientInstanceCapacity": Transient,
    "InsufficientAddressCapacity": Transient,
    "DependencyViolation": DependencyViolation,
    "InvalidIPAddress.InUse": DependencyViolation,
    # Describes of what we recorded: drift (or eventual consistency right after a create).
    "NatGatewayNotFound": NotFound,
    "Gateway.NotAttached": NotFound,
    "InvalidVpcID.NotFound": NotFound,
    "InvalidSubnetID.NotFound": NotFound,
    "InvalidGroup.NotFound": NotFound,
    "InvalidInstanceID.NotFound": NotFound,
    "InvalidInternetGatewayID.NotFound": NotFound,
    "InvalidRouteTableID.NotFound": NotFound,
    "InvalidAllocationID.NotFound": NotFound,
    "InvalidAssociationID.NotFound": NotFound,
    "InvalidPermission.NotFound": NotFound,
    "InvalidRoute.NotFound": NotFound,
    "InvalidLaunchTemplateId.NotFound": NotFound,
    "InvalidLaunchTemplateName.NotFoundException": NotFound,
    "InvalidLaunchTemplateId.VersionNotFound": NotFound,
    "InvalidLaunchTemplateName.AlreadyExistsException": AlreadyExists,
    # Something the request names that the user supplied: the request is wrong.
    "InvalidAMIID.NotFound": InvalidRequest,
    "InvalidAMIID.Malformed": InvalidRequest,
    "InvalidAMIID.Unavailable": InvalidRequest,
    "InvalidKeyPair.NotFound": InvalidRequest,
    "IdempotentParameterMismatch": InvalidRequest,
    "Unsupported": InvalidRequest,
    "InvalidGroup.Duplicate": AlreadyExists,
    "InvalidPermission.Duplicate": AlreadyExists,
    "RouteAlreadyExists": AlreadyExists,
    "Resource.AlreadyAssociated": AlreadyExists,
}

ELBV2_CODES: dict[str, type[AWSError]] = {
    "PriorRequestNotComplete": Throttled,
    "InsufficientCapacity": Transient,
    "HealthUnavailable": Transient,
    "ResourceInUse": DependencyViolation,
    "LoadBalancerNotFound": NotFound,
    "TargetGroupNotFound": NotFound,
    "ListenerNotFound": NotFound,
    "RuleNotFound": NotFound,
    "ResourceNotFound": NotFound,
    # Registering an instance that is gone or not running yet.
    "InvalidTarget": NotFound,
    # Not-found codes about what the request names (subnets, groups, addresses, certificates).
    "SubnetNotFound": InvalidRequest,
    "InvalidSubnet": InvalidRequest,
    "InvalidSecurityGroup": InvalidRequest,
    "AllocationIdNotFound": InvalidRequest,
    "CertificateNotFound": InvalidRequest,
    "SSLPolicyNotFound": InvalidRequest,
    "AvailabilityZoneNotSupported": InvalidRequest,
    "DuplicateLoadBalancerName": AlreadyExists,
    "DuplicateTargetGroupName": AlreadyExists,
    "DuplicateListener": AlreadyExists,
    "PriorityInUse": AlreadyExists,
}

IAM_CODES: dict[str, type[AWSError]] = {
    "NoSuchEntity": NotFound,
    "EntityAlreadyExists": AlreadyExists,
    "DeleteConflict": DependencyViolation,
    "ConcurrentModification": Busy,
    "EntityTemporarilyUnmodifiable": Busy,
    "ServiceFailure": Transient,
    "LimitExceeded": InvalidRequest,
    "InvalidInput": InvalidRequest,
    "MalformedPolicyDocument": InvalidRequest,
    "UnmodifiableEntity": InvalidRequest,
}

STS_CODES: dict[str, type[AWSError]] = {
    "IDPCommunicationError": Transient,
    "ExpiredTokenException": PermissionDenied,
    "RegionDisabledException": PermissionDenied,
    "IDPRejectedClaim": PermissionDenied,
    "InvalidIdentityToken": PermissionDenied,
    "MalformedPolicyDocument": InvalidRequest,
    "PackedPolicyTooLarge": InvalidRequest,
}

SECRETSMANAGER_CODES: dict[str, type[AWSError]] = {
    "ResourceNotFoundException": NotFound,
    "ResourceExistsException": AlreadyExists,
    "InternalServiceError": Transient,
    # A name still held by a secret being deleted (deletion without recovery takes moments): freed soon,
    # as Cluster API Provider AWS also treats it.
    "InvalidRequestException": Transient,
    "InvalidParameterException": InvalidRequest,
    "InvalidNextTokenException": InvalidRequest,
    "PreconditionNotMetException": InvalidRequest,
    "MalformedPolicyDocumentException": InvalidRequest,
    "EncryptionFailure": InvalidRequest,
    "DecryptionFailure": InvalidRequest,
    # The account's quota of secrets (or of versions): not throttling, retrying soon cannot help.
    "LimitExceededException": InvalidRequest,
}
"""Secrets Manager speaks JSON (``{"__type": "ResourceExistsException"}``); its throttling code,
``ThrottlingException``, is in the shared table."""
SSM_CODES: dict[str, type[AWSError]] = {
    "ParameterNotFound": NotFound,
    "InvalidResourceId": NotFound,
    "ParameterAlreadyExists": AlreadyExists,
    "InternalServerError": Transient,
    "ParameterLimitExceeded": InvalidRequest,
    "ParameterMaxVersionLimitExceeded": InvalidRequest,
    "HierarchyLevelLimitExceededException": InvalidRequest,
    "HierarchyTypeMismatchException": InvalidRequest,
    "InvalidAllowedPatternException": InvalidRequest,
    "InvalidKeyId": InvalidRequest,
    "InvalidFilterKey": InvalidRequest,
    "InvalidFilterOption": InvalidRequest,
    "InvalidFilterValue": InvalidRequest,
    "InvalidNextToken": InvalidRequest,
    "TooManyTagsError": InvalidRequest,
    "UnsupportedParameterType": InvalidRequest,
}
"""Systems Manager (Parameter Store) speaks JSON; its throttling code, ``ThrottlingException``, is in the
shared table. ``InvalidResourceId``: the tags of a parameter that does not exist."""
ROUTE53_CODES: dict[str, type[AWSError]] = {
    "PriorRequestNotComplete": Throttled,
    "NoSuchHostedZone": NotFound,
    "HostedZoneNotFound": NotFound,
    "NoSuchChange": NotFound,
    # A zone still holding record sets other than its SOA and NS: delete those first.
    "HostedZoneNotEmpty": DependencyViolation,
    # A CallerReference already used: the zone it made exists (see resources/hosted_zone.py).
    "HostedZoneAlreadyExists": AlreadyExists,
    "ConflictingDomainExists": InvalidRequest,
    "InvalidChangeBatch": InvalidRequest,
    "InvalidDomainName": InvalidRequest,
    "InvalidInput": InvalidRequest,
    "InvalidVPCId": InvalidRequest,
    "TooManyHostedZones": InvalidRequest,
}

S3_CODES: dict[str, type[AWSError]] = {
    # HeadBucket has no body: botocore reports the HTTP status as the code.
    "404": NotFound,
    "NoSuchBucket": NotFound,
    "NoSuchTagSet": NotFound,
    "NoSuchBucketPolicy": NotFound,
    "NoSuchKey": NotFound,
    "BucketNotEmpty": DependencyViolation,
    "OperationAborted": Busy,
    "BucketAlreadyOwnedByYou": AlreadyExists,
    # The name is held by another account: retrying cannot help, the user must choose another name.
    "BucketAlreadyExists": InvalidRequest,
    "403": PermissionDenied,
}

AUTOSCALING_CODES: dict[str, type[AWSError]] = {
    "AlreadyExists": AlreadyExists,
    "ResourceContention": Throttled,
    "ScalingActivityInProgress": DependencyViolation,
    "ResourceInUse": DependencyViolation,
    "LimitExceeded": InvalidRequest,
    "ServiceLinkedRoleFailure": InvalidRequest,
}

SERVICE_CODES: dict[str, dict[str, type[AWSError]]] = {
    "autoscaling": AUTOSCALING_CODES,
    "ec2": EC2_CODES,
    "elbv2": ELBV2_CODES,
    "iam": IAM_CODES,
    "sts": STS_CODES,
    "secretsmanager": SECRETSMANAGER_CODES,
    "ssm": SSM_CODES,
    "route53": ROUTE53_CODES,
    "s3": S3_CODES,
}


def classify_code(code: str, http_status: int = 400, service: str = "") -> type[AWSError]:
    """The error type for an AWS error code: the service's table, then the shared one, then the code's
    shape (``*.NotFound``, ``*.Duplicate``) and the HTTP status."""
    mapped = SERVICE_CODES.get(service, {}).get(code) or SHARED_CODES.get(code)
    if mapped is not None:
        return mapped
    if code.endswith((".NotFound", "NotFoundException", "NotFound")):
        return NotFound
    if code.endswith(".Duplicate"):
        return AlreadyExists
    if http_status >= 500:
        return Transient
    if code == "429" or http_status == 429:
        return Throttled
    return InvalidRequest


def classify(exc: Exception, service: str = "", operation: str = "") -> AWSError:
    """Map a botocore exception to the most specific :class:`AWSError`, chaining the cause."""
    if isinstance(exc, AWSError):
        return exc
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", "")) or str(exc)
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400) or 400)
        mapped = classify_code(code, status, service)
        result = mapped(f"{service}:{operation}: {code}: {message}", service, operation, code)
    elif isinstance(exc, NoCredentialsError):
        result = MissingCredentials(
            "no AWS credentials found: configure a profile or environment credentials, "
            "or pass --aws-endpoint local to use the embedded AWS endpoint",
            service,
            operation,
            "NoCredentials",
        )
    elif isinstance(
        exc, EndpointConnectionError | ConnectTimeoutError | ReadTimeoutError | ConnectionClosedError
    ):
        result = Transient(f"{service}:{operation}: {exc}", service, operation, type(exc).__name__)
    elif isinstance(exc, BotoCoreError):
        result = Fatal(f"{service}:{operation}: {exc}", service, operation, type(exc).__name__)
    else:
        result = AWSError(f"{service}:{operation}: {exc}", service, operation, type(exc).__name__)
    result.__cause__ = exc
    return result
