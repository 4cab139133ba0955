"""Fixtures for the end-to-end tests: the real ``capa`` CLI in subprocesses against a moto server.

* ``e2e_moto`` (session): one plain moto server subprocess on loopback with moto's default AMIs (the
  example manifest launches ``ami-785db401``, one of them), shared by the e2e tests;
* ``endpoint`` (function): that server, reset, as the URL each capa command gets with ``--aws-endpoint``
  (never ``local``: tests do not share the user's embedded endpoint);
* ``capa``: a :class:`~tests.e2e.e2e_support.Capa` with the test's own ``--state`` in ``tmp_path``;
* ``inspector``: plain boto3 clients on the server, to count what capa left there.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.e2e_support import Capa, MotoInspector
from tests.harness.moto_server import MotoServer, start_moto_server


@pytest.fixture(scope="session")
def e2e_moto() -> Iterator[MotoServer]:
    server = start_moto_server(load_default_amis=True)
    yield server
    server.stop()


@pytest.fixture
def endpoint(e2e_moto: MotoServer) -> str:
    assert e2e_moto.alive(), f"the moto server died:\n{e2e_moto.log_tail()}"
    e2e_moto.reset()
    return e2e_moto.url


@pytest.fixture
def capa(tmp_path: Path, endpoint: str) -> Capa:
    return Capa(state=tmp_path / "state.db", endpoint=endpoint)


@pytest.fixture
def inspector(endpoint: str) -> Iterator[MotoInspector]:
    inspector = MotoInspector(endpoint)
    yield inspector
    inspector.close()
