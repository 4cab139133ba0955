"""The AWS layer: error classification, safe retries, rate limiting, call accounting, logging hygiene."""

from __future__ import annotations

import contextvars
import io
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError, EndpointConnectionError

from capa_py.aws import deadline, errors
from capa_py.aws.accounting import CallCounter, call_scope, is_mutating, record_call
from capa_py.aws.ratelimit import BucketSpec, RateLimiter, operation_class
from capa_py.aws.session import AWSClients, AWSSettings, RetryPolicy, is_safe_to_repeat
from capa_py.logging import REDACTED, configure_logging, get_logger
from tests.harness.moto_server import MotoServer, start_moto_server


def _client_error(code: str, status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Op"
    )


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("RequestLimitExceeded", 503, errors.Throttled),
        ("Throttling", 400, errors.Throttled),
        ("ThrottlingException", 400, errors.Throttled),
        ("InternalError", 500, errors.Transient),
        ("SomethingNew", 503, errors.Transient),
        ("DependencyViolation", 400, errors.DependencyViolation),
        ("InvalidVpcID.NotFound", 400, errors.NotFound),
        ("NatGatewayNotFound", 400, errors.NotFound),
        ("LoadBalancerNotFound", 400, errors.NotFound),
        ("Gateway.NotAttached", 400, errors.NotFound),
        ("InvalidAMIID.NotFound", 400, errors.InvalidRequest),
        ("InvalidGroup.Duplicate", 400, errors.AlreadyExists),
        ("UnauthorizedOperation", 403, errors.PermissionDenied),
        ("InvalidParameterValue", 400, errors.InvalidRequest),
    ],
)
def test_error_codes_map_to_what_the_caller_should_do(code: str, status: int, expected: type) -> None:
    mapped = errors.classify(_client_error(code, status), "ec2", "CreateVpc")
    assert type(mapped) is expected, f"{code} classified as {type(mapped).__name__}"
    assert mapped.code == code
    assert isinstance(mapped.__cause__, ClientError)


def test_connection_errors_are_transient() -> None:
    mapped = errors.classify(
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), "ec2", "DescribeVpcs"
    )
    assert isinstance(mapped, errors.Transient)


def test_only_creates_without_a_token_are_unsafe_to_repeat() -> None:
    assert is_safe_to_repeat("DescribeVpcs", {})
    assert is_safe_to_repeat("DeleteVpc", {"VpcId": "vpc-1"})
    assert is_safe_to_repeat("RunInstances", {"ClientToken": "t"})
    assert not is_safe_to_repeat("RunInstances", {})
    assert not is_safe_to_repeat("CreateVpc", {"CidrBlock": "10.0.0.0/16"})
    assert not is_safe_to_repeat("AllocateAddress", {})


def test_operation_classes_follow_ec2_throttling_buckets() -> None:
    assert operation_class("DescribeSubnets") == "describe"
    assert operation_class("CreateSubnet") == "mutate"
    assert operation_class("RunInstances") == "run_instances"
    assert not is_mutating("GetResources")
    assert is_mutating("AuthorizeSecurityGroupIngress")


def test_a_throttling_response_empties_the_bucket_of_that_class_only() -> None:
    limiter = RateLimiter(
        {"describe": BucketSpec(50, 1), "mutate": BucketSpec(50, 1), "run_instances": BucketSpec(5, 1)}
    )
    limiter.acquire("ec2", "DescribeVpcs")
    limiter.throttled("ec2", "DescribeVpcs")
    assert limiter.bucket("ec2", "DescribeSubnets").tokens < 1
    assert limiter.bucket("ec2", "CreateVpc").tokens > 40
    assert limiter.bucket("elbv2", "DescribeLoadBalancers").tokens > 40


def test_call_scopes_nest_and_follow_copied_contexts_into_threads() -> None:
    outer = CallCounter()
    with call_scope(outer), call_scope() as inner:
        record_call("ec2", "CreateVpc", "ok")
        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(record_call, "ec2", "DescribeVpcs", "ok"))
        thread.start()
        thread.join()
    record_call("ec2", "DeleteVpc", "ok")
    assert inner.by_operation() == {"ec2:CreateVpc": 1, "ec2:DescribeVpcs": 1}
    assert outer.total() == 2
    assert outer.total(mutating=True) == 1


