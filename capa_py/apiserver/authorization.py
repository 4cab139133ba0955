"""Where ``capa serve`` authorizes a request: :func:`admit` decides it (through
:func:`capa_py.apiserver.reviews.authorize`) before anything is read or served, and records whose writes the
request makes, so that the roles and bindings it writes are checked for escalation (:func:`guarded`)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from capa_py.apiserver.escalation import acting_as, guarded
from capa_py.apiserver.rbac import Authorizer, refusal
from capa_py.apiserver.reviews import caller

__all__ = ["admit", "guarded"]


async def admit(authorizer: Authorizer, request: web.Request) -> dict[str, Any] | None:
    """The 403 Status to answer ``request`` with when its caller may not make it, else ``None`` (and the
    request's writes are then the caller's)."""
    user = caller(request)
    refused = await asyncio.to_thread(refusal, authorizer, user, request.method, request.path, request.query)
    if refused is None:
        acting_as(user)
    return refused
