"""The ServiceAccount ``token`` subresource (``authentication.k8s.io/v1`` TokenRequest, create only): what
``kubectl create token NAME`` asks for. The token is a JWT ``capa serve`` signs and verifies
(:class:`~capa_py.apiserver.authentication.ServiceAccountTokens`)."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from capa_py.apiserver.authentication import ServiceAccountTokens
from capa_py.apiserver.status import ApiError, Cause
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore

TokenHandler = Callable[[web.Request, str, str], Awaitable[web.Response]]
DEFAULT_SECONDS = 3600
MIN_SECONDS = 600
MAX_SECONDS = 1 << 32
API_VERSION = "authentication.k8s.io/v1"


def _invalid(name: str, field_path: str, value: str, detail: str) -> ApiError:
    message = f"Invalid value: {value}: {detail}"
    return ApiError(
        422,
        f'TokenRequest.authentication.k8s.io "" is invalid: {field_path}: {message}',
        kind="TokenRequest",
        group="authentication.k8s.io",
        causes=[Cause(field_path, message)],
    )


def _spec(body: Any, name: str, default_audiences: tuple[str, ...]) -> tuple[tuple[str, ...], int]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a TokenRequest object")
    spec = body.get("spec") if body.get("spec") is not None else {}
    if not isinstance(spec, dict):
        raise ApiError(400, "spec: expected an object")
    seconds = spec.get("expirationSeconds")
    seconds = DEFAULT_SECONDS if seconds is None else seconds
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise ApiError(400, "spec.expirationSeconds: expected an integer")
    if seconds < MIN_SECONDS:
        raise _invalid(
            name, "spec.expirationSeconds", str(seconds), "may not specify a duration less than 10 minutes"
        )
    if seconds > MAX_SECONDS:
        raise _invalid(
            name,
            "spec.expirationSeconds",
            str(seconds),
            "may not specify a duration larger than 2^32 seconds",
        )
    audiences = spec.get("audiences") or list(default_audiences)
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        raise ApiError(400, "spec.audiences: expected a list of strings")
    if spec.get("boundObjectRef") is not None:
        raise _invalid(
            name, "spec.boundObjectRef", "{...}", "capa serve does not issue tokens bound to an object"
        )
    return tuple(audiences), seconds


def requested(method: str, group: str, version: str, rest: list[str]) -> tuple[str, str] | None:
    """The namespace and name of the ServiceAccount a ``POST`` of its ``token`` subresource is for
    (``rest``: the path after ``/api/v1``), else ``None``."""
    if method != "POST" or (group, version) != ("", "v1") or len(rest) != 5:
        return None
    if rest[0] != "namespaces" or rest[2] != "serviceaccounts" or rest[4] != "token":
        return None
    return rest[1], rest[3]


def handler(store: ObjectStore, tokens: ServiceAccountTokens) -> TokenHandler:
    """What answers ``POST .../namespaces/NS/serviceaccounts/NAME/token`` (201 with the TokenRequest)."""
    from capa_py.api.workloads import ServiceAccount

    async def create_token(request: web.Request, namespace: str, name: str) -> web.Response:
        try:
            try:
                body = json.loads(await request.read() or b"{}")
            except (ValueError, UnicodeDecodeError) as exc:
                raise ApiError(400, f"the request body is not JSON: {exc}") from exc
            audiences, seconds = _spec(body, name, tokens.audiences)
            try:
                account = await asyncio.to_thread(store.get, ServiceAccount, name, namespace)
            except NotFound as exc:
                raise ApiError(
                    404, f'serviceaccounts "{name}" not found', name=name, kind="serviceaccounts"
                ) from exc
            issued = tokens.issue(namespace, name, account.metadata.uid or "", audiences, seconds)
        except ApiError as exc:
            return web.json_response(exc.status(), status=exc.code)
        metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        expires = datetime.datetime.fromtimestamp(issued.expires, datetime.UTC)
        document = {
            "kind": "TokenRequest",
            "apiVersion": API_VERSION,
            "metadata": {**metadata, "name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": {"audiences": list(audiences), "expirationSeconds": seconds, "boundObjectRef": None},
            "status": {"token": issued.token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
        }
        return web.json_response(document, status=201)

    return create_token
