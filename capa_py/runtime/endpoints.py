"""The metrics and health-probe HTTP endpoints of a controller process (aiohttp, on a thread of its own).

* ``/metrics`` on the metrics address: the process's registry in the Prometheus text format;
* ``/healthz`` on the probe address: 200 while the process runs; ``/readyz``: 503 until every informer
  has synced, 200 after.

Addresses are written as controller-runtime's flags take them: ``HOST:PORT``, ``:PORT`` (every
interface), ``[::1]:PORT``; port 0 picks a free port; ``0`` alone disables the endpoint.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from capa_py.logging import get_logger

_log = get_logger("runtime.endpoints")


@dataclass(frozen=True)
class BindAddress:
    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}"


def parse_bind_address(text: str) -> BindAddress | None:
    """``127.0.0.1:8080`` → BindAddress; ``0`` → None (disabled). ValueError when malformed."""
    text = text.strip()
    if text == "0":
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"not a bind address: {text!r} (HOST:PORT, :PORT, or 0 to disable)")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port out of range in {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return BindAddress(host or "0.0.0.0", port)


class Endpoints:
    """Serves the metrics and probe endpoints until :meth:`stop`."""

    def __init__(
        self,
        metrics_address: BindAddress | None,
        probe_address: BindAddress | None,
        render_metrics: Callable[[], bytes],
        ready: Callable[[], bool],
    ) -> None:
        self.metrics_address = metrics_address
        self.probe_address = probe_address
        self.render_metrics = render_metrics
        self.ready = ready
        self.metrics_url: str | None = None
        self.probe_url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    async def _metrics(self, _: web.Request) -> web.Response:
        body = self.render_metrics()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="informers not synced")

    async def _site(self, routes: list[web.RouteDef], address: BindAddress) -> tuple[web.AppRunner, str]:
        app = web.Application()
        app.add_routes(routes)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, address.host, address.port)
        await site.start()
        # The bound address says which port 0 became.
        bound = [a for a in runner.addresses if isinstance(a, tuple) and len(a) >= 2]
        port = int(bound[0][1]) if bound else address.port
        return runner, address.url(port)

    def start(self) -> None:
        """Bind both endpoints (raises OSError when one cannot be bound) and serve them on a thread."""
        started = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopping = asyncio.Event()
            runners: list[web.AppRunner] = []
            try:
                if self.metrics_address is not None:
                    runner, self.metrics_url = await self._site(
                        [web.get("/metrics", self._metrics)], self.metrics_address
                    )
                    runners.append(runner)
                if self.probe_address is not None:
                    runner, self.probe_url = await self._site(
                        [web.get("/healthz", self._healthz), web.get("/readyz", self._readyz)],
                        self.probe_address,
                    )
                    runners.append(runner)
            except BaseException as exc:
                failure.append(exc)
                for runner in runners:
                    await runner.cleanup()
                started.set()
                return
            started.set()
            try:
                await self._stopping.wait()
            finally:
                for runner in runners:
                    await runner.cleanup()

        self._thread = threading.Thread(
            target=lambda: asyncio.run(main()), name="capa-endpoints", daemon=True
        )
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            raise failure[0]
        _log.info("serving endpoints", metrics=self.metrics_url, probes=self.probe_url)

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None and self._thread is not None:
            if self._thread.is_alive():
                self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(10)
