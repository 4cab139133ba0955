"""Fixtures for the resource class tests: moto servers over HTTP (or LocalStack) and AWS clients.

* ``moto_server`` (session): a plain moto server subprocess on loopback — moto as it is, gaps included.
* ``moto_token_server`` (session): a moto server that honours ``ClientToken`` as AWS documents it.
* ``aws`` / ``aws_tokens`` (function): :class:`~capa_py.aws.session.AWSClients` for us-east-1 pointed at
  the plain / token-honouring server, after resetting it, so every test starts from an empty account.
* ``build``: a :class:`~tests.resources.builders.Builder` that makes the prerequisites a test needs (a
  VPC, a subnet, an instance…) through the resource classes themselves.
* ``lookup``: ``lookup(role, cluster="alpha")``, the owned + role tags the engine looks resources up by.

The clients never see the developer's AWS environment: they are made with every ``AWS_*`` variable
removed, the shared config and credentials files pointing nowhere and instance metadata off, so
``AWSClients`` falls back to its emulator credentials and no real credential ever reaches a test server.
They are made once per server (making botocore clients costs more than most tests); ``aws`` resets the
server before handing them out.

With ``CAPA_TEST_AWS_ENDPOINT`` set (``make localstack-test``), ``aws`` targets that LocalStack instead,
with clients for a new, empty account per test (LocalStack has no reset: see
``tests/localstack/endpoint.py``), and no moto server is started. Tests that need moto itself (the moto
fixtures, the ClientToken harness, moto's reset) carry the ``requires_moto`` marker and tests that call a
service LocalStack's free edition lacks (ELBv2, Auto Scaling: ``LACKING_SERVICES``) the
``requires_<service>`` marker, set here at collection; both are skipped there, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.aws.errors import InvalidRequest
from capa_py.aws.session import AWSClients
from capa_py.engine.tags import lookup_tags
from tests.harness.fixtures import _plain_clients, _token_clients, aws_tokens, build  # noqa: F401
from tests.harness.moto_server import MotoServer, start_moto_server
from tests.localstack.endpoint import (
    LACKING_SERVICES,
    REQUIRES_MOTO,
    ExternalEndpoint,
    endpoint_url,
)
from tests.resources.builders import CLUSTER

_HERE = Path(__file__).resolve().parent

_MOTO_FIXTURES = frozenset({"moto_server", "moto_token_server", "aws_tokens"})
"""A test asking for any of these needs moto itself."""
_SERVICE_FILES: dict[str, frozenset[str]] = {
    "elbv2": frozenset({"test_resource_load_balancer.py"}),
    "autoscaling": frozenset({"test_resource_machine_pool.py"}),
}
"""Test files whose every AWS test calls the service."""
_SERVICE_TESTS: dict[str, frozenset[str]] = {"elbv2": frozenset({"test_lookups_by_tags_cost"})}
"""Tests elsewhere, and not parametrized by a class of the service, that call it."""
_LOCALSTACK_GAPS: dict[str, tuple[type[BaseException], str]] = {
    # RunInstances' errors are classified with EC2's table, where the IAM code NoSuchEntity falls back to
    # InvalidRequest (the request names what does not exist), not IAM's NotFound.
    "test_resource_instance.py::test_launch_parameters_tags_and_bootstrap_data": (
        InvalidRequest,
        "LocalStack gap: RunInstances does not find an instance profile made with IAM "
        "CreateInstanceProfile (NoSuchEntity, by name or by ARN)",
    ),
}
"""Tests that fail against LocalStack for a gap of LocalStack's: strict xfail there, so that a LocalStack
that closes the gap makes them fail until the entry goes."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"requires_moto: {REQUIRES_MOTO}")
    for service, reason in LACKING_SERVICES.items():
        config.addinivalue_line("markers", f"requires_{service}: {reason}")


def _services_used(item: pytest.Item) -> set[str]:
    """The services LocalStack's free edition lacks that a test calls."""
    if "aws" not in getattr(item, "fixturenames", ()):
        return set()  # talks to no AWS endpoint at all
    name = getattr(item, "originalname", item.name)
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    # A contract case (or a parametrized resource class) whose class talks to the service.
    param_services = {getattr(getattr(p, "cls", p), "service", None) for p in params}
    return {
        service
        for service in LACKING_SERVICES
        if item.path.name in _SERVICE_FILES.get(service, ())
        or name in _SERVICE_TESTS.get(service, ())
        or service in param_services
    }


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    external = endpoint_url() is not None
    for item in items:
        if _HERE not in item.path.parents:
            continue  # this hook sees the whole session's items
        if _MOTO_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.requires_moto)
        for service in sorted(_services_used(item)):
            item.add_marker(getattr(pytest.mark, f"requires_{service}"))
        if not external:
            continue
        lacking = [s for s in LACKING_SERVICES if item.get_closest_marker(f"requires_{s}")]
        if item.get_closest_marker("requires_moto"):
            item.add_marker(pytest.mark.skip(reason=REQUIRES_MOTO))
        elif lacking:
            item.add_marker(pytest.mark.skip(reason=LACKING_SERVICES[lacking[0]]))
        gap = _LOCALSTACK_GAPS.get(f"{item.path.name}::{getattr(item, 'originalname', item.name)}")
        if gap is not None:
            raises, reason = gap
            item.add_marker(pytest.mark.xfail(raises=raises, reason=reason, strict=True))


@pytest.fixture(scope="session")
def external_endpoint(tmp_path_factory: pytest.TempPathFactory) -> ExternalEndpoint | None:
    """The LocalStack named by ``CAPA_TEST_AWS_ENDPOINT``, checked once; None to use moto."""
    url = endpoint_url()
    if url is None:
        return None
    return ExternalEndpoint.connect(url, tmp_path_factory.mktemp("aws-env"))


@pytest.fixture(scope="session")
def moto_server(external_endpoint: ExternalEndpoint | None) -> Iterator[MotoServer]:
    """Plain moto over HTTP on loopback (ignores ClientToken, like moto itself)."""
    if external_endpoint is not None:
        pytest.skip(REQUIRES_MOTO)
    server = start_moto_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_token_server(external_endpoint: ExternalEndpoint | None) -> Iterator[MotoServer]:
    """moto over HTTP on loopback with ClientToken honoured (tests/harness/moto_tokens.py)."""
    if external_endpoint is not None:
        pytest.skip(REQUIRES_MOTO)
    server = start_moto_server(honour_tokens=True)
    yield server
    server.stop()


@pytest.fixture
def aws(request: pytest.FixtureRequest, external_endpoint: ExternalEndpoint | None) -> AWSClients:
    """AWS clients against the plain moto server, which is reset first: every test starts empty.

    Against LocalStack (``CAPA_TEST_AWS_ENDPOINT``): clients for a new account, just as empty."""
    if external_endpoint is not None:
        return external_endpoint.clients()
    server: MotoServer = request.getfixturevalue("moto_server")
    clients: AWSClients = request.getfixturevalue("_plain_clients")
    server.reset()
    return clients


@pytest.fixture
def lookup() -> Any:
    """``lookup(role, cluster=CLUSTER)``: the tags the engine finds a managed resource by."""
    return lambda role, cluster=CLUSTER: lookup_tags(cluster, role)
