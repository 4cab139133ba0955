"""Fixtures for the resource class tests: moto servers over HTTP and AWS clients pointed at them.

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
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# `tests` is not a package and pytest puts only test directories on sys.path; the harness is imported
# as `tests.harness`, so the project root must be importable.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from capa_py.aws.session import AWSClients  # noqa: E402
from capa_py.engine.tags import lookup_tags  # noqa: E402
from tests.harness.moto_server import MotoServer, start_moto_server  # noqa: E402
from tests.resources.builders import CLUSTER, Builder, clients_for  # noqa: E402


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """Plain moto over HTTP on loopback (ignores ClientToken, like moto itself)."""
    server = start_moto_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_token_server() -> Iterator[MotoServer]:
    """moto over HTTP on loopback with ClientToken honoured (tests/harness/moto_tokens.py)."""
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
    """AWS clients against the plain moto server, which is reset first: every test starts empty."""
    moto_server.reset()
    return _plain_clients


@pytest.fixture
def aws_tokens(moto_token_server: MotoServer, _token_clients: AWSClients) -> AWSClients:
    """AWS clients against the token-honouring moto server, which is reset first."""
    moto_token_server.reset()
    return _token_clients


@pytest.fixture
def build(aws: AWSClients) -> Builder:
    return Builder(aws)


@pytest.fixture
def lookup() -> Any:
    """``lookup(role, cluster=CLUSTER)``: the tags the engine finds a managed resource by."""
    return lambda role, cluster=CLUSTER: lookup_tags(cluster, role)
