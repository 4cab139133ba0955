"""The moto harness itself: loopback servers, resets, and clients isolated from the developer's AWS setup."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.aws.session import EMULATOR_CREDENTIALS, AWSClients
from resources.vpc import Vpc, VpcDesired
from tests.harness.moto_server import MotoServer
from tests.resources.builders import clients_for


def test_servers_listen_on_loopback(moto_server: MotoServer, moto_token_server: MotoServer) -> None:
    assert moto_server.url.startswith("http://127.0.0.1:")
    assert moto_token_server.url.startswith("http://127.0.0.1:")
    assert (moto_server.honours_tokens, moto_token_server.honours_tokens) == (False, True)
    assert moto_server.alive()
    assert moto_token_server.alive()


def test_reset_empties_the_account(aws: AWSClients, moto_server: MotoServer) -> None:
    vpc = Vpc(aws).create(VpcDesired("10.0.0.0/16"), None, None)
    moto_server.reset()
    assert Vpc(aws).describe_by_id(vpc.id) is None


def test_clients_ignore_the_developers_aws_environment(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A profile that does not exist, real-looking keys and an endpoint override change nothing."""
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREALLOOKINGKEY00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "real-looking-secret")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")

    clients = clients_for(moto_server, tmp_path)

    credentials = clients.ec2.raw._request_signer._credentials
    assert (credentials.access_key, credentials.secret_key) == (
        EMULATOR_CREDENTIALS["aws_access_key_id"],
        EMULATOR_CREDENTIALS["aws_secret_access_key"],
    )
    assert clients.ec2.raw.meta.endpoint_url == moto_server.url
    assert "Vpcs" in clients.ec2.call("DescribeVpcs")
