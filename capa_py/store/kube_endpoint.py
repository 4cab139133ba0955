"""How the Kubernetes store reaches one kind over the official ``kubernetes`` client, and what an API
failure means as a store error.

:class:`Endpoint` picks the client API of a kind (``CustomObjectsApi`` for custom kinds, ``CoreV1Api``,
``CoordinationV1Api`` or ``ApiextensionsV1Api`` for built-in ones) and reads every answer as the server's
JSON; :func:`store_error` maps every API error once onto :mod:`capa_py.store.errors`; :func:`api_client`,
:func:`client_from_kubeconfig` and :func:`client_from_environment` make the client a store talks through.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from capa_py.api.meta import KubeObject
from capa_py.scratch import kube_client_files
from capa_py.store.errors import (
    AlreadyExists,
    Conflict,
    Expired,
    Invalid,
    NotFound,
    ObjectRef,
    StoreError,
    Unavailable,
)

REQUEST_TIMEOUT = 60.0


def _status_of(exc: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(exc.body or b"{}")
    except (ValueError, TypeError):
        return {}
    return body if isinstance(body, dict) else {}


def store_error(exc: Exception, what: str | ObjectRef, server: str) -> StoreError:
    """The store error an API failure means; ``what`` names the object (``Cluster default/demo``); a 404
    is :class:`NotFound` about it when it is an :class:`ObjectRef`."""
    if not isinstance(exc, ApiException):
        return Unavailable(server, f"the API server does not answer: {exc}")
    status = _status_of(exc)
    message = str(status.get("message") or exc.reason or "")
    reason = str(status.get("reason") or "")
    code = int(exc.status or 0)
    if code == 404:
        return NotFound(f"{what} not found", what if isinstance(what, ObjectRef) else None)
    if code == 409 and reason == "AlreadyExists":
        return AlreadyExists(f"{what} already exists")
    if code == 409:
        return Conflict(
            f"{what}: the object has been modified (the resourceVersion written is stale) or a precondition "
            f"failed; read it again and re-apply the change ({message})"
        )
    if code == 422:
        causes = [
            (str(c.get("field") or ""), str(c.get("message") or ""))
            for c in (status.get("details") or {}).get("causes") or []
        ]
        field, first = causes[0] if causes else ("", message)
        return Invalid(first or message, field, causes)
    if code == 400:
        return Invalid(message)
    if code == 410:
        return Expired(f"{what}: {message or 'the resourceVersion is too old'}; list again")
    if code in (401, 403):
        return Unavailable(server, f"the API server refused the request ({code} {reason}): {message}")
    return Unavailable(server, f"the API server failed ({code} {reason or exc.reason}): {message}")


CONNECTION_POOL_SIZE = 64
"""Connections kept open to the API server: enough for every worker of ``capa controller`` and its
watches (the client's default, five per CPU, makes busy workers open and discard connections)."""


def api_client(configuration: client.Configuration) -> client.ApiClient:
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    return client.ApiClient(configuration)


def client_from_kubeconfig(path: str | Path, context: str | None = None) -> client.ApiClient:
    """A client of the cluster a kubeconfig file names (its current context, or ``context``)."""
    location = Path(path).expanduser()
    if not location.is_file():
        raise Unavailable(str(location), "no kubeconfig file there")
    try:
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(location),
            context=context,
            client_configuration=configuration,
            persist_config=False,
            temp_file_path=kube_client_files(),
        )
        return api_client(configuration)
    except (
        ConfigException,
        yaml.YAMLError,
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
        OSError,
    ) as exc:
        raise Unavailable(str(location), f"not a usable kubeconfig: {exc}") from exc


