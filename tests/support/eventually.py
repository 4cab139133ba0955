"""Waiting in tests for something another thread or process does: :func:`eventually` polls a probe until
it returns a truthy value, :func:`eventually_passes` until a check stops failing its assertions. Both give
up after ``timeout`` seconds (a safety bound, never the expected duration) with an ``AssertionError``
naming what was awaited and the last value or exception seen.

The clock and the sleep are parameters, so the helper itself is tested without waiting."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
DEFAULT_INTERVAL = 0.05


def eventually(
    probe: Callable[[], T],
    what: str = "",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    ignoring: tuple[type[BaseException], ...] = (),
    detail: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``probe()``'s first truthy result. A probe raising ``AssertionError`` or one of ``ignoring`` (a
    server not answering yet, say) is tried again. Raises ``AssertionError`` after ``timeout`` seconds,
    showing ``what`` (the probe's name when empty), the last value or exception and what ``detail()``
    says (a server's log, say); the probe is always tried at least once, and once more at the deadline."""
    deadline = clock() + timeout
    name = what or getattr(probe, "__name__", repr(probe))

    def gave_up(seen: str) -> AssertionError:
        more = f"\n{detail()}" if detail is not None else ""
        return AssertionError(f"{name}: not within {timeout:g} s ({seen}){more}")

    while True:
        expired = clock() >= deadline
        try:
            value = probe()
        except (AssertionError, *ignoring) as exc:
            # Only the last failure is kept, and only as text: an exception kept across tries would keep
            # its traceback's frames (a response, a socket) alive until the garbage collector finds them.
            if expired:
                raise gave_up(f"last failure: {type(exc).__name__}: {exc}") from exc
        else:
            if value:
                return value
            if expired:
                raise gave_up(f"last value: {value!r}")
        sleep(min(interval, max(0.0, deadline - clock())))


def eventually_passes(
    check: Callable[[], object],
    what: str = "",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    interval: float = DEFAULT_INTERVAL,
    ignoring: tuple[type[BaseException], ...] = (),
    detail: Callable[[], str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Calls ``check`` until it returns without raising ``AssertionError`` (or one of ``ignoring``); after
    ``timeout`` seconds the last ``AssertionError`` is raised again, with ``what`` in front."""

    def passed() -> bool:
        check()
        return True

    eventually(
        passed,
        what or getattr(check, "__name__", repr(check)),
        timeout=timeout,
        interval=interval,
        ignoring=ignoring,
        detail=detail,
        clock=clock,
        sleep=sleep,
    )
