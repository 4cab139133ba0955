"""Fixtures shared by every test package; topic-specific fixtures live next to their tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from capa_py.store import SQLiteStore
from tests.peers.fixtures import capi_cluster, peer_cluster  # the real API server, for every package

__all__ = ["capi_cluster", "peer_cluster"]

settings.register_profile(
    "capa", deadline=None, suppress_health_check=(HealthCheck.too_slow,), print_blob=True
)
settings.load_profile("capa")
"""Property tests check what is generated, not how fast: on a machine shared by several test workers, an
example's run time and the generation of its input vary tenfold, and hypothesis' deadline and its too-slow
health check then fail a test whose property holds."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with slow tests first, the longest first (``slow(minutes=N)``, 1 when unsaid), each file's tests
    in their own order.

    ``make test`` hands whole files to its workers in collection order: a long end-to-end file started last
    would keep one worker busy after the others ran out of work.
    """
    weight: dict[Path, float] = {}
    for item in items:
        marker = item.get_closest_marker("slow")
        minutes = float(marker.kwargs.get("minutes", 1)) if marker else 0.0
        weight[item.path] = max(weight.get(item.path, 0.0), minutes)
    items.sort(key=lambda item: -weight[item.path])


@pytest.fixture(autouse=True)
def _logging_as_the_session_began() -> Iterator[None]:
    """structlog's configuration as it was before the test: a test that configures logging (a command run
    in-process does) must not decide what a later test on the same worker logs or captures (a filtering
    wrapper at warning level hides the info lines ``structlog.testing.capture_logs`` looks for)."""
    import structlog

    saved = structlog.get_config()
    saved["processors"] = list(saved["processors"])
    yield
    structlog.configure(**saved)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """Where the test's SQLite store lives (a fresh file per test)."""
    return tmp_path / "state.db"


@pytest.fixture
def store(store_path: Path) -> Iterator[SQLiteStore]:
    """A real SQLite store with the built-in kinds, closed after the test."""
    with SQLiteStore(store_path) as opened:
        yield opened
