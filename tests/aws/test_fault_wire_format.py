"""The fault harness answers an injected error in the wire format of the service called, so botocore reads
the code the test meant: EC2's XML, the query protocol's XML, or the JSON protocol's body that Secrets
Manager speaks (``{"__type": ...}``, ``application/x-amz-json-1.1``). An XML body sent to a JSON client is
read as an error without its code, which the error classes call a bad request: a throttled ``CreateSecret``
would then fail a machine for good instead of being retried."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.aws import errors
from capa_py.aws.accounting import call_scope
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSClients, AWSSettings, RetryPolicy, register_client_hook
from tests.harness.faults import FailRule, Faults
from tests.harness.moto_server import MotoServer, start_moto_server


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    moto = start_moto_server()
    yield moto
    moto.stop()


@pytest.fixture
def faulty(
    server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[Faults, AWSClients]]:
    """Clients made with the fault harness's hooks on (a ``Faults`` the test fills in)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    server.reset()
    faults = Faults()
    unregister = register_client_hook(faults.client_hook)
    retry = RetryPolicy(attempts=5, initial_delay=0.01, max_delay=0.02)
    try:
        yield (
            faults,
            AWSClients(AWSSettings(endpoint_url=server.url, retry=retry), RateLimiter(enabled=False)),
        )
    finally:
        unregister()


def test_a_throttled_create_secret_is_read_as_throttling_and_retried(
    faulty: tuple[Faults, AWSClients],
) -> None:
    faults, aws = faulty
    faults.fail_rules.append(FailRule("CreateSecret", "ThrottlingException", remaining=2))
    secrets = aws.client("secretsmanager")

    with call_scope() as calls:
        created = secrets.call("CreateSecret", Name="aws.cluster.x-k8s.io/wire-0", SecretBinary=b"data")

    assert created["Name"] == "aws.cluster.x-k8s.io/wire-0"
    assert calls.by_outcome() == {"ThrottlingException": 2, "ok": 1}, "read as throttling, then retried"


def test_random_throttling_of_a_json_service_uses_its_code(faulty: tuple[Faults, AWSClients]) -> None:
    faults, aws = faulty
    faults.throttle_rate = 1.0
    with pytest.raises(errors.Throttled) as raised:
        aws.client("secretsmanager").call("ListSecrets")
    assert raised.value.code == "ThrottlingException"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("ResourceExistsException", errors.AlreadyExists),
        ("ResourceNotFoundException", errors.NotFound),
        ("InternalServiceError", errors.Transient),
        ("AccessDeniedException", errors.PermissionDenied),
    ],
)
def test_injected_secrets_manager_errors_keep_their_code(
    faulty: tuple[Faults, AWSClients], code: str, expected: type[errors.AWSError]
) -> None:
    faults, aws = faulty
    faults.fail_rules.append(FailRule("DescribeSecret", code))
    with pytest.raises(expected) as raised:
        aws.client("secretsmanager").call("DescribeSecret", SecretId="aws.cluster.x-k8s.io/wire-0")
    assert raised.value.code == code


def test_ec2_errors_still_come_as_ec2_xml(faulty: tuple[Faults, AWSClients]) -> None:
    faults, aws = faulty
    faults.fail_rules.append(FailRule("DescribeVpcs", "InvalidVpcID.NotFound", remaining=1))
    with pytest.raises(errors.NotFound) as raised:
        aws.ec2.call("DescribeVpcs", VpcIds=["vpc-0123456789abcdef0"])
    assert raised.value.code == "InvalidVpcID.NotFound"
