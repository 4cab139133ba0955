"""Store faults inside a capa process, through its SQLite connections (``crashing_capa.py`` installs them).

Configured by environment variables, read by :func:`install_from_env`:

``CAPA_TEST_SIGINT_AT_READ=N``
    Once the process holds the store's lease, send itself SIGINT (what Ctrl-C sends) right after the N-th
    read transaction the main thread begins: the ``KeyboardInterrupt`` is raised as the ``BEGIN`` returns,
    while a store transaction is open on that thread.
``CAPA_TEST_STORE_FREE_PAGES=N``
    Every connection the process opens may grow the database file by N pages at most (SQLite's
    ``max_page_count``): past that, writes fail with SQLite's own ``database or disk is full``, as on a
    full disk.

Nothing here is known to capa itself: the hooks wrap :func:`sqlite3.connect` (its connections'
``execute``).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import Any

SIGINT_AT_READ = "CAPA_TEST_SIGINT_AT_READ"
STORE_FREE_PAGES = "CAPA_TEST_STORE_FREE_PAGES"
VARIABLES = (SIGINT_AT_READ, STORE_FREE_PAGES)


class _Interrupter:
    """Counts the main thread's read transactions once the lease is held; interrupts at the N-th."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.armed = False
        self.reads = 0
        self.sent = False

    def executed(self, sql: str, parameters: Any) -> None:
        if self.sent:
            return
        if isinstance(parameters, tuple) and "Lease" in parameters:
            # The lease write that made this process the holder arms the interrupt.
            self.armed = any('"holderIdentity":"capa ' in str(p) for p in parameters)
            return
        if not self.armed or sql != "BEGIN" or threading.current_thread() is not threading.main_thread():
            return
        self.reads += 1
        if self.reads >= self.at:
            self.sent = True
            # Python raises KeyboardInterrupt at the next instruction: as this BEGIN returns.
            os.kill(os.getpid(), signal.SIGINT)


def install_from_env(environ: Mapping[str, str] | None = None) -> None:
    """Wrap :func:`sqlite3.connect` with the faults the ``CAPA_TEST_*`` variables ask for (if any)."""
    env = os.environ if environ is None else environ
    interrupter = _Interrupter(int(env[SIGINT_AT_READ])) if env.get(SIGINT_AT_READ) else None
    free_pages = int(env[STORE_FREE_PAGES]) if env.get(STORE_FREE_PAGES) else None
    if interrupter is None and free_pages is None:
        return
    connect: Callable[..., sqlite3.Connection] = sqlite3.connect

    class InterruptedConnection(sqlite3.Connection):
        def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
            cursor = super().execute(sql, parameters)
            if interrupter is not None:
                interrupter.executed(sql, parameters)
            return cursor

    def faulty_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, factory=InterruptedConnection, **kwargs)
        if free_pages is not None:
            pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
            conn.execute(f"PRAGMA max_page_count={pages + free_pages}")
        return conn

    sqlite3.connect = faulty_connect  # type: ignore[assignment]


__all__ = ["SIGINT_AT_READ", "STORE_FREE_PAGES", "VARIABLES", "install_from_env"]
