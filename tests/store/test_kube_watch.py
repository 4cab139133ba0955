"""The kube store's watch never goes blind: it survives dropped connections and server timeouts without
losing or repeating an event, consumes bookmarks to stay ahead of compaction, and raises Expired on 410.

A TCP proxy between the store and ``capa serve`` cuts the connections mid-stream; writes go straight to the
served SQLite file, so they never depend on the connection being cut.
"""

from __future__ import annotations

import itertools
import queue
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from capa_py.api import Cluster, Secret
from capa_py.apiserver import RunningServer, start_in_thread
from capa_py.store import Expired, SQLiteStore, Unavailable, WatchEvent
from capa_py.store.kube import KubeStore
from tests.store.kube_support import CuttingProxy, api_client_for
from tests.support.eventually import eventually

SAFETY_TIMEOUT = 30.0
BOOKMARK_INTERVAL = 0.2


@dataclass
class Served:
    sqlite: SQLiteStore
    running: RunningServer
    proxy: CuttingProxy
    kube: KubeStore


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve(retain_events=…, watch_connection_seconds=…)``: capa serve over a new SQLite file, a proxy
    in front of it and a kube store talking through the proxy."""
    started: list[Served] = []

    def make(retain_events: int = 100_000, watch_connection_seconds: int = 300) -> Served:
        path = tmp_path / f"served-{len(started)}.db"
        sqlite = SQLiteStore(path, poll_interval=0.02, retain_events=retain_events)
        running = start_in_thread(sqlite, bookmark_interval=BOOKMARK_INTERVAL, insecure_http=True)
        address = urlsplit(running.url)
        proxy = CuttingProxy((address.hostname or "127.0.0.1", address.port or 0))
        kube = KubeStore(
            api_client_for(running, proxy.url), watch_connection_seconds=watch_connection_seconds
        )
        served = Served(sqlite, running, proxy, kube)
        started.append(served)
        return served

    yield make
    for served in started:
        served.kube.close()
        served.proxy.close()
        served.running.stop()
        served.sqlite.close()


class Follower:
    """Iterates a watch in a background thread, queueing every event (or the exception that ended it)."""

    def __init__(self, events: Iterator[WatchEvent[Cluster]]) -> None:
        self.events = events
        self.items: queue.Queue[WatchEvent[Cluster] | BaseException] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.events:
                self.items.put(event)
        except BaseException as exc:
            self.items.put(exc)

    def next(self) -> WatchEvent[Cluster]:
        item = self.items.get(timeout=SAFETY_TIMEOUT)
        if isinstance(item, BaseException):
            raise item
        return item


def new_cluster(name: str) -> Cluster:
    return Cluster.model_validate({"metadata": {"name": name}})


def checkpoint(sqlite: SQLiteStore) -> str:
    sqlite.create(Secret.model_validate({"metadata": {"generateName": "checkpoint-"}}))
    return sqlite.current_resource_version()


def expired(sqlite: SQLiteStore, resource_version: str) -> bool:
    """Whether resuming a watch from ``resource_version`` would meet 410 Gone."""
    try:
        next(sqlite.watch(Cluster, resource_version=resource_version, timeout=0), None)
    except Expired:
        return True
    return False


def resource_versions_asked(proxy: CuttingProxy) -> list[str]:
    return [parse_qs(urlsplit(path).query)["resourceVersion"][0] for path in proxy.watch_requests()]


def wait_for(condition: Callable[[], Any], what: str) -> None:
    eventually(condition, what, timeout=SAFETY_TIMEOUT, interval=0.02)


def test_a_watch_cut_mid_stream_loses_and_repeats_no_event(serve: Callable[..., Served]) -> None:
    served = serve()
    start = checkpoint(served.sqlite)
    follower = Follower(served.kube.watch(Cluster, resource_version=start))
    expected: list[tuple[str, str, str]] = []
    try:
        for batch in range(4):
            for index in range(5):
                created = served.sqlite.create(new_cluster(f"c-{batch}-{index}"))
                expected.append(("ADDED", created.name, created.metadata.resource_version or ""))
            first = served.sqlite.get(Cluster, f"c-{batch}-0")
            first.metadata.labels["batch"] = str(batch)
            modified = served.sqlite.update(first)
            expected.append(("MODIFIED", modified.name, modified.metadata.resource_version or ""))
            deleted = served.sqlite.delete(Cluster, f"c-{batch}-1")
            assert deleted is not None
            expected.append(("DELETED", deleted.name, deleted.metadata.resource_version or ""))
            if batch == 0:
                # Read one event first, so the connection is known to be up before it is cut.
                seen = [follower.next()]
            opened = batch + 1
            wait_for(lambda: len(served.proxy.watch_requests()) >= opened, "the watch's reconnect")  # noqa: B023
            assert served.proxy.cut() >= 1, "there was no connection to cut"

        seen += [follower.next() for _ in range(len(expected) - 1)]

        assert [(e.type, e.object.name, e.resource_version) for e in seen] == expected, (
            "across four dropped connections the watch must deliver every event exactly once, in order"
        )
        assert len(served.proxy.watch_requests()) >= 2, "the watch never reconnected: the test proved nothing"
        served.sqlite.create(new_cluster("after"))
        assert follower.next().object.name == "after", "nothing may be pending twice after the last cut"
    finally:
        served.kube.close()
    follower.thread.join(SAFETY_TIMEOUT)
    assert not follower.thread.is_alive(), "closing the store must end its watches"


def test_a_watch_goes_on_after_the_server_ends_its_connection(serve: Callable[..., Served]) -> None:
    served = serve(watch_connection_seconds=1)
    start = checkpoint(served.sqlite)
    follower = Follower(served.kube.watch(Cluster, resource_version=start))
    try:
        served.sqlite.create(new_cluster("first"))
        assert follower.next().object.name == "first"
        wait_for(lambda: len(served.proxy.watch_requests()) >= 3, "two reconnects after the server's timeout")
        served.sqlite.create(new_cluster("second"))
        event = follower.next()
        assert (event.type, event.object.name) == ("ADDED", "second")
        asked = resource_versions_asked(served.proxy)
        assert all(int(b) >= int(a) for a, b in itertools.pairwise(asked)), (
            f"each connection must resume where the last one was, asked {asked}"
        )
    finally:
        served.kube.close()


def test_bookmarks_advance_the_watch_so_compaction_does_not_expire_it(serve: Callable[..., Served]) -> None:
    served = serve(retain_events=5)
    start = checkpoint(served.sqlite)
    created = served.sqlite.create(new_cluster("first"))
    follower = Follower(served.kube.watch(Cluster, resource_version=start))
    try:
        assert follower.next().object.name == "first"
        # Writes of another kind, one at a time (each followed by a bookmark at it), until the version of
        # the last event is compacted away: the watched kind stays quiet, only bookmarks move the watch.
        for _ in range(50):
            head = checkpoint(served.sqlite)
            # Once relayed, the bookmark reaches the store before the end of the connection does.
            at = int(head)
            wait_for(lambda: any(b >= at for b in served.proxy.bookmarks), "a bookmark at the head")  # noqa: B023
            if expired(served.sqlite, created.metadata.resource_version or ""):
                break
        assert expired(served.sqlite, created.metadata.resource_version or ""), "the store never compacted"
        served.proxy.cut()
        served.sqlite.create(new_cluster("second"))

        event = follower.next()

        assert (event.type, event.object.name) == ("ADDED", "second"), "the watch must not expire"
        resumed_from = resource_versions_asked(served.proxy)[-1]
        assert int(resumed_from) >= int(head), (
            f"the reconnect must resume from the last bookmark ({head} or later), not {resumed_from}"
        )
    finally:
        served.kube.close()


def test_a_watch_from_a_compacted_version_raises_expired(serve: Callable[..., Served]) -> None:
    served = serve(retain_events=5)
    cluster = served.sqlite.create(new_cluster("demo"))
    created_at = cluster.metadata.resource_version
    for step in range(20):
        cluster.metadata.annotations["step"] = str(step)
        cluster = served.sqlite.update(cluster)

    with pytest.raises(Expired):
        next(served.kube.watch(Cluster, resource_version=created_at, timeout=SAFETY_TIMEOUT))

    recent = str(int(served.sqlite.current_resource_version()) - 2)
    assert len(list(served.kube.watch(Cluster, resource_version=recent, timeout=0))) == 2, (
        "a recent resourceVersion must still be watchable"
    )


def test_a_watch_with_a_timeout_returns_when_it_is_over(serve: Callable[..., Served]) -> None:
    served = serve()
    start = checkpoint(served.sqlite)
    served.sqlite.create(new_cluster("demo"))

    events = list(served.kube.watch(Cluster, resource_version=start, timeout=1.0))

    assert [(e.type, e.object.name) for e in events] == [("ADDED", "demo")]


def test_a_watch_on_a_server_that_drops_every_connection_gives_up_unavailable() -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def refuse() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    threading.Thread(target=refuse, daemon=True).start()
    address = f"http://127.0.0.1:{listener.getsockname()[1]}"
    store = KubeStore(api_client_for(address), watch_reconnect_attempts=2)
    try:
        with pytest.raises(Unavailable):
            next(store.watch(Cluster, resource_version="1", timeout=SAFETY_TIMEOUT))
    finally:
        store.close()
        listener.close()
