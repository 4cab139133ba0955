"""The C allocator of a long-running process: fewer malloc arenas, and freed memory handed back to the system.

Most of a ``capa controller``'s resident memory is not live objects but memory glibc's malloc keeps after it
was freed: a reconcile burst (botocore parsing responses, pydantic validating objects, SQLite reading pages)
allocates tens of megabytes on many threads, frees them, and glibc keeps the pages in each thread's arena
for reuse. Measured at 5 ready clusters: 164 MiB of malloc arenas, 29 MiB of them in use (see
``docs/controller.md``, "Memory").

* :func:`limit_arenas` caps the number of arenas (``mallopt(M_ARENA_MAX)``), so that freed memory is shared
  between threads instead of kept per thread; called once, before the process starts its threads. A
  ``MALLOC_ARENA_MAX`` set in the environment wins (glibc read it at start).
* :func:`trim` returns the free pages of every arena to the system (``malloc_trim(0)``).
* :class:`Trimmer` trims after activity, once the process is quiet again: a thread woken by
  :meth:`Trimmer.poke` (the controller process pokes it when its last reconcile in progress ends) and
  every ``interval`` seconds, that trims when the activity counter moved since the last trim and nothing is
  in progress.

On a C library other than glibc (musl, macOS) every function here does nothing and says so (False).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

from capa_py.logging import get_logger

_log = get_logger("runtime.allocator")

M_ARENA_MAX = -8
"""mallopt's parameter number for the arena limit (glibc's malloc.h)."""
DEFAULT_ARENAS = 2
DEFAULT_TRIM_INTERVAL = 5.0


@cache
def _glibc() -> Any | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(arenas: int = DEFAULT_ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` (unless ``MALLOC_ARENA_MAX`` is set); True when applied."""
    if arenas < 1:
        raise ValueError("arenas: at least 1")
    libc = _glibc()
    if libc is None or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def trim() -> bool:
    """Hand the free pages of every malloc arena back to the system; True when some were released."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


class Trimmer:
    """Trims once activity has happened and the process is quiet again.

    ``activity()`` is any counter that moves with work (reconciles done); ``busy()`` says whether work is
    in progress now (a trim in the middle of a burst would only hand back pages the burst takes again)."""

    def __init__(
        self,
        activity: Callable[[], int],
        busy: Callable[[], bool],
        interval: float = DEFAULT_TRIM_INTERVAL,
        release: Callable[[], bool] = trim,
    ) -> None:
        self.activity = activity
        self.busy = busy
        self.interval = interval
        self.release = release
        self.trims = 0
        """How many times it trimmed (for tests and logs)."""
        self._seen = activity()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def poke(self) -> None:
        """Look now (work just ended) rather than at the next interval."""
        self._wake.set()

    def behind(self) -> bool:
        """Whether there was activity since the last trim (or since it was made)."""
        return self.activity() != self._seen

    def check(self) -> bool:
        """Trim if there was activity since the last trim and nothing is in progress; True when it did."""
        current = self.activity()
        if current == self._seen or self.busy():
            return False
        self._seen = current
        self.trims += 1
        released = self.release()
        _log.debug("malloc trimmed", released=released, trims=self.trims)
        return True

    def start(self, stop: threading.Event) -> None:
        if self.interval <= 0 or (_glibc() is None and self.release is trim):
            return

        def loop() -> None:
            while True:
                self._wake.wait(self.interval)
                if stop.is_set():
                    return
                self._wake.clear()
                try:
                    self.check()
                except Exception:
                    _log.exception("malloc trim failed")

        self._thread = threading.Thread(target=loop, name="capa-malloc-trim", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._wake.set()  # the stop event is set: the loop ends at once
        if self._thread is not None:
            self._thread.join(timeout)


__all__ = ["DEFAULT_ARENAS", "DEFAULT_TRIM_INTERVAL", "Trimmer", "limit_arenas", "trim"]
