"""What a request asks to do, in the terms authorization decides on: Kubernetes' request attributes.

A request under ``/api/VERSION`` or ``/apis/GROUP/VERSION`` with something after the version is a *resource
request*: its verb comes from the method (``create``, ``get``, ``update``, ``patch``, ``delete``), a GET on a
collection is a ``list`` (``watch`` when ``watch`` is true in the query) and a DELETE on a collection a
``deletecollection``; ``namespaces/NS/...`` names the namespace, and the parts after it are the resource, the
name and the subresource. A list selecting one name with a ``metadata.name`` field selector names it, so
that a rule limited to ``resourceNames`` can allow it. Anything else (``/healthz``, ``/version``, discovery's
``/api`` and ``/apis``) is a *non-resource request* whose verb is the method in lower case and whose
attributes are its path.

:func:`from_review` reads the same attributes from a SubjectAccessReview's ``resourceAttributes`` or
``nonResourceAttributes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

API_PREFIXES = ("api", "apis")
GROUPLESS_PREFIX = "api"
SPECIAL_VERBS = ("proxy", "watch")
"""Verbs a path may name before the resource (``/api/v1/watch/pods``, deprecated but still resolved)."""
NAMESPACE_SUBRESOURCES = ("status", "finalize")
"""What follows ``namespaces/NAME`` as the Namespace's own subresource rather than a resource in it."""

_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
_INTEGER_PARAMETERS = ("limit", "timeoutSeconds")


@dataclass(frozen=True)
class RequestInfo:
    """The attributes of one request (or of a review's question)."""

    is_resource_request: bool
    verb: str
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    def review_attributes(self) -> dict[str, str]:
        """The attributes as a SubjectAccessReview's spec carries them (empty fields omitted)."""
        if not self.is_resource_request:
            return {"path": self.path, "verb": self.verb}
        fields = {
            "namespace": self.namespace,
            "verb": self.verb,
            "group": self.api_group,
            "version": self.api_version,
            "resource": self.resource,
            "subresource": self.subresource,
            "name": self.name,
        }
        return {key: value for key, value in fields.items() if value}


def _bool(value: str) -> bool | None:
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def _is_watch(query: Mapping[str, Any]) -> bool:
    """Whether a GET on a collection is a watch: ``watch`` parsed as a Go boolean; when any list option does
    not parse, whether the first ``watch`` value is anything but false (as the resolver falls back)."""
    values = _values(query, "watch")
    parsed = _bool(values[0]) if values else False
    well_formed = parsed is not None and all(
        _integer(v) for key in _INTEGER_PARAMETERS for v in _values(query, key)
    )
    if well_formed:
        return bool(parsed)
    return bool(values) and values[0].lower() not in ("false", "0")


def _integer(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


def _values(query: Mapping[str, Any], key: str) -> list[str]:
    getall = getattr(query, "getall", None)
    if getall is not None:
        return [str(v) for v in getall(key, [])]
    value = query.get(key)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _selected_name(query: Mapping[str, Any]) -> str:
    """The name a ``metadata.name=NAME`` (or ``==``) requirement of the field selector requires, if any
    and if it is a valid path segment."""
    values = _values(query, "fieldSelector")
    if not values:
        return ""
    for requirement in values[0].split(","):
        field, operator, value = _split_requirement(requirement.strip())
        if field == "metadata.name" and operator in ("=", "==") and _valid_segment(value):
            return value
    return ""


def _split_requirement(requirement: str) -> tuple[str, str, str]:
    for operator in ("!=", "==", "="):
        field, found, value = requirement.partition(operator)
        if found:
            return field.strip(), operator, value.strip()
    return requirement, "", ""


def _valid_segment(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "%" not in name


def resolve(method: str, path: str, query: Mapping[str, Any]) -> RequestInfo:
    """The attributes of a request (``path`` already percent-decoded, as a server sees it)."""
    parts = list(path.strip("/").split("/")) if path.strip("/") else []
    non_resource = RequestInfo(False, method.lower(), path=path)
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix != GROUPLESS_PREFIX:
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    if parts[0] in SPECIAL_VERBS:
        if len(parts) < 2:
            # The API server refuses such a path; nothing is resolved from it.
            return RequestInfo(True, "", path=path, api_group=group, api_version=version)
        verb, parts = parts[0], parts[1:]
    else:
        verb = _METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    subresource = parts[2] if len(parts) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if _is_watch(query) else "list"
        name = _selected_name(query)
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(
        True,
        verb,
        path=path,
        api_group=group,
        api_version=version,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
    )


def from_review(attributes: Mapping[str, Any], resource_request: bool) -> RequestInfo:
    """The attributes of a SubjectAccessReview's ``resourceAttributes`` (``resource_request``) or
    ``nonResourceAttributes``."""

    def text(key: str) -> str:
        value = attributes.get(key)
        return value if isinstance(value, str) else ""

    if not resource_request:
        return RequestInfo(False, text("verb"), path=text("path"))
    return RequestInfo(
        True,
        text("verb"),
        api_group=text("group"),
        api_version=text("version"),
        namespace=text("namespace"),
        resource=text("resource"),
        subresource=text("subresource"),
        name=text("name"),
    )
