"""The SQLite store's connections and transactions, and how SQLite's failures become store errors.

Threads share a small pool of connections to the file (:data:`POOL_SIZE`; WAL mode, a busy timeout of
:data:`BUSY_SECONDS`), each held by one thread for one transaction; they are opened ``mode=ro`` or
``immutable`` when the store is open for reading only and ``mode=rw`` when it must not be created. A write
runs in a ``BEGIN IMMEDIATE`` transaction, so writers are serialised across processes by SQLite's lock;
within a process they first queue on one lock per file (:func:`writer_lock`): SQLite makes a writer that
finds the file locked sleep and retry (1, 2, 5, 10… ms), so threads racing for it in one process waited in
those sleeps, while a lock hands the file to the next writer the moment the last one commits. Inside
:meth:`SQLiteConnections.atomic` each write is a savepoint of one transaction. A transaction an
interrupted call left open is rolled back before the next one begins.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential

from capa_py.api.registry import KindRegistry
from capa_py.logging import get_logger
from capa_py.store.errors import Damaged, ReadOnly, Unavailable, WriteFailed
from capa_py.store.sqlite_notify import ChangeSignal, release, signal_for

BUSY_SECONDS = 60.0
"""How long a connection waits for another process's lock before giving up."""

POOL_SIZE = 4
"""Connections a store keeps to its file, shared by every thread: a thread holds one for a transaction
(or a whole :meth:`SQLiteConnections.atomic` block), and waits when all are in use. Each connection has a
page cache of its own: a connection per thread made a controller's memory grow with its threads."""

_log = get_logger("store.sqlite")


_writer_locks: dict[Path, threading.Lock] = {}
_writer_locks_lock = threading.Lock()


def writer_lock(resolved: Path) -> threading.Lock:
    """The lock this process's writers of the store file at ``resolved`` (a resolved path) take before
    ``BEGIN IMMEDIATE``: one per file, shared by every store open on it."""
    found = _writer_locks.get(resolved)
    if found is not None:
        return found
    with _writer_locks_lock:
        return _writer_locks.setdefault(resolved, threading.Lock())


def _reset_writer_locks() -> None:
    # A child forked while another thread of its parent wrote would find that lock held for ever.
    global _writer_locks_lock
    _writer_locks_lock = threading.Lock()
    _writer_locks.clear()


os.register_at_fork(after_in_child=_reset_writer_locks)


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "database is locked" in str(exc)


@retry(
    retry=retry_if_exception(_locked),
    wait=wait_random_exponential(multiplier=0.01, max=0.5),
    stop=stop_after_delay(BUSY_SECONDS),
    reraise=True,
)
def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch the database to write-ahead logging. SQLite answers a journal-mode change it cannot make at
    once with "database is locked" without waiting for the busy timeout (another process is creating or
    switching the same new file), so the switch is retried for as long as a write would wait."""
    conn.execute("PRAGMA journal_mode=WAL")


def open_failure(exc: BaseException) -> str:
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return "the file is not a capa store (not a SQLite database)"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _error_name(exc: sqlite3.Error) -> str:
    return str(getattr(exc, "sqlite_errorname", ""))


def cannot_write(exc: BaseException) -> bool:
    """Whether opening failed because the file or its directory cannot be written."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    name = _error_name(exc) if isinstance(exc, sqlite3.Error) else ""
    return name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH"))


