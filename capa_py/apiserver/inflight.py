"""A bound on the large request bodies capa serve reads at once.

Each large body is held in memory several times while it is read and decoded (the bytes, the decoded
document), so many at once would grow the server's memory without bound. As the API server refuses requests
over its ``--max-requests-inflight`` with 429 TooManyRequests (``Retry-After: 1``), capa serve answers a
request whose body is large (``LARGE_BODY`` bytes or more, or of unknown length) 429 while
``MAX_LARGE_BODIES`` such requests are already in flight, without reading its body. Small requests are never
held back.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from capa_py.apiserver.status import ApiError

LARGE_BODY = 256 * 1024
MAX_LARGE_BODIES = 8
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def too_many_requests() -> web.Response:
    error = ApiError(429, "Too many requests, please try again later.", retry_after_seconds=1)
    return web.Response(
        body=json.dumps(error.status(), separators=(",", ":")).encode(),
        status=429,
        content_type="application/json",
        headers={"Retry-After": "1"},
    )


def large_bodies(limit: int | None = None) -> Middleware:
    """The middleware (``limit`` large bodies at once, ``MAX_LARGE_BODIES`` when None)."""
    most = MAX_LARGE_BODIES if limit is None else limit
    in_flight = 0  # the application's one event loop is the only one to change it

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal in_flight
        length = request.content_length
        large = request.body_exists and (length is None or length >= LARGE_BODY)
        if not large:
            return await handler(request)
        if in_flight >= most:
            return too_many_requests()
        in_flight += 1
        try:
            return await handler(request)
        finally:
            in_flight -= 1

    return middleware
