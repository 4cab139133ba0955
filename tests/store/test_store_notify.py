"""A store file signals its commits to the other processes reading it: a watch wakes on another process's
write instead of polling for it, and falls back to polling where no signal can be sent.

The watches here poll once a minute at most (``poll_interval`` and the fallback set to 60 s) and the
tests wait 20 s for an event: an event that arrives came through the signal, not through a poll. The
writers are real processes (``spawn``), each opening its own store on the file.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import tempfile
import threading
from multiprocessing.context import SpawnContext
from pathlib import Path

import pytest

import capa_py.store.sqlite_notify as notify
import capa_py.store.sqlite_watch as sqlite_watch
from capa_py.api import Cluster
from capa_py.store import SQLiteStore
from capa_py.store.protocol import change_signal_of

SAFETY_TIMEOUT = 60.0
GIVE_UP = 20.0
"""How long a test waits for an event; the watches themselves would poll only after a minute."""
WATCH_TIMEOUT = 300.0


@pytest.fixture
def spawn() -> SpawnContext:
    return multiprocessing.get_context("spawn")


@pytest.fixture
def no_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_watch, "FALLBACK_SECONDS", 60.0)


def create_cluster(path: str, name: str) -> None:
    with SQLiteStore(path) as store:
        store.create(Cluster.model_validate({"metadata": {"name": name}}))


def watch_then_exit(path: str, ready: object) -> None:
    with SQLiteStore(path) as store:
        list(store.watch(Cluster, resource_version=store.current_resource_version(), timeout=0))
        assert store.change_signal().listening
        ready.set()  # type: ignore[attr-defined]


def _sockets(signal: notify.ChangeSignal) -> list[str]:
    directory = signal._socket_directory()
    assert directory is not None
    return sorted(os.listdir(directory)) if directory.exists() else []


class Watching:
    """A watch of Clusters read in a thread, from now on; ``received`` holds the names it saw."""

    def __init__(self, store: SQLiteStore) -> None:
        self.stop = threading.Event()
        events = store.watch(
            Cluster, resource_version=store.current_resource_version(), timeout=WATCH_TIMEOUT, stop=self.stop
        )
        self.received: list[str] = []
        self.reader = threading.Thread(target=lambda: self.received.extend(e.object.name for e in events))
        self.reader.start()
        signal = store.change_signal()
        for _ in range(200):  # the watch listens just before its first read of the table
            if signal.listening:
                break
            threading.Event().wait(0.05)
        assert signal.listening
        threading.Event().wait(0.5)  # and waits once that read is done

    def first(self) -> list[str]:
        """What arrived within :data:`GIVE_UP` seconds; the watch is stopped."""
        for _ in range(int(GIVE_UP / 0.05)):
            if self.received:
                break
            threading.Event().wait(0.05)
        self.stop.set()
        self.reader.join(SAFETY_TIMEOUT)
        return self.received


def test_a_watch_wakes_on_another_process_commit_without_polling(
    tmp_path: Path, spawn: SpawnContext, no_polling: None
) -> None:
    path = tmp_path / "state.db"
    with SQLiteStore(path, poll_interval=60.0) as store:
        watching = Watching(store)
        child = spawn.Process(target=create_cluster, args=(str(path), "from-child"))
        child.start()
        child.join(SAFETY_TIMEOUT)
        assert child.exitcode == 0
        assert watching.first() == ["from-child"]


def test_a_process_that_watched_leaves_no_socket_and_a_dead_ones_socket_is_removed(
    tmp_path: Path, spawn: SpawnContext
) -> None:
    path = tmp_path / "state.db"
    with SQLiteStore(path) as store:
        signal = store.change_signal()
        ready = spawn.Event()
        child = spawn.Process(target=watch_then_exit, args=(str(path), ready))
        child.start()
        child.join(SAFETY_TIMEOUT)
        assert child.exitcode == 0
        assert ready.is_set()
        assert _sockets(signal) == []  # removed when the child exited
        # A process killed while watching leaves its socket: the next commit finds nobody there, removes it.
        directory = signal._socket_directory()
        assert directory is not None
        directory.mkdir(mode=0o700, exist_ok=True)
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        dead.bind(str(directory / "999999-dead.sock"))
        dead.close()
        assert _sockets(signal) == ["999999-dead.sock"]
        store.create(Cluster.model_validate({"metadata": {"name": "after"}}))
        assert not directory.exists(), "the dead socket and its emptied directory are removed"


def test_a_new_reader_sweeps_what_killed_readers_of_other_stores_left(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "gone.db") as gone:
        directory = gone.change_signal()._socket_directory()
    assert directory is not None
    directory.mkdir(mode=0o700, exist_ok=True)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(directory / "999998-dead.sock"))
    dead.close()
    with SQLiteStore(tmp_path / "state.db") as store:
        list(store.watch(Cluster, resource_version=store.current_resource_version(), timeout=0))
        assert store.change_signal().listening
    assert not directory.exists()


def test_without_a_private_directory_watches_poll_and_still_see_other_processes(
    tmp_path: Path, spawn: SpawnContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    (shared_tmp / f"capa-py-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(shared_tmp / f"capa-py-{os.getuid()}", 0o777)  # not private: someone else could bind there
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(shared_tmp))
    path = tmp_path / "state.db"
    with SQLiteStore(path, poll_interval=0.05) as store:
        start = store.current_resource_version()
        events = store.watch(Cluster, resource_version=start, timeout=GIVE_UP)
        child = spawn.Process(target=create_cluster, args=(str(path), "polled"))
        child.start()
        try:
            first = next(events, None)
        finally:
            child.join(SAFETY_TIMEOUT)
            events.close()
        assert first is not None
        assert first.object.name == "polled"
        assert not store.change_signal().listening
        assert os.listdir(shared_tmp / f"capa-py-{os.getuid()}") == []


def test_stores_on_one_file_in_one_process_share_the_signal(tmp_path: Path, no_polling: None) -> None:
    path = tmp_path / "state.db"
    with SQLiteStore(path, poll_interval=60.0) as watching, SQLiteStore(path) as writing:
        assert change_signal_of(watching) is change_signal_of(writing)
        watch = Watching(watching)
        writing.create(Cluster.model_validate({"metadata": {"name": "same-process"}}))
        assert watch.first() == ["same-process"]


def test_a_forked_child_listens_for_itself_and_leaves_the_parents_socket(tmp_path: Path) -> None:
    fork = multiprocessing.get_context("fork")
    path = tmp_path / "state.db"
    with SQLiteStore(path) as store:
        list(store.watch(Cluster, resource_version=store.current_resource_version(), timeout=0))
        signal = store.change_signal()
        parents = _sockets(signal)
        assert len(parents) == 1
        child = fork.Process(target=watch_then_exit, args=(str(path), fork.Event()))
        child.start()
        child.join(SAFETY_TIMEOUT)
        assert child.exitcode == 0
        sockets = _sockets(signal)
        assert parents[0] in sockets, "the child did not remove its parent's socket"
        assert len(sockets) == 2, "the child bound a socket of its own"
        # A forked multiprocessing child ends without exit handlers: the next commit finds its socket dead.
        store.create(Cluster.model_validate({"metadata": {"name": "after"}}))
        assert _sockets(signal) == parents


def _notify_threads(signal: notify.ChangeSignal) -> int:
    """The receiving threads of this store file's signal (other tests' stores may be stopping theirs)."""
    directory = signal._socket_directory()
    assert directory is not None
    return sum(1 for t in threading.enumerate() if t.name == f"{notify.THREAD_NAME}-{directory.name}")


def test_closing_the_last_store_on_a_file_stops_listening(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    list(first.watch(Cluster, resource_version=first.current_resource_version(), timeout=0))
    signal = first.change_signal()
    assert signal.listening
    assert len(_sockets(signal)) == 1
    assert _notify_threads(signal) == 1
    first.close()
    assert signal.listening, "another store on the file is still open"
    second.close()
    assert not signal.listening
    directory = signal._socket_directory()
    assert directory is not None
    assert not directory.exists()
    for _ in range(200):
        if _notify_threads(signal) == 0:
            break
        threading.Event().wait(0.05)
    assert _notify_threads(signal) == 0
