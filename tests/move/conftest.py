"""Fixtures for move tests: two real SQLite stores, ``capa serve`` over a file of its own as a target, and
the shared fixtures of the controller and CLI tests (moto over HTTP, the in-process ``capa``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.store.sqlite import SQLiteStore
from tests.cli.conftest import cli, closed_endpoint, state  # noqa: F401 (shared fixtures)
from tests.cli.served import capa_serve
from tests.controllers.conftest import example, harness, moto_with_amis  # noqa: F401 (shared fixtures)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "source.db")
    yield store
    store.close()


@pytest.fixture
def target(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "target.db")
    yield store
    store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Path]:
    """The kubeconfig of ``capa serve`` running in a process of its own over ``served/served.db``."""
    home = tmp_path / "served"
    home.mkdir()
    with capa_serve(home) as path:
        yield path