def client_from_environment() -> client.ApiClient:
    """The default chain: ``KUBECONFIG`` (the first file it lists), ``~/.kube/config``, then the
    in-cluster service account."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return client_from_kubeconfig(listed[0])
    home = Path("~/.kube/config").expanduser()
    if home.is_file():
        return client_from_kubeconfig(home)
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise Unavailable(
            "the Kubernetes API", f"no KUBECONFIG, no {home} and not in a cluster ({exc})"
        ) from exc
    return api_client(configuration)


def _snake(kind: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


class Endpoint:
    """The calls of one kind's REST resource, answering the server's JSON documents."""

    def __init__(self, api: client.ApiClient, kind: type[KubeObject]) -> None:
        self.kind = kind
        group, _, version = kind.API_VERSION.rpartition("/")
        self.group, self.version = group, version
        if group == "":
            self._api: Any = client.CoreV1Api(api)
        elif group == "coordination.k8s.io":
            self._api = client.CoordinationV1Api(api)
        elif group == "apiextensions.k8s.io":
            self._api = client.ApiextensionsV1Api(api)
        else:
            self._api = client.CustomObjectsApi(api)
        self.custom = isinstance(self._api, client.CustomObjectsApi)
        self._snake = _snake(kind.KIND)
        if not self.custom and not hasattr(self._api, f"read_{self._scope()}{self._snake}"):
            raise Invalid(f"kind {kind.API_VERSION}/{kind.KIND} cannot be reached over the API", "kind")

    def _scope(self) -> str:
        return "namespaced_" if self.kind.NAMESPACED else ""

    def _method(self, verb: str, suffix: str = "") -> Callable[..., Any]:
        if self.custom:
            scope = "namespaced" if self.kind.NAMESPACED else "cluster"
            return getattr(self._api, f"{verb}_{scope}_custom_object{suffix}")  # type: ignore[no-any-return]
        return getattr(self._api, f"{verb}_{self._scope()}{self._snake}{suffix}")  # type: ignore[no-any-return]

    def _args(self, namespace: str | None, name: str | None = None) -> list[Any]:
        """Positional arguments: the custom object API's (group, version, [namespace,] plural, [name]);
        the typed APIs' ([name,] [namespace])."""
        if self.custom:
            args: list[Any] = [self.group, self.version]
            if self.kind.NAMESPACED:
                args.append(namespace)
            args.append(self.kind.PLURAL)
            if name is not None:
                args.append(name)
            return args
        args = [] if name is None else [name]
        if self.kind.NAMESPACED:
            args.append(namespace)
        return args

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        data = json.loads(response.data or b"{}")
        return data if isinstance(data, dict) else {}

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        return self._json(method(*args, _preload_content=False, **kwargs))

    def create(self, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(self._method("create"), *self._args(namespace), body)

    def read(self, namespace: str | None, name: str) -> dict[str, Any]:
        verb = "get" if self.custom else "read"
        return self._call(self._method(verb), *self._args(namespace, name))

    def replace(self, namespace: str | None, name: str, body: dict[str, Any], status: bool) -> dict[str, Any]:
        method = self._method("replace", "_status" if status else "")
        return self._call(method, *self._args(namespace, name), body)

    def delete(
        self, namespace: str | None, name: str, propagation: str, resource_version: str | None
    ) -> dict[str, Any]:
        options: dict[str, Any] = {"propagationPolicy": propagation}
        if resource_version:
            options["preconditions"] = {"resourceVersion": resource_version}
        return self._call(self._method("delete"), *self._args(namespace, name), body=options)

    def _list_method(self, namespace: str | None) -> tuple[Callable[..., Any], list[Any]]:
        if not self.kind.NAMESPACED or namespace is not None:
            return self._method("list"), self._args(namespace)
        if self.custom:
            return self._api.list_cluster_custom_object, [self.group, self.version, self.kind.PLURAL]
        return getattr(self._api, f"list_{self._snake}_for_all_namespaces"), []

    def list(self, namespace: str | None, **query: Any) -> dict[str, Any]:
        method, args = self._list_method(namespace)
        return self._call(method, *args, **query)

    def watch(self, namespace: str | None, read_timeout: float, **query: Any) -> Any:
        """The streaming response of a watch (the caller reads it line by line and releases it)."""
        method, args = self._list_method(namespace)
        timeouts = (REQUEST_TIMEOUT, read_timeout)
        return method(*args, watch=True, _preload_content=False, _request_timeout=timeouts, **query)
