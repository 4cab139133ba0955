"""The aiohttp application serving the store with the Kubernetes API's paths and wire form."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.apiserver import (
    authorization,
    discovery,
    fieldmanager,
    inflight,
    openapi,
    openapi_v2,
    protobuf,
    resources,
    reviews,
    serverside,
    tokenrequest,
)
from capa_py.apiserver.authentication import ADMIN, Authenticator, ServiceAccountTokens, middleware
from capa_py.apiserver.bootstrap_policy import ensure_bootstrap_policy
from capa_py.apiserver.certificates import ServingFiles, ephemeral_serving_files, serving_hosts
from capa_py.apiserver.crd_kinds import CrdKinds
from capa_py.apiserver.fieldvalidation import FieldValidation
from capa_py.apiserver.foreground import ForegroundCollector
from capa_py.apiserver.listoptions import ListOptions, query_bool, wait_for_resource_version
from capa_py.apiserver.namespaces import ensure_system_namespaces
from capa_py.apiserver.patch import APPLY, check_media_type
from capa_py.apiserver.rbac import Authorizer, default_authorizer
from capa_py.apiserver.status import ApiError, Cause, from_store_error
from capa_py.apiserver.tables import table, wants_table
from capa_py.apiserver.watch import Item, Watches, WatchRequest
from capa_py.logging import get_logger
from capa_py.runtime.background import BackgroundLoop, Ready, start_loop_thread
from capa_py.store.errors import StoreError
from capa_py.store.identity import publish_identity
from capa_py.store.protocol import ObjectStore
from capa_py.store.selectors import FieldSelector, LabelSelector

_log = get_logger("apiserver")


def _json(document: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(document, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
    )


_OPTIONS_KIND = {
    "POST": "CreateOptions",
    "PUT": "UpdateOptions",
    "PATCH": "PatchOptions",
    "DELETE": "DeleteOptions",
}


def _dry_run(method: str, values: Any) -> bool:
    """Whether a write is a dry run; ``All`` is the only value the API defines, anything else is refused
    as the API server refuses it (422 naming the options kind and the ``dryRun`` field)."""
    listed = [str(v) for v in values] if isinstance(values, list) else [str(values)]
    unsupported = [v for v in listed if v != "All"]
    if unsupported:
        message = f'Unsupported value: {json.dumps(unsupported)}: supported values: "All"'
        kind = _OPTIONS_KIND.get(method, "CreateOptions")
        raise ApiError(
            422,
            f'{kind}.meta.k8s.io "" is invalid: dryRun: {message}',
            kind=kind,
            group="meta.k8s.io",
            causes=[Cause("dryRun", message, "FieldValueNotSupported")],
        )
    return bool(listed)


class ApiServer:
    def __init__(
        self,
        store: ObjectStore,
        registry: KindRegistry = REGISTRY,
        bookmark_interval: float = 5.0,
        max_watches: int = 64,
        *,
        authorizer: Authorizer,
    ) -> None:
        self.store = authorization.guarded(store, authorizer)
        self.authorizer = authorizer
        self.registry = registry
        self.bookmark_interval = bookmark_interval
        self.watches = Watches(max_watches)
        self.crds = CrdKinds(store, registry)
        self.collector = ForegroundCollector(store, self.crds.registry)
        self.token_request: tokenrequest.TokenHandler | None = None

    # -- routing --------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except ApiError as exc:
            return _json(exc.status(), exc.code)
        except web.HTTPRequestEntityTooLarge:
            error = ApiError(
                413, f"Request entity too large: limit is {MAX_REQUEST_BODY}", "RequestEntityTooLarge"
            )
            return _json(error.status(), error.code)
        except StoreError as exc:
            error = from_store_error(exc, "", "")
            return _json(error.status(), error.code)
        except Exception as exc:  # a bug: answered as the API server answers one, and logged
            _log.exception("request failed", method=request.method, path=request.path)
            error = ApiError(500, f"an internal error occurred: {type(exc).__name__}")
            return _json(error.status(), error.code)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        refused = await authorization.admit(self.authorizer, request)  # before anything is read or served
        if refused is not None:
            return _json(refused, 403)
        parts = [p for p in request.path.split("/") if p]
        if request.method != "GET" and (len(parts) < 3 or parts[0] not in ("api", "apis")):
            raise ApiError(405, f"the server does not allow this method on {request.path}")
        if len(parts) == 1 and parts[0] in ("healthz", "livez", "readyz"):
            return web.Response(text="ok", content_type="text/plain")
        if parts == ["version"]:
            return _json(discovery.version_info())
        if parts[:2] == ["openapi", "v3"]:
            return self._openapi(parts[2:])
        if parts == ["openapi", "v2"]:
            return self._openapi_v2(request)
        if parts == ["api"]:
            return _json(discovery.api_versions(request.host))
        if parts == ["apis"]:
            return _json(self.crds.group_list(discovery.api_group_list(self.registry)))
        if len(parts) == 2 and parts[0] == "apis":
            group_doc = self.crds.group(discovery.api_group(self.registry, parts[1]), parts[1])
            if group_doc is None:
                raise ApiError(404, "the server could not find the requested resource")
            return _json(group_doc)
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
            return _json(listing)
        if reviews.served(group, version):
            return await self._review(request, group, version, rest)
        account = tokenrequest.requested(request.method, group, version, rest)
        if account is not None and self.token_request is not None:
            return await self.token_request(request, *account)
        target = self._target(group, version, rest)
        return await self._resource(request, target)

    def _openapi(self, rest: list[str]) -> web.Response:
        if not rest:
            return _json(openapi.index(self.registry))
        doc = openapi.documents(self.registry).get("/".join(rest))
        if doc is None:
            raise ApiError(404, "the server could not find the requested resource")
        return _json(doc)

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
        return _json(answered, 201)

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

    # -- resources ------------------------------------------------------------------------------------
    async def _resource(self, request: web.Request, target: resources.Target) -> web.StreamResponse:
        query = request.query
        method = request.method
        dry_run = _dry_run(method, query.getall("dryRun", []))
        store = self.store
        manager = fieldmanager.manager_name(query, request.headers.get("User-Agent", ""))
        if target.name is None:
            if method == "GET":
                if query_bool(query.get("watch")):
                    return await self._watch(request, target)
                return await self._list(request, target)
            if method == "POST":
                if target.model.NAMESPACED and target.namespace is None:
                    raise ApiError(404, "the server could not find the requested resource")
                validation = FieldValidation.from_query(query.get("fieldValidation"), "Create")
                body = await self._body(request, target, validation)
                if target.served is not None and target.served.terminating:
                    meta = body.get("metadata") if isinstance(body, dict) else None
                    name = str(meta.get("name", "")) if isinstance(meta, dict) else ""
                    raise ApiError(
                        403,
                        f'{target.resource}.{target.group} "{name}" is forbidden: create not allowed while '
                        "custom resource definition is terminating",
                        "Forbidden",
                        name=name,
                        kind=target.resource,
                        group=target.group,
                    )
                created = await asyncio.to_thread(
                    resources.create, store, target, body, dry_run, validation, manager
                )
                await self._defined(target, dry_run)
                return self._respond(request, target, created, 201, validation)
            raise ApiError(405, f"{method} is not supported on a collection of {target.resource}")
        if method == "GET":
            wanted = query.get("resourceVersion")
            await asyncio.to_thread(wait_for_resource_version, store, target.model, wanted)
            obj = await asyncio.to_thread(resources.get, store, target)
            return self._respond(request, target, target.render(obj))
        if method == "PUT":
            validation = FieldValidation.from_query(query.get("fieldValidation"), "Update")
            body = await self._body(request, target, validation)
            replaced = await asyncio.to_thread(
                resources.replace, store, target, body, dry_run, validation, manager
            )
            await self._defined(target, dry_run)
            return self._respond(request, target, replaced, validation=validation)
        if method == "PATCH":
            content_type = request.content_type
            if content_type == APPLY:
                raw = await request.read()
                applied, code = await asyncio.to_thread(
                    serverside.apply_request, store, target, raw, query, dry_run
                )
                await self._defined(target, dry_run)
                return self._respond(request, target, applied, code)
            fieldmanager.check_force(query, content_type)
            check_media_type(content_type, target.group)
            validation = FieldValidation.from_query(query.get("fieldValidation"), "Patch")
            body = validation.parse(await request.read())
            patched = await asyncio.to_thread(
                resources.patch, store, target, content_type, body, dry_run, validation, manager
            )
            await self._defined(target, dry_run)
            return self._respond(request, target, patched, validation=validation)
        if method == "DELETE":
            if target.subresource is not None:
                raise ApiError(405, "the status subresource cannot be deleted")
            options = resources.delete_options(await request.read()) if request.can_read_body else {}
            propagation = query.get("propagationPolicy") or options.get("propagationPolicy")
            preconditions = options.get("preconditions") or {}
            dry_run = dry_run or _dry_run(method, options.get("dryRun") or [])
            last: dict[str, Any] | None = None
            if target.model is CustomResourceDefinition and not dry_run:
                last = await asyncio.to_thread(self._delete_definition, target, preconditions)
            if last is None:
                precondition = preconditions.get("resourceVersion")
                last = await asyncio.to_thread(
                    resources.delete, store, target, propagation, precondition, dry_run
                )
            await self._defined(target, dry_run)
            if propagation == "Foreground":
                self.collector.wake()
            return self._respond(request, target, last)
        raise ApiError(405, f"{method} is not supported on {target.resource}")

    async def _defined(self, target: resources.Target, dry_run: bool) -> None:
        """After a CRD is written: serve (or stop serving) what it defines at once."""
        if target.model is CustomResourceDefinition and not dry_run:
            await asyncio.to_thread(self.crds.refresh)

    def _delete_definition(
        self, target: resources.Target, preconditions: dict[str, Any]
    ) -> dict[str, Any] | None:
        assert target.name is not None
        try:
            return self.crds.delete_definition(target.name, preconditions.get("resourceVersion"))
        except StoreError as exc:
            raise target.api_error(exc) from exc

    def _table(
        self,
        request: web.Request,
        target: resources.Target,
        docs: list[dict[str, Any]],
        metadata: dict[str, Any],
    ) -> dict[str, Any]:
        columns = self.crds.columns(target.model, target.served)
        return table(target.model, docs, self._include(request), metadata, columns)

    @staticmethod
    async def _body(request: web.Request, target: resources.Target, validation: FieldValidation) -> Any:
        """A create or update body: JSON, or Kubernetes' protobuf form (kubectl 1.32+ ``create``)."""
        raw = await request.read()
        if request.content_type == protobuf.MEDIA_TYPE:
            return protobuf.decode(raw, target.model)
        return validation.parse(raw)

    def _respond(
        self,
        request: web.Request,
        target: resources.Target,
        doc: dict[str, Any],
        status: int = 200,
        validation: FieldValidation | None = None,
    ) -> web.Response:
        if wants_table(request.headers.get("Accept", "")):
            rv = doc.get("metadata", {}).get("resourceVersion", "")
            doc = self._table(request, target, [doc], {"resourceVersion": rv})
        response = _json(doc, status)
        for name, value in validation.headers() if validation is not None else ():
            response.headers.add(name, value)
        return response

    @staticmethod
    def _include(request: web.Request) -> str:
        return request.query.get("includeObject", "Metadata")

    async def _list(self, request: web.Request, target: resources.Target) -> web.Response:
        query = request.query
        options = ListOptions.from_query(query)
        limit = options.limit
        try:
            LabelSelector.parse(query.get("labelSelector"))
            FieldSelector.parse(query.get("fieldSelector"))
        except StoreError as exc:  # a selector that does not parse is a bad request, not an invalid object
            raise ApiError(400, str(exc)) from exc
        await asyncio.to_thread(wait_for_resource_version, self.store, target.model, options.resource_version)
        items, metadata = await asyncio.to_thread(
            resources.list_page,
            self.store,
            target,
            query.get("labelSelector"),
            query.get("fieldSelector"),
            limit,
            query.get("continue"),
        )
        if wants_table(request.headers.get("Accept", "")):
            return _json(self._table(request, target, items, metadata))
        return _json(
            {
                "apiVersion": target.api_version,
                "items": items,
                "kind": f"{target.model.KIND}List",
                "metadata": metadata,
            }
        )

    async def _watch(self, request: web.Request, target: resources.Target) -> web.StreamResponse:
        query = request.query
        options = ListOptions.from_query(query)
        try:
            fields = FieldSelector.parse(query.get("fieldSelector"))
            LabelSelector.parse(query.get("labelSelector"))
        except StoreError as exc:
            raise ApiError(400, str(exc)) from exc
        watch = WatchRequest(
            model=target.model,
            namespace=target.namespace,
            resource_version=options.resource_version,
            label_selector=query.get("labelSelector"),
            field_selector=fields,
            bookmarks=options.allow_bookmarks,
            timeout=options.timeout,
            render=target.render,
            initial_events=options.send_initial_events,
        )
        as_table = wants_table(request.headers.get("Accept", ""))
        queue: asyncio.Queue[Item] = asyncio.Queue()
        stop = self.watches.start(
            self.store, watch, asyncio.get_running_loop(), queue, self.bookmark_interval
        )
        if stop is None:
            raise ApiError(429, f"too many open watches (at most {self.watches.max_watches})")
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            while True:
                try:
                    event_type, doc, rv = await asyncio.wait_for(queue.get(), timeout=1.0)
                except TimeoutError:
                    if request.transport is None or request.transport.is_closing():
                        break
                    continue
                if event_type == "END":
                    break
                if event_type == "ERROR":
                    assert isinstance(doc, StoreError)
                    obj = from_store_error(doc, target.resource, target.group).status()
                elif event_type == "BOOKMARK":
                    obj = {
                        "kind": target.model.KIND,
                        "apiVersion": target.api_version,
                        "metadata": {"resourceVersion": rv, **(doc or {})},
                    }
                elif as_table:
                    obj = self._table(request, target, [doc], {"resourceVersion": rv})
                else:
                    obj = doc
                line = json.dumps({"type": event_type, "object": obj}, separators=(",", ":")) + "\n"
                await response.write(line.encode())
        except ConnectionResetError:
            _log.debug("watch client went away", kind=target.model.KIND)
        finally:
            stop.set()
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response


