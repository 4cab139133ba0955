"""Fixtures for the orphan audit tests: a moto server over HTTP on loopback, shared by the session.

The building blocks (clients, clusters made by the real controllers, leaks) are in
``tests/audit/helpers.py``; the world with every kind of leak in ``tests/audit/world.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# `tests` is not a package; the helpers are imported as `tests.audit.helpers`, so the project root must be
# importable.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.harness.moto_server import MotoServer, start_moto_server  # noqa: E402


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = start_moto_server()
    yield server
    server.stop()