def create_private(path: Path) -> None:
    """Create ``path`` empty, readable and writable by its owner only, where there is no file yet: a store
    holds Secrets (bootstrap data, agent tokens), and SQLite gives its journal and shared-memory files the
    database file's mode. An existing store keeps the mode it has."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(descriptor)


def translate(exc: sqlite3.Error, path: str) -> Unavailable:
    """The store error a SQLite failure on the store at ``path`` is, for the caller."""
    name, text = _error_name(exc), str(exc)
    if (
        name.startswith("SQLITE_CORRUPT")
        or "malformed" in text
        or text.startswith("Could not decode to UTF-8")  # a damaged page in the middle of a text
    ):
        return Damaged(path, text)
    if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk is full" in text:
        return WriteFailed(path, text)
    if name.startswith("SQLITE_READONLY"):
        return ReadOnly(path, text)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return Unavailable(path, f"{text} (another process held it for more than {BUSY_SECONDS:g}s)")
    return Unavailable(path, open_failure(exc))


class SQLiteConnections:
    """One SQLite file's per-thread connections and the transactions a store runs on them."""

    def __init__(self, path: Path, registry: KindRegistry, create: bool) -> None:
        self.path = path
        self._creates = create
        self.registry = registry
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._idle: list[sqlite3.Connection] = []
        self._opened = 0
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)
        self.read_only: str | None = None
        """Why the store is open for reading only (``None``: it can be written)."""
        self._read_mode = "mode=ro"
        self.changes: ChangeSignal = signal_for(path)
        self._resolved = path.resolve()
        self._released = False
        """This file's changes as the process learns of them: raised after each commit (and by other
        processes' commits, once something here waits for changes)."""

    def _translate(self, exc: sqlite3.Error) -> Unavailable:
        """The store error a SQLite failure is, for the caller."""
        return translate(exc, str(self.path))

    def _open_connection(self) -> sqlite3.Connection:
        # mode=rw opens an existing database only: a store opened without creating stays absent.
        uri = bool(self.read_only) or not self._creates
        target: str | Path = self.path
        if self.read_only:
            target = f"{self.path.resolve().as_uri()}?{self._read_mode}"
        elif not self._creates:
            target = f"{self.path.resolve().as_uri()}?mode=rw"
        conn = sqlite3.connect(
            target, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False, uri=uri
        )
        try:
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_SECONDS * 1000)}")
            if not self.read_only:
                _enter_wal(conn)
                conn.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def _lease(self) -> Iterator[sqlite3.Connection]:
        """A connection of the pool for this thread until the block ends; inside another lease of the same
        thread (a transaction's reads and writes, :meth:`atomic`'s nested writes) that same connection."""
        held: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        conn = self._checkout()
        self._local.conn = conn
        try:
            yield conn
        finally:
            self._local.conn = None
            self._checkin(conn)

    def _checkout(self) -> sqlite3.Connection:
        with self._returned:
            while not self._idle and self._opened >= POOL_SIZE:
                self._returned.wait()
            if self._idle:
                return self._idle.pop()
            self._opened += 1  # a place taken before connecting, outside the lock
        try:
            conn = self._open_connection()
        except BaseException:
            with self._returned:
                self._opened -= 1
                self._returned.notify()
            raise
        with self._returned:
            self._connections.append(conn)
        return conn

    def _checkin(self, conn: sqlite3.Connection) -> None:
        with self._returned:
            if conn in self._connections:
                self._idle.append(conn)
            self._returned.notify()

    def _conn(self) -> sqlite3.Connection:
        """The connection this thread holds (inside :meth:`_lease`)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            raise RuntimeError("a store connection used outside a lease")
        return conn

    @contextmanager
    def _raw_transaction(self, conn: sqlite3.Connection, begin: str) -> Iterator[sqlite3.Connection]:
        """One transaction on ``conn``, committed when the block ends, rolled back when it raises.

        A transaction still open on the connection when this one begins, and no block of this thread in
        it, was left by an interrupted call (a KeyboardInterrupt raised as its ``BEGIN`` returned, before
        its block could undo it): it is rolled back first, so one Ctrl-C never breaks later store calls."""
        if conn.in_transaction:
            if getattr(self._local, "in_block", False):
                raise RuntimeError("a store transaction was begun inside another on the same thread")
            _log.debug("rolling back a store transaction an interrupted call left open")
            conn.execute("ROLLBACK")
        conn.execute(begin)
        try:
            self._local.in_block = True
            yield conn
        except BaseException:
            if conn.in_transaction:  # SQLite rolls back by itself after some failures (a full disk)
                conn.execute("ROLLBACK")
            raise
        else:
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        finally:
            self._local.in_block = False

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise ReadOnly(str(self.path), self.read_only)
        depth: int = getattr(self._local, "depth", 0)
        if not depth:
            writer = writer_lock(self._resolved)
            if not writer.acquire(timeout=BUSY_SECONDS):
                raise Unavailable(
                    str(self.path), f"another writer of this process held it for more than {BUSY_SECONDS:g}s"
                )
            try:
                with (
                    self._translated(),
                    self._lease() as conn,
                    self._raw_transaction(conn, "BEGIN IMMEDIATE"),
                ):
                    yield conn
            finally:
                writer.release()
            self.changes.changed()
            return
        with self._translated(), self._lease() as conn:
            # Inside atomic(): a savepoint, so a write that fails undoes only itself.
            savepoint = f"write_{depth}"
            conn.execute(f"SAVEPOINT {savepoint}")
            self._local.depth = depth + 1
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute(f"ROLLBACK TO {savepoint}")
                    conn.execute(f"RELEASE {savepoint}")
                raise
            finally:
                self._local.depth = depth
            conn.execute(f"RELEASE {savepoint}")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._translated(), self._lease() as conn:
            if getattr(self._local, "depth", 0):
                yield conn  # inside atomic(): read what the transaction wrote so far
                return
            with self._raw_transaction(conn, "BEGIN"):
                yield conn

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Every write this thread makes in the block is one transaction: all of them are stored when the
        block ends, none if it raises (or the disk fails). Other writers wait until it ends."""
        with self._write():
            depth: int = getattr(self._local, "depth", 0)
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth = depth

    def close(self) -> None:
        """Close the store: its connections, and its share of the file's change signal."""
        self._drop_connections()
        if not self._released:
            self._released = True
            release(self.changes)

    def _drop_connections(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
            self._idle.clear()
            self._opened = 0
            self._returned.notify_all()
        self._local = threading.local()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
