"""Fixtures for the engine tests: moto servers over HTTP, the owning AWSCluster in a real store, faults.

* ``moto_server`` / ``moto_token_server`` (session): moto on loopback, plain and with ``ClientToken``
  honoured (``tests.harness``), started here so the engine tests run on their own;
* ``aws`` / ``aws_tokens``: clients for the plain / token-honouring server, reset first (empty account);
* ``build`` / ``build_tokens``: prerequisites (VPCs, subnets, addresses…) made through the resource classes;
* ``flaky_store``: the real SQLite store (``store``, tests/conftest.py) with status writes that fail on
  demand; ``owner``: the AWSCluster in it whose status the engine records into;
* ``faults``: fault injection on the clients' botocore events, all unregistered after the test.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# `tests` is not a package: make the project root importable for `tests.harness` and `tests.engine`.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from capa_py.aws.session import AWSClients  # noqa: E402
from capa_py.store import SQLiteStore  # noqa: E402
from tests.engine.support import Faults, FlakyStatusStore, Owner  # noqa: E402
from tests.harness.moto_server import MotoServer, start_moto_server  # noqa: E402
from tests.resources.builders import Builder, clients_for  # noqa: E402


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = start_moto_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_token_server() -> Iterator[MotoServer]:
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


@pytest.fixture
def flaky_store(store: SQLiteStore) -> FlakyStatusStore:
    return FlakyStatusStore(store)


@pytest.fixture
def owner(flaky_store: FlakyStatusStore) -> Owner:
    """The AWSCluster ``alpha`` whose status records what the engine creates."""
    return Owner.create(flaky_store)


@pytest.fixture
def faults() -> Iterator[Faults]:
    injected = Faults()
    yield injected
    injected.clear()
