"""Pointing the AWS test fixtures at an external endpoint (LocalStack) instead of a moto subprocess.

``CAPA_TEST_AWS_ENDPOINT`` (``http://127.0.0.1:4566``, say) names a running LocalStack; ``make
localstack-test`` starts one and sets it. Unset, the fixtures start moto servers as usual.

LocalStack's free edition has no state reset (``POST /_localstack/state/reset`` answers 404, and its
``/moto-api/reset`` answers 200 but leaves EC2 as it was), so a test cannot start from an emptied
account. It starts from a *new* one instead: LocalStack takes a 12-digit access key id as the account id,
and every account starts empty but for its default VPC, as an account in AWS does. :class:`ExternalEndpoint`
hands out clients switched to a fresh account for every test.

Imported as ``tests.localstack.endpoint`` (the conftests make the project root importable).
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from capa_py.aws.ratelimit import RateLimiter
from capa_py.aws.session import AWSClients, AWSSettings, RetryPolicy

ENDPOINT_VARIABLE = "CAPA_TEST_AWS_ENDPOINT"
REGION = "us-east-1"
SERVICES = ("ec2", "secretsmanager")
"""Clients made up front, in the clean environment (others, IAM's and ELBv2's, on first use)."""

# A test that needs moto itself, or ELBv2, cannot run against LocalStack's free edition: these say why.
REQUIRES_MOTO = (
    "moto-only: needs a moto server subprocess of its own (its /moto-api/reset, or the harness server "
    "that honours ClientToken); not available with " + ENDPOINT_VARIABLE
)
REQUIRES_ELBV2 = (
    "needs ELBv2: LocalStack's free edition answers every ELBv2 call with InternalFailure "
    "('not included in your current license plan')"
)
REQUIRES_AUTOSCALING = (
    "needs Auto Scaling: LocalStack's free edition does not include the autoscaling service "
    "('not included in your current license plan')"
)
LACKING_SERVICES: dict[str, str] = {"elbv2": REQUIRES_ELBV2, "autoscaling": REQUIRES_AUTOSCALING}
"""Services LocalStack's free edition lacks, each with the reason a test that calls it is skipped there."""
NEEDS_LOCALSTACK = f"needs a running LocalStack: set {ENDPOINT_VARIABLE} (make localstack-test does)"

# Retries as the resource tests use them: LocalStack answers at once, like moto.
RETRY = RetryPolicy(attempts=2, initial_delay=1.0, max_delay=1.0, not_found_window=1.0)


def endpoint_url() -> str | None:
    """The external endpoint the AWS tests target, or None for moto."""
    value = os.environ.get(ENDPOINT_VARIABLE, "").strip()
    return value.rstrip("/") or None


def _get_json(url: str, timeout: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        data = json.loads(response.read().decode())
    if not isinstance(data, dict):
        raise ValueError(f"{url} did not answer a JSON object")
    return data


@dataclass
class ExternalEndpoint:
    """A running LocalStack the tests share; each test gets clients for an account of its own."""

    url: str
    version: str
    scratch: Path
    _accounts: itertools.count[int] = field(default_factory=lambda: itertools.count(1), repr=False)
    _prefix: int = field(default_factory=lambda: 100 + secrets.randbelow(900), repr=False)
    _clients: AWSClients | None = field(default=None, repr=False)

    @classmethod
    def connect(cls, url: str, scratch: Path) -> ExternalEndpoint:
        """Check that ``url`` is a LocalStack serving EC2; fail the session with the reason if not."""
        try:
            health = _get_json(f"{url}/_localstack/health")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            problem = str(exc)
        else:
            problem = ""
        if problem:
            pytest.fail(
                f"{ENDPOINT_VARIABLE}={url}: no LocalStack answers /_localstack/health ({problem})",
                pytrace=False,
            )
        state = health.get("services", {}).get("ec2")
        if state not in ("available", "running"):
            pytest.fail(f"{ENDPOINT_VARIABLE}={url}: LocalStack's ec2 is {state!r}", pytrace=False)
        return cls(url, str(health.get("version", "unknown")), scratch)

    def new_account(self) -> str:
        """A 12-digit account id not used before in this session (LocalStack starts it empty)."""
        return f"{self._prefix:03d}{next(self._accounts):09d}"

    def clients(self) -> AWSClients:
        """The session's clients, switched to a new, empty account.

        Making botocore clients costs 0.2-0.5 s (more than most tests), so one set serves every test and
        only the access key id — the account, for LocalStack — changes. The switch relies on botocore
        signing every request with the session's credentials object, which :meth:`_make_clients` checks
        once by asking two accounts who owns their default security group."""
        if self._clients is None:
            self._clients = self._make_clients()
        self._switch(self._clients, self.new_account())
        return self._clients

    @staticmethod
    def _switch(clients: AWSClients, account: str) -> None:
        credentials = clients.session.get_credentials()
        assert credentials is not None
        credentials.access_key = account

    def _owner(self, clients: AWSClients, account: str) -> str:
        self._switch(clients, account)
        groups = clients.ec2.call("DescribeSecurityGroups")["SecurityGroups"]
        return str(groups[0]["OwnerId"]) if groups else ""

    def _make_clients(self) -> AWSClients:
        """Clients made with no trace of the developer's AWS configuration: every ``AWS_*`` variable
        removed, config files pointing nowhere, no instance metadata."""
        with pytest.MonkeyPatch.context() as monkeypatch:
            for name in list(os.environ):
                if name.startswith("AWS_"):
                    monkeypatch.delenv(name)
            monkeypatch.setenv("AWS_CONFIG_FILE", str(self.scratch / "no-aws-config"))
            monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(self.scratch / "no-aws-credentials"))
            monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
            # LocalStack reads the account id from the access key id; the secret is not checked.
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", self.new_account())
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
            settings = AWSSettings(region=REGION, endpoint_url=self.url, retry=RETRY)
            clients = AWSClients(settings, limiter=RateLimiter(enabled=False))
            for service in SERVICES:
                clients.client(service)
        first, second = self.new_account(), self.new_account()
        owners = (self._owner(clients, first), self._owner(clients, second))
        if owners != (first, second):
            pytest.fail(
                f"switching the access key did not switch the LocalStack account: accounts {first}, "
                f"{second} answered as {owners}",
                pytrace=False,
            )
        return clients
