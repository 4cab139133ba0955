"""A scripted stand-in for the Docker Engine API on a unix socket, for machines without a Docker engine.

The Docker SDK talks to it over HTTP exactly as it talks to dockerd, so the tests see the real requests
the Docker runtime makes (the create body: entrypoint, command, env, binds, namespaces; pull, start, stop,
remove). It runs nothing: a started container stays ``running`` until stopped (exit 143) unless the test
set :attr:`FakeEngine.exit_code`, and its output is :attr:`FakeEngine.output`.
"""

from __future__ import annotations

import asyncio
import json
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web


@dataclass
class FakeEngine:
    exit_code: int | None = None
    """The exit code a started container ends with at once; None keeps it running until stopped."""
    output: bytes = b""
    pullable: bool = True
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(method, path without the API version) of every request, in order."""
    created: list[dict[str, Any]] = field(default_factory=list)
    """The body of every container create."""
    state: str = "created"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path.startswith("/v1."):
            path = "/" + path.split("/", 2)[2]
        self.requests.append((request.method, path))
        if path == "/_ping":
            return web.Response(text="OK")
        if path == "/version":
            return web.json_response({"ApiVersion": "1.41", "Version": "fake", "MinAPIVersion": "1.24"})
        if path == "/images/create":
            if not self.pullable:
                return web.json_response({"message": "pull access denied"}, status=500)
            return web.Response(text=json.dumps({"status": "Downloaded"}) + "\n")
        if path.startswith("/images/") and path.endswith("/json"):
            if not self.pullable:
                return web.json_response({"message": "No such image"}, status=404)
            return web.json_response({"Id": "sha256:feed", "RepoTags": ["busybox:1.36"]})
        if path == "/containers/create":
            self.created.append(await request.json())
            return web.json_response({"Id": "c0ffee", "Warnings": []}, status=201)
        if path == "/containers/c0ffee/json":
            exit_code = {"exited": self.exit_code if self.exit_code is not None else 143}.get(self.state, 0)
            return web.json_response(
                {
                    "Id": "c0ffee",
                    "Config": {"Tty": False},
                    "State": {"Status": self.state, "ExitCode": exit_code},
                }
            )
        if path == "/containers/c0ffee/start":
            self.state = "exited" if self.exit_code is not None else "running"
            return web.Response(status=204)
        if path == "/containers/c0ffee/stop":
            self.state = "exited"
            return web.Response(status=204)
        if path == "/containers/c0ffee/logs":
            frame = struct.pack(">BxxxL", 1, len(self.output)) + self.output
            return web.Response(body=frame, content_type="application/vnd.docker.raw-stream")
        if path == "/containers/c0ffee" and request.method == "DELETE":
            self.state = "removed"
            return web.Response(status=204)
        return web.json_response({"message": f"not scripted: {request.method} {path}"}, status=404)


@contextmanager
def fake_engine(socket_path: Path) -> Iterator[FakeEngine]:
    """Serve a :class:`FakeEngine` on ``socket_path`` in a thread of its own."""
    engine = FakeEngine()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(engine.app(), access_log=None)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.UnixSite(runner, str(socket_path)).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield engine
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.run_until_complete(runner.cleanup())
        loop.close()
