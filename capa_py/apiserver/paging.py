"""Lists a page at a time: ``limit`` and ``continue`` as kube-apiserver answers them.

A continue token carries the list's resourceVersion and the last (namespace, name) served, so the next page
continues after it in the same order; ``remainingItemCount`` says how many are left.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from capa_py.apiserver.resources import Target
from capa_py.apiserver.status import ApiError
from capa_py.store.errors import StoreError
from capa_py.store.protocol import ObjectStore


def encode_continue(resource_version: str, after: tuple[str, str]) -> str:
    raw = json.dumps({"rv": resource_version, "after": list(after)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[str, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        namespace, name = data["after"]
        return str(data["rv"]), (str(namespace), str(name))
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise ApiError(400, "the continue token is not valid") from exc


def list_page(
    store: ObjectStore,
    target: Target,
    label_selector: str | None,
    field_selector: str | None,
    limit: int | None,
    token: str | None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One page of a list and the list's metadata (resourceVersion, continue, remainingItemCount)."""
    try:
        found = store.list(target.model, target.namespace, label_selector, field_selector)
    except StoreError as exc:
        raise target.api_error(exc) from exc
    items = [((o.metadata.namespace or "", o.metadata.name), o) for o in found]
    resource_version = found.resource_version
    if token:
        resource_version, after = decode_continue(token)
        items = [(key, o) for key, o in items if key > after]
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if limit and len(items) > limit:
        page = items[:limit]
        metadata["continue"] = encode_continue(resource_version, page[-1][0])
        metadata["remainingItemCount"] = len(items) - limit
        items = page
    return [target.render(o) for _, o in items], metadata
