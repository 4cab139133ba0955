"""Call accounting records ``service:Operation`` and the outcome for every way a call can end."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from capa_py.aws import errors
from capa_py.aws.accounting import CallKey, call_scope
from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSClients, AWSSettings, RetryPolicy, operation_of_event
from tests.harness.moto_server import MotoServer, start_moto_server

_RETRY = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.02)


@pytest.fixture(autouse=True)
def _no_developer_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))


@pytest.fixture
def closed_clients() -> AWSClients:
    """Clients whose endpoint is a loopback port nothing listens on: every call is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = AWSSettings(endpoint_url=f"http://127.0.0.1:{port}", retry=_RETRY, connect_timeout=1.0)
    return AWSClients(settings, RateLimiter(enabled=False))


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    moto = start_moto_server()
    yield moto
    moto.stop()


@pytest.fixture
def clients(server: MotoServer) -> AWSClients:
    server.reset()
    return AWSClients(AWSSettings(endpoint_url=server.url, retry=_RETRY), RateLimiter(enabled=False))


def test_a_refused_connection_is_recorded_under_the_operation_it_was_for(closed_clients: AWSClients) -> None:
    with call_scope() as calls, pytest.raises(errors.Transient):
        closed_clients.ec2.call("DescribeVpcs")
    assert calls.snapshot() == {CallKey("ec2", "DescribeVpcs", "EndpointConnectionError"): _RETRY.attempts}
    assert calls.by_operation() == {"ec2:DescribeVpcs": _RETRY.attempts}
    assert calls.total(mutating=True) == 0, "a failed read is not a mutating call"


def test_a_refused_create_counts_once_as_the_mutating_call_it_was(closed_clients: AWSClients) -> None:
    with call_scope() as calls, pytest.raises(errors.Transient):
        closed_clients.ec2.call("CreateVpc", CidrBlock="10.0.0.0/16")
    assert calls.mutating_operations() == {"ec2:CreateVpc": 1}
    with call_scope() as calls, pytest.raises(errors.Transient):
        closed_clients.elbv2.call("DescribeLoadBalancers")
    assert set(calls.by_operation()) == {"elbv2:DescribeLoadBalancers"}


def test_ok_and_error_codes_are_recorded_per_operation(clients: AWSClients) -> None:
    with call_scope() as calls:
        clients.ec2.call("DescribeVpcs")
        with pytest.raises(errors.NotFound):
            clients.ec2.call("DescribeVpcs", VpcIds=["vpc-0123456789abcdef0"])
    assert calls.snapshot() == {
        CallKey("ec2", "DescribeVpcs", "ok"): 1,
        CallKey("ec2", "DescribeVpcs", "InvalidVpcID.NotFound"): 1,
    }


def test_a_call_throttled_on_every_attempt_records_each_attempt(clients: AWSClients) -> None:
    def throttle(**_: Any) -> AWSResponse:
        body = (
            b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>slow down</Message>"
            b"</Error></Errors><RequestID>r</RequestID></Response>"
        )
        return AWSResponse("http://127.0.0.1", 503, {}, _Raw(body))

    clients.ec2.raw.meta.events.register("before-send.ec2.CreateVpc", throttle)
    try:
        with call_scope() as calls, pytest.raises(errors.Throttled):
            clients.ec2.call("CreateVpc", CidrBlock="10.0.0.0/16")
    finally:
        clients.ec2.raw.meta.events.unregister("before-send.ec2.CreateVpc", throttle)
    assert calls.snapshot() == {CallKey("ec2", "CreateVpc", "RequestLimitExceeded"): _RETRY.attempts}


def test_operation_of_an_event_name() -> None:
    assert operation_of_event("after-call-error.ec2.CreateVpc") == "CreateVpc"
    assert operation_of_event("after-call-error.elastic-load-balancing-v2.CreateTargetGroup") == (
        "CreateTargetGroup"
    )
    assert operation_of_event("after-call-error") == "Unknown"


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body
