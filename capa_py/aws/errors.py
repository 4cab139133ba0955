"""AWS error classification: one place that turns botocore errors into types the code branches on.

``AWSError``
 ├─ ``Retryable``            try again with backoff
 │   ├─ ``Throttled``         the API asked us to slow down (RequestLimitExceeded, Throttling, …)
 │   ├─ ``Transient``         5xx, timeouts, connection resets
 │   └─ ``DependencyViolation`` a delete raced a dependent that is still going away
 ├─ ``NotFound``             the resource does not exist (drift, or eventual consistency after a create)
 ├─ ``AlreadyExists``        a natural key (name, rule, route) is taken
 └─ ``Fatal``                retrying cannot help: permission, validation, quota, a bad AMI
     ├─ ``PermissionDenied``
     └─ ``InvalidRequest``

Each error keeps the service, operation and error code, and chains the botocore exception.
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


class MissingCredentials(Fatal):
    """No credentials and no endpoint: nothing to talk to."""


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
        "IDPCommunicationError",
        "InsufficientInstanceCapacity",
        "InsufficientAddressCapacity",
        "EC2ThrottledException",
    }
)

DEPENDENCY_CODES = frozenset({"DependencyViolation", "ResourceInUse", "InvalidIPAddress.InUse"})

NOT_FOUND_CODES = frozenset(
    {
        "NatGatewayNotFound",
        "LoadBalancerNotFound",
        "TargetGroupNotFound",
        "ListenerNotFound",
        "ResourceNotFoundException",
        "NoSuchEntity",
        "InvalidTarget",
        "Gateway.NotAttached",
    }
)

ALREADY_EXISTS_CODES = frozenset(
    {
        "InvalidGroup.Duplicate",
        "DuplicateLoadBalancerName",
        "DuplicateTargetGroupName",
        "DuplicateListener",
        "RouteAlreadyExists",
        "InvalidPermission.Duplicate",
        "Resource.AlreadyAssociated",
        "EntityAlreadyExists",
        "AlreadyExists",
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
    }
)

# Not-found codes that name something the *request* refers to (a bad AMI, a missing key pair): user
# errors, not drift of a resource we recorded.
FATAL_NOT_FOUND_CODES = frozenset(
    {"InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidKeyPair.NotFound", "InvalidAMIID.Unavailable"}
)


def classify_code(code: str, http_status: int = 400) -> type[AWSError]:
    """The error type for an AWS error code (and HTTP status when the code is unknown)."""
    if code in THROTTLING_CODES:
        return Throttled
    if code in TRANSIENT_CODES:
        return Transient
    if code in DEPENDENCY_CODES:
        return DependencyViolation
    if code in FATAL_NOT_FOUND_CODES:
        return InvalidRequest
    if code in NOT_FOUND_CODES or code.endswith((".NotFound", "NotFoundException", "NotFound")):
        return NotFound
    if code in ALREADY_EXISTS_CODES or code.endswith(".Duplicate"):
        return AlreadyExists
    if code in PERMISSION_CODES:
        return PermissionDenied
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
        mapped = classify_code(code, status)
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
