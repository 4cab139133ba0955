"""The moto fixtures the AWS test packages share, defined once.

A package's ``conftest.py`` imports the ones it uses (importing a fixture into a conftest registers it
there, with that package's own session cache), and may define its own ``moto_server`` first — the
resource tests do, to target LocalStack instead — which the imported fixtures then depend on.

* ``moto_server`` / ``moto_token_server`` (session): moto on loopback, plain and with ``ClientToken``
  honoured (``tests/harness/moto_tokens.py``);
* ``aws`` / ``aws_tokens``: clients for the plain / token-honouring server, reset first (empty account);
* ``build`` / ``build_tokens``: prerequisites made through the resource classes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from capa_py.aws.session import AWSClients
from tests.harness.moto_server import MotoServer, start_moto_server
from tests.resources.builders import Builder, clients_for


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """Plain moto over HTTP on loopback (ignores ClientToken, like moto itself)."""
    server = start_moto_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_token_server() -> Iterator[MotoServer]:
    """moto over HTTP on loopback with ClientToken honoured."""
    server = start_moto_server(honour_tokens=True)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _plain_clients(moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> AWSClients:
    return clients_for(moto_server, tmp_path_factory.mktemp("aws-env"))


@pytest.fixture(scope="session")
def _token_clients(moto_token_server: MotoServer, tmp_path_factory: pytest.TempPathFactory) -> AWSClients:
    return clients_for(moto_token_server, tmp_path_factory.mktemp("aws-env"))


@pytest.fixture
def aws(moto_server: MotoServer, _plain_clients: AWSClients) -> AWSClients:
    """Clients against plain moto, reset first: every test starts from an empty account."""
    moto_server.reset()
    return _plain_clients


@pytest.fixture
def aws_tokens(moto_token_server: MotoServer, _token_clients: AWSClients) -> AWSClients:
    """Clients against the ClientToken-honouring moto, reset first."""
    moto_token_server.reset()
    return _token_clients


@pytest.fixture
def build(aws: AWSClients) -> Builder:
    return Builder(aws)


@pytest.fixture
def build_tokens(aws_tokens: AWSClients) -> Builder:
    return Builder(aws_tokens)
