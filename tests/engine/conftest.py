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

from collections.abc import Iterator

import pytest

from capa_py.store import SQLiteStore
from tests.engine.support import Faults, FlakyStatusStore, Owner
from tests.harness.fixtures import (  # noqa: F401 - fixtures this package uses
    _plain_clients,
    _token_clients,
    aws,
    aws_tokens,
    build,
    build_tokens,
    moto_server,
    moto_token_server,
)


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