MAX_REQUEST_BODY = 3 * 1024 * 1024
"""The largest request body read, as the API server's limit (3 MiB); a larger one is answered 413
``RequestEntityTooLarge`` without being read further."""


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


async def _start(
    app: web.Application, bind: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, bind, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        # Setting up started the application's threads (the foreground collector): stop them.
        await runner.cleanup()
        raise
    host, bound_port = runner.addresses[0][:2]
    host = f"[{host}]" if ":" in host else host
    return runner, f"{'https' if ssl_context else 'http'}://{host}:{bound_port}"


async def serve(
    store: ObjectStore,
    bind: str,
    port: int,
    stopping: asyncio.Event,
    on_ready: Callable[[str], None],
    bookmark_interval: float = 5.0,
    max_watches: int = 64,
    ssl_context: ssl.SSLContext | None = None,
    *,
    authenticator: Authenticator,
    authorizer: Authorizer | None = None,
) -> None:
    """Serve until ``stopping`` is set (over HTTPS with ``ssl_context``), authenticating every request with
    ``authenticator`` and authorizing it with ``authorizer`` (by default :func:`~capa_py.apiserver.rbac.
    default_authorizer`: ``system:masters``, then the stored RBAC); ``on_ready`` gets the URL once the port
    is bound. The system Namespaces (``default``...) are created first where missing, and the store's
    identity is published (the ``capa-py-system/capa-py-store`` ConfigMap), so that clients of the served
    store share the identity of the store itself. The bootstrap RBAC policy is created where missing
    (:mod:`capa_py.apiserver.bootstrap_policy`)."""
    await asyncio.to_thread(ensure_system_namespaces, store)
    await asyncio.to_thread(ensure_bootstrap_policy, store)
    await asyncio.to_thread(publish_identity, store, store.uid)
    app = build_app(
        store,
        bookmark_interval=bookmark_interval,
        max_watches=max_watches,
        authenticator=authenticator,
        authorizer=authorizer if authorizer is not None else default_authorizer(store),
    )
    runner, url = await _start(app, bind, port, ssl_context)
    _log.info("serving the store over the Kubernetes API", url=url)
    try:
        on_ready(url)
        await stopping.wait()
    finally:
        transports = [c.transport for c in getattr(runner.server, "connections", ()) if c.transport]
        await runner.cleanup()
        # A TLS connection closes by waiting for the client's close_notify, which an idle keep-alive
        # client never sends: end those at once rather than leave their sockets to the closed loop.
        for transport in transports:
            transport.abort()
        await asyncio.sleep(0)
        _log.info("stopped serving", url=url)


LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")


class RunningServer:
    """A server running on its own event loop in a background thread, over HTTPS with a certificate
    authority of its own; :meth:`kubeconfig` and :meth:`client_context` carry an admin client certificate
    (``system:masters``) of that authority."""

    def __init__(
        self,
        url: str,
        handle: BackgroundLoop,
        files: ServingFiles,
        holder: tempfile.TemporaryDirectory[str],
        admin_token: str,
    ) -> None:
        self.url = url
        self.admin_token = admin_token
        """A bearer token of the admin (``system:masters``), known to this server only while it runs."""
        self.files = files
        self._handle = handle
        self._holder = holder
        self._issued = 0

    @property
    def ca_pem(self) -> bytes:
        """The certificate authority's certificate (what clients trust; it signs client certificates)."""
        return self.files.ca_cert.read_bytes()

    def client_certificate(self, user: str, groups: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
        """A client certificate and key (PEM) for ``user`` in ``groups``, signed by the server's authority."""
        return self.files.authority().issue_client(user, groups)

    def kubeconfig(
        self, name: str = "capa", user: str = ADMIN.username, groups: tuple[str, ...] = ADMIN.groups
    ) -> dict[str, Any]:
        """A kubeconfig for this server with a client certificate for ``user`` (the admin by default)."""
        from capa_py.apiserver.certificates import kubeconfig_document

        cert, key = self.client_certificate(user, groups)
        return kubeconfig_document(self.url, self.ca_pem, name, cert, key)

    def write_kubeconfig(self, path: Path, name: str = "capa") -> Path:
        """Write :meth:`kubeconfig` (the admin's) to ``path``, readable by its owner only."""
        from capa_py.apiserver.certificates import write_kubeconfig

        write_kubeconfig(path, self.kubeconfig(name))
        return path

    def client_context(
        self, user: str = ADMIN.username, groups: tuple[str, ...] = ADMIN.groups
    ) -> ssl.SSLContext:
        """A TLS client context that trusts the server and presents a client certificate for ``user``."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        cert, key = self.client_certificate(user, groups)
        self._issued += 1
        cert_file = Path(self._holder.name) / f"client-{self._issued}.crt"
        key_file = cert_file.with_suffix(".key")
        cert_file.write_bytes(cert)
        key_file.touch(mode=0o600)
        key_file.write_bytes(key)
        context.load_cert_chain(cert_file, key_file)
        return context

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving (open watches end) and wait for the thread; stopping twice is harmless."""
        if not self._handle.stop(timeout):
            raise RuntimeError("the API server thread did not stop")
        self._holder.cleanup()


def start_in_thread(
    store: ObjectStore,
    bind: str = "127.0.0.1",
    port: int = 0,
    bookmark_interval: float = 5.0,
    max_watches: int = 64,
    tokens: Mapping[str, reviews.User] | None = None,
    insecure_http: bool = False,
    authorizer: Authorizer | None = None,
) -> RunningServer:
    """Start serving in a background thread and return once the port is bound: over HTTPS with a new
    certificate authority (in a temporary directory removed on stop), authenticating every request
    (client certificates of that authority, ServiceAccount tokens it issues, ``tokens`` (a static token
    file's users) and :attr:`RunningServer.admin_token`, a random bearer token of the admin).

    ``insecure_http`` serves plain HTTP instead, on a loopback address only (``ValueError`` otherwise), for
    tests that must read the bytes on the wire: requests are still authenticated, by bearer token only."""
    if insecure_http and bind not in LOOPBACK_BINDS:
        raise ValueError(f"plain HTTP is served on a loopback address only, not {bind}")
    files, holder = ephemeral_serving_files(serving_hosts(bind))
    admin_token = secrets.token_urlsafe(32)
    known = {**(tokens or {}), admin_token: ADMIN}
    authenticator = Authenticator(store, ServiceAccountTokens(files.signing_key.read_bytes()), known)
    context = None if insecure_http else files.server_context()

    async def server(stopping: asyncio.Event, ready: Ready) -> None:
        await serve(
            store,
            bind,
            port,
            stopping,
            lambda url: ready({"url": url}),
            bookmark_interval,
            max_watches,
            context,
            authenticator=authenticator,
            authorizer=authorizer,
        )

    try:
        info, handle = start_loop_thread(server, "capa-apiserver")
    except Exception as exc:
        holder.cleanup()
        raise RuntimeError(f"the API server did not start: {exc}") from exc
    return RunningServer(info["url"], handle, files, holder, admin_token)
