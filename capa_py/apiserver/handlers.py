"""The API server's handlers of a resource: create, get, list, watch, replace, patch (server-side apply too)
and delete, each answered in the API server's wire form (JSON, or a Table when ``Accept`` asks for one).

:class:`ResourceHandlers` holds what the handlers share (the guarded store, the served CRDs, the open
watches, the foreground collector); :class:`~capa_py.apiserver.routing.ApiServer` routes a request to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.apiserver import (
    authorization,
    fieldmanager,
    paging,
    protobuf,
    resources,
    serverside,
    tokenrequest,
)
from capa_py.apiserver.crd_kinds import CrdKinds
from capa_py.apiserver.fieldvalidation import FieldValidation
from capa_py.apiserver.foreground import ForegroundCollector
from capa_py.apiserver.listoptions import ListOptions, query_bool, wait_for_resource_version
from capa_py.apiserver.patch import APPLY, check_media_type
from capa_py.apiserver.rbac import Authorizer
from capa_py.apiserver.status import ApiError, Cause, from_store_error
from capa_py.apiserver.tables import table, wants_table
from capa_py.apiserver.watch import Item, Watches, WatchRequest
from capa_py.logging import get_logger
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore
from capa_py.store.selectors import FieldSelector, LabelSelector

_log = get_logger("apiserver")

MAX_REQUEST_BODY = 3 * 1024 * 1024
"""The largest request body read, as the API server's limit (3 MiB); a larger one is answered 413
``RequestEntityTooLarge`` without being read further."""


def json_response(document: Any, status: int = 200) -> web.Response:
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


def dry_run_of(method: str, values: Any) -> bool:
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


class ResourceHandlers:
    """The handlers of the resources a server serves, and the state they share."""

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

    # -- resources ------------------------------------------------------------------------------------
    async def _resource(self, request: web.Request, target: resources.Target) -> web.StreamResponse:
        query = request.query
        method = request.method
        dry_run = dry_run_of(method, query.getall("dryRun", []))
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
            dry_run = dry_run or dry_run_of(method, options.get("dryRun") or [])
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
        response = json_response(doc, status)
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
            paging.list_page,
            self.store,
            target,
            query.get("labelSelector"),
            query.get("fieldSelector"),
            limit,
            query.get("continue"),
        )
        if wants_table(request.headers.get("Accept", "")):
            return json_response(self._table(request, target, items, metadata))
        return json_response(
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
