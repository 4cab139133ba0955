"""Running an asyncio server on its own event loop in a background thread, for callers that are not async.

``capa serve``'s test entry point and the webhook server both need the same thing: start the loop, wait
until the server has bound its port (or failed to), hand back what it reported, and stop it later from
another thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

Ready = Callable[[dict[str, Any]], None]
"""Called by the server once it serves, with what the starting thread should get back (its URL…)."""


class BackgroundLoop:
    """A server coroutine running on its own loop in a daemon thread; :meth:`stop` ends it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stopping: asyncio.Event, thread: threading.Thread):
        self._loop = loop
        self._stopping = stopping
        self._thread = thread

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> bool:
        """Set the server's stopping event and wait for the thread; True once it has ended (stopping
        twice is harmless)."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout)
        return not self._thread.is_alive()


class RunningServer:
    """A server started by :func:`start_loop_thread`: where it listens, and how to stop it."""

    def __init__(self, url: str, port: int, handle: BackgroundLoop) -> None:
        self.url = url
        self.port = port
        self._handle = handle

    def stop(self, timeout: float = 30.0) -> None:
        self._handle.stop(timeout)


def start_loop_thread(
    server: Callable[[asyncio.Event, Ready], Awaitable[None]], name: str
) -> tuple[dict[str, Any], BackgroundLoop]:
    """Run ``server(stopping, ready)`` in a new thread; return what it passed to ``ready`` and the handle
    that stops it. An exception the server raises before calling ``ready`` is raised here."""
    reported = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        stopping = asyncio.Event()
        state["loop"], state["stopping"] = asyncio.get_running_loop(), stopping

        def ready(info: dict[str, Any]) -> None:
            state["info"] = info
            reported.set()

        await server(stopping, ready)

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the starting thread
            state["error"] = exc
        finally:
            reported.set()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    reported.wait()
    if "info" not in state:
        error = state.get("error") or RuntimeError("the server ended before it served")
        raise error
    return state["info"], BackgroundLoop(state["loop"], state["stopping"], thread)
