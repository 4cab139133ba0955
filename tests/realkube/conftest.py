"""Fixtures of the real-API-server tests: a moto server as AWS, reset for each test that asks for it.

The control planes themselves come from ``tests.peers`` (the session's ``peer_cluster``, or a dedicated one
from ``tests.peers.cluster.running`` where a test needs its own audit log or flags).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.e2e_support import MotoInspector
from tests.harness.moto_server import MotoServer, start_moto_server


@pytest.fixture(scope="session")
def realkube_moto() -> Iterator[MotoServer]:
    """One moto server with moto's default AMIs (the example launches one of them)."""
    server = start_moto_server(load_default_amis=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def aws(realkube_moto: MotoServer) -> str:
    """The moto server's URL, reset for the module (a module runs one scenario against it)."""
    assert realkube_moto.alive(), f"the moto server died:\n{realkube_moto.log_tail()}"
    realkube_moto.reset()
    return realkube_moto.url


@pytest.fixture(scope="module")
def inspector(aws: str) -> Iterator[MotoInspector]:
    inspector = MotoInspector(aws)
    yield inspector
    inspector.close()
