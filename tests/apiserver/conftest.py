"""An API server over a fresh SQLite store per test, on 127.0.0.1 with a free port, and clients for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from capa_py.apiserver import start_in_thread
from capa_py.store import SQLiteStore
from tests.apiserver.apiserver_support import BOOKMARK_INTERVAL, Server, ServerFactory


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """``make_server(max_watches=64, **store_options)``: a server over a new store; every one is stopped
    after the test."""
    started: list[Server] = []

    def make(max_watches: int = 64, **store_options: Any) -> Server:
        store = SQLiteStore(tmp_path / f"state-{len(started)}.db", poll_interval=0.02, **store_options)
        running = start_in_thread(store, bookmark_interval=BOOKMARK_INTERVAL, max_watches=max_watches)
        server = Server(running, store)
        started.append(server)
        return server

    yield make
    for server in started:
        server.running.stop()
        server.store.close()


@pytest.fixture
def server(make_server: ServerFactory) -> Server:
    return make_server()


@pytest.fixture
def api(server: Server) -> Iterator[client.ApiClient]:
    with server.api_client() as api_client:
        yield api_client


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)
