"""Fixtures for the orphan audit tests: a moto server over HTTP on loopback, shared by the session.

The building blocks (clients, clusters made by the real controllers, leaks) are in
``tests/audit/helpers.py``; the world with every kind of leak in ``tests/audit/world.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.moto_server import MotoServer, start_moto_server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = start_moto_server()
    yield server
    server.stop()
