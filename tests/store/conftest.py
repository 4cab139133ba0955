"""The store contract: every test here that asks for ``store`` runs against each store — the SQLite file,
and the kube store talking over HTTP to ``capa serve`` (serving a SQLite file of its own) — except in the
modules that test SQLite's own machinery (WAL, several processes on one file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.apiserver import start_in_thread
from capa_py.store import SQLiteStore
from capa_py.store.kube import KubeStore
from capa_py.store.protocol import ObjectStore
from tests.store.kube_support import api_client_for

BACKENDS = ("sqlite", "kube")
SQLITE_ONLY = {"test_store_multiprocess", "test_store_apply_race"}
BOOKMARK_INTERVAL = 0.2


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_backend" in metafunc.fixturenames:
        module = metafunc.module.__name__.rpartition(".")[2]
        backends = ["sqlite"] if module in SQLITE_ONLY else list(BACKENDS)
        metafunc.parametrize("store_backend", backends)


@pytest.fixture
def store(store_backend: str, store_path: Path) -> Iterator[ObjectStore]:
    """A fresh, empty store of each kind, closed after the test."""
    if store_backend == "sqlite":
        with SQLiteStore(store_path) as opened:
            yield opened
        return
    served = SQLiteStore(store_path, poll_interval=0.02)
    running = start_in_thread(served, bookmark_interval=BOOKMARK_INTERVAL)
    kube = KubeStore(api_client_for(running.url))
    try:
        yield kube
    finally:
        kube.close()
        running.stop()
        served.close()