def test_log_records_never_carry_secret_values() -> None:
    buffer = io.StringIO()
    original = sys.stderr
    sys.stderr = buffer
    saved = structlog.get_config()
    try:
        configure_logging("json", 1)
        get_logger("test").info(
            "event", client_token="abc", aws_secret_access_key="s", user_data="x", kind="vpc"
        )
    finally:
        sys.stderr = original
        # Leave structlog as it was: a level filter left behind hides later tests' captured logs.
        structlog.configure(**saved)
    record = json.loads(buffer.getvalue().strip().splitlines()[-1])
    assert record["client_token"] == REDACTED
    assert record["aws_secret_access_key"] == REDACTED
    assert record["user_data"] == REDACTED
    assert record["kind"] == "vpc"


# -- retries against a real server -------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    moto = start_moto_server()
    yield moto
    moto.stop()


@pytest.fixture
def clients(server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AWSClients:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    server.reset()
    retry = RetryPolicy(attempts=5, initial_delay=0.01, max_delay=0.02)
    return AWSClients(AWSSettings(endpoint_url=server.url, retry=retry), RateLimiter(enabled=False))


def _error_response(code: str, status: int) -> AWSResponse:
    body = (
        f"<Response><Errors><Error><Code>{code}</Code><Message>injected</Message></Error></Errors>"
        "<RequestID>r</RequestID></Response>"
    ).encode()
    return AWSResponse("http://127.0.0.1", status, {}, _Raw(body))


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def _fail_first(clients: AWSClients, operation: str, code: str, status: int, times: int) -> list[int]:
    seen: list[int] = []

    def handler(**_: Any) -> AWSResponse | None:
        seen.append(1)
        return _error_response(code, status) if len(seen) <= times else None

    clients.ec2.raw.meta.events.register(f"before-send.ec2.{operation}", handler)
    return seen


def test_throttled_calls_are_retried_until_they_succeed(clients: AWSClients) -> None:
    seen = _fail_first(clients, "CreateVpc", "RequestLimitExceeded", 503, times=2)
    with call_scope() as calls:
        vpc = clients.ec2.call("CreateVpc", CidrBlock="10.0.0.0/16")
    assert vpc["Vpc"]["VpcId"].startswith("vpc-")
    assert len(seen) == 3, "two throttled attempts, then success"
    assert calls.by_outcome() == {"RequestLimitExceeded": 2, "ok": 1}
    assert len(clients.ec2.call("DescribeVpcs")["Vpcs"]) == 2, "one created VPC besides the default one"


def test_a_5xx_on_a_create_without_token_is_not_repeated(clients: AWSClients) -> None:
    seen = _fail_first(clients, "CreateVpc", "InternalError", 500, times=1)
    with pytest.raises(errors.Transient):
        clients.ec2.call("CreateVpc", CidrBlock="10.0.0.0/16")
    assert len(seen) == 1, "an unknown outcome of a create without a token must not be repeated"


def test_a_5xx_on_a_read_is_retried(clients: AWSClients) -> None:
    seen = _fail_first(clients, "DescribeVpcs", "InternalError", 500, times=2)
    assert clients.ec2.call("DescribeVpcs")["Vpcs"]
    assert len(seen) == 3


def test_no_credentials_and_no_endpoint_names_the_local_endpoint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_ENDPOINT_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(errors.MissingCredentials, match="--aws-endpoint local"):
        AWSClients(AWSSettings())


def test_a_request_the_deadline_passes_while_it_is_signed_is_not_sent(clients: AWSClients) -> None:
    # Signing happens after the ``before-call`` check; a deadline passing meanwhile (here: a signer that
    # takes longer than the time left) stops the request as it is about to leave.
    def slow_signing(**_: Any) -> None:
        time.sleep(0.3)

    clients.ec2.raw.meta.events.register_first("request-created.ec2.CreateVpc", slow_signing)
    with (
        call_scope() as calls,
        deadline.aws_deadline(time.monotonic() + 0.1),
        pytest.raises(deadline.DeadlinePassed),
    ):
        clients.ec2.call("CreateVpc", CidrBlock="10.0.0.0/16")
    assert calls.by_outcome() == {}, "a request never sent is not counted as a call"
    assert len(clients.ec2.call("DescribeVpcs")["Vpcs"]) == 1, "only the default VPC: nothing was created"
