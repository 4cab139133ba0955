"""The API server's routing: every request authorized first, then answered by path: health, version,
discovery, OpenAPI (v2 and v3), the access and subject reviews, TokenRequest, and the resources
(:mod:`~capa_py.apiserver.handlers`); :func:`build_app` is the aiohttp application around it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aiohttp import web

from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.apiserver import (
    authorization,
    discovery,
    inflight,
    openapi,
    openapi_v2,
    protobuf,
    resources,
    reviews,
    tokenrequest,
)
from capa_py.apiserver.authentication import Authenticator, middleware
from capa_py.apiserver.handlers import MAX_REQUEST_BODY, ResourceHandlers, json_response
from capa_py.apiserver.rbac import Authorizer
from capa_py.apiserver.status import ApiError, from_store_error
from capa_py.logging import get_logger
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore

_log = get_logger("apiserver")


class ApiServer(ResourceHandlers):
    """Routes each request to what serves its path."""

    # -- routing --------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except ApiError as exc:
            return json_response(exc.status(), exc.code)
        except web.HTTPRequestEntityTooLarge:
            error = ApiError(
                413, f"Request entity too large: limit is {MAX_REQUEST_BODY}", "RequestEntityTooLarge"
            )
            return json_response(error.status(), error.code)
        except StoreError as exc:
            error = from_store_error(exc, "", "")
            return json_response(error.status(), error.code)
        except Exception as exc:  # a bug: answered as the API server answers one, and logged
            _log.exception("request failed", method=request.method, path=request.path)
            error = ApiError(500, f"an internal error occurred: {type(exc).__name__}")
            return json_response(error.status(), error.code)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        refused = await authorization.admit(self.authorizer, request)  # before anything is read or served
        if refused is not None:
            return json_response(refused, 403)
        parts = [p for p in request.path.split("/") if p]
        if request.method != "GET" and (len(parts) < 3 or parts[0] not in ("api", "apis")):
            raise ApiError(405, f"the server does not allow this method on {request.path}")
        if len(parts) == 1 and parts[0] in ("healthz", "livez", "readyz"):
            return web.Response(text="ok", content_type="text/plain")
        if parts == ["version"]:
            return json_response(discovery.version_info())
        if parts[:2] == ["openapi", "v3"]:
            return self._openapi(parts[2:])
        if parts == ["openapi", "v2"]:
            return self._openapi_v2(request)
        if parts == ["api"]:
            return json_response(discovery.api_versions(request.host))
        if parts == ["apis"]:
            return json_response(self.crds.group_list(discovery.api_group_list(self.registry)))
        if len(parts) == 2 and parts[0] == "apis":
            group_doc = self.crds.group(discovery.api_group(self.registry, parts[1]), parts[1])
            if group_doc is None:
                raise ApiError(404, "the server could not find the requested resource")
            return json_response(group_doc)
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "the server could not find the requested resource")
        if not rest:
            listing = self.crds.resource_list(
                discovery.resource_list(self.registry, group, version), group, version
            )
            if listing is None:
                raise ApiError(404, "the server could not find the requested resource")
            return json_response(listing)
        if reviews.served(group, version):
            return await self._review(request, group, version, rest)
        account = tokenrequest.requested(request.method, group, version, rest)
        if account is not None and self.token_request is not None:
            return await self.token_request(request, *account)
        target = self._target(group, version, rest)
        return await self._resource(request, target)

    def _openapi(self, rest: list[str]) -> web.Response:
        if not rest:
            return json_response(openapi.index(self.registry))
        doc = openapi.documents(self.registry).get("/".join(rest))
        if doc is None:
            raise ApiError(404, "the server could not find the requested resource")
        return json_response(doc)

    def _openapi_v2(self, request: web.Request) -> web.Response:
        """JSON or protobuf as ``Accept`` asks (406 with no body otherwise), with an entity tag: a
        request naming it in ``If-None-Match`` is answered 304, as the API server does."""
        as_json, as_protobuf, etag = openapi_v2.encoded(self.registry)
        headers = {"ETag": etag, "Vary": "Accept"}
        chosen = openapi_v2.negotiate(request.headers.get("Accept", ""))
        if chosen is None:
            return web.Response(status=406, headers={"Vary": "Accept"})
        if etag in (t.strip() for t in request.headers.get("If-None-Match", "").split(",")):
            return web.Response(status=304, headers=headers)
        body = as_protobuf if chosen == openapi_v2.PROTOBUF else as_json
        return web.Response(body=body, headers={**headers, "Content-Type": chosen})

    async def _review(self, request: web.Request, group: str, version: str, rest: list[str]) -> web.Response:
        """A SelfSubjectReview or SelfSubjectAccessReview, answered for the caller (create only)."""
        review = reviews.find(group, version, rest)
        if review is None:
            raise ApiError(404, "the server could not find the requested resource")
        if request.method != "POST":
            raise ApiError(405, "the server does not allow this method on the requested resource")
        raw = await request.read()
        if request.content_type == protobuf.MEDIA_TYPE:
            body = protobuf.decode_kind(raw, review.api_version, review.kind)
        else:
            body = resources.parse_body(raw)
        answered = await asyncio.to_thread(
            reviews.answer, review, body, reviews.caller(request), self.authorizer
        )
        return json_response(answered, 201)

    def _target(self, group: str, version: str, rest: list[str]) -> resources.Target:
        namespace: str | None = None
        models = discovery.by_group(self.registry).get(group, {}).get(version, [])
        # ``namespaces/NAME/status`` is a Namespace's own subresource, not a kind inside a namespace.
        namespace_status = rest[0] == "namespaces" and rest[2:] == ["status"]
        if rest[0] == "namespaces" and len(rest) >= 3 and not namespace_status:
            namespace, rest = rest[1], rest[2:]
        model = next((m for m in models if rest[0] == m.PLURAL), None)
        served = self.crds.lookup(group, version, rest[0]) if model is None else None
        model = served.model if served is not None else model
        if model is None or len(rest) > 3:
            raise ApiError(404, "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        subresource = rest[2] if len(rest) == 3 else None
        if subresource is not None and (subresource != "status" or not model.HAS_STATUS):
            raise ApiError(404, "the server could not find the requested resource")
        if model.NAMESPACED and name is not None and namespace is None:
            raise ApiError(404, "the server could not find the requested resource")
        if not model.NAMESPACED and namespace is not None:
            raise ApiError(404, "the server could not find the requested resource")
        return resources.Target(model, namespace, name, subresource, served)


@web.middleware
async def _log_requests(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    response = await handler(request)
    _log.debug("request", method=request.method, path=request.path, status=response.status)
    return response


def build_app(
    store: ObjectStore,
    registry: KindRegistry = REGISTRY,
    bookmark_interval: float = 5.0,
    max_watches: int = 64,
    *,
    authenticator: Authenticator,
    authorizer: Authorizer,
) -> web.Application:
    """The application; the caller owns the store (it is not closed here). Every request is authenticated
    by ``authenticator`` (or answered 401), then authorized by ``authorizer`` (or answered 403), before it
    is served. At most ``max_watches`` watches are open at once (each holds a worker thread); one more is
    answered 429."""
    server = ApiServer(store, registry, bookmark_interval, max_watches, authorizer=authorizer)
    app = web.Application(
        middlewares=[_log_requests, middleware(authenticator), inflight.large_bodies()],
        client_max_size=MAX_REQUEST_BODY,
    )
    if authenticator.service_accounts is not None:
        server.token_request = tokenrequest.handler(store, authenticator.service_accounts)
    app.router.add_route("*", r"/{tail:[\s\S]*}", server.dispatch)  # every path, a newline in it too

    async def start_collector(_: web.Application) -> None:
        server.collector.start()
        with contextlib.suppress(StoreError):  # the thread reads them again until it can
            await asyncio.to_thread(server.crds.refresh)
        server.crds.start()

    async def close_watches(_: web.Application) -> None:
        await asyncio.to_thread(server.watches.close)
        await asyncio.to_thread(server.collector.stop)
        await asyncio.to_thread(server.crds.stop)

    app.on_startup.append(start_collector)
    app.on_shutdown.append(close_watches)
    return app
