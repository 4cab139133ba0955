"""The size limits a client of the API server observes on a write, checked before an object is admitted.

* ``metadata.annotations``: keys and values together at most 256 KiB (422, ``FieldValueTooLong``), each key a
  qualified name (422, ``FieldValueInvalid``);
* a ConfigMap's ``data`` and ``binaryData`` together, a Secret's ``data`` (with ``stringData``): at most
  1 MiB (422, ``FieldValueTooLong``; the API server names the whole ConfigMap, ``[]``, and a Secret's
  ``data``);
* a Namespace's and a Service's name: a DNS label (no dots, at most 63 characters; 422 naming
  ``metadata.name``);
* any object: at most etcd's request limit (1.5 MiB) as stored. kube-apiserver passes a larger custom object
  on to etcd and answers its refusal, ``etcdserver: request is too large``, 500; capa serve answers it 413
  RequestEntityTooLarge with the same message, the client's object being the problem, not the server.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from capa_py.api.meta import validate_label_key
from capa_py.apiserver.status import ApiError, Cause

MAX_ANNOTATIONS_BYTES = 256 * 1024
MAX_DATA_BYTES = 1024 * 1024
MAX_OBJECT_BYTES = 1536 * 1024
"""etcd's default ``--max-request-bytes``, the largest object the API server can store."""


def _decoded_length(value: Any) -> int:
    if not isinstance(value, str):
        return 0
    try:
        return len(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return len(value)  # not base64: the model's validation names it


def _text_length(value: Any) -> int:
    """A string's length in UTF-8 bytes, without encoding an ASCII one (no copy of a large value)."""
    if not isinstance(value, str):
        return 0
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


def stored_size(value: Any) -> int:
    """About how many bytes ``value`` takes as compact JSON, counted without writing it out."""
    if isinstance(value, dict):
        return 2 + sum(stored_size(k) + 1 + stored_size(v) + 1 for k, v in value.items())
    if isinstance(value, list):
        return 2 + sum(stored_size(v) + 1 for v in value)
    if isinstance(value, str):
        return _text_length(value) + 2
    return len(json.dumps(value))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def too_long(path: str, limit: int) -> Cause:
    return Cause(path, f"Too long: may not be more than {limit} bytes", "FieldValueTooLong")


LABEL_NAMED = frozenset({"Namespace", "Service"})
"""Kinds whose names are DNS labels (at most 63 characters, no dots) rather than DNS subdomains."""
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _name_causes(kind: str, name: Any) -> list[Cause]:
    """A Namespace's or Service's name that is a DNS subdomain but no DNS label (a name that is not even a
    subdomain is the model's to report)."""
    if kind not in LABEL_NAMED or not isinstance(name, str) or len(name) > 253:
        return []
    if not _DNS_SUBDOMAIN.fullmatch(name):
        return []
    if "." in name:
        return [Cause("metadata.name", f"Invalid value: {json.dumps(name)}: must not contain dots")]
    if len(name) > 63:
        too_long_name = [
            Cause("metadata.name", f"Invalid value: {json.dumps(name)}: must be no more than 63 characters")
        ]
        if kind == "Namespace":  # labelled with its name before it is validated, as the API server does
            too_long_name.append(
                Cause("metadata.labels", f"Invalid value: {json.dumps(name)}: must be no more than 63 bytes")
            )
        return too_long_name
    return []


def causes(kind: str, doc: dict[str, Any]) -> list[Cause]:
    """What in ``doc`` (a ``kind`` object as sent) is over a limit, or is no valid annotation key, or (a
    Namespace, a Service) a name that is no DNS label."""
    metadata = _mapping(doc.get("metadata"))
    found = _name_causes(kind, metadata.get("name"))
    annotations = _mapping(metadata.get("annotations"))
    size = sum(_text_length(k) + _text_length(v) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        found.append(too_long("metadata.annotations", MAX_ANNOTATIONS_BYTES))
    for key in annotations:
        try:
            validate_label_key(str(key))
        except ValueError:
            found.append(
                Cause("metadata.annotations", f"Invalid value: {json.dumps(key)}: invalid annotation key")
            )
    if kind == "ConfigMap":
        data = sum(_text_length(v) for v in _mapping(doc.get("data")).values())
        binary = sum(_decoded_length(v) for v in _mapping(doc.get("binaryData")).values())
        if data + binary > MAX_DATA_BYTES:
            found.append(too_long("[]", MAX_DATA_BYTES))
    elif kind == "Secret":
        sizes = {k: _decoded_length(v) for k, v in _mapping(doc.get("data")).items()}
        sizes.update({k: _text_length(v) for k, v in _mapping(doc.get("stringData")).items()})
        if sum(sizes.values()) > MAX_DATA_BYTES:
            found.append(too_long("data", MAX_DATA_BYTES))
    return found


def check_stored_size(doc: dict[str, Any]) -> None:
    """413 RequestEntityTooLarge for an object too large to store (see the module's note)."""
    if stored_size(doc) > MAX_OBJECT_BYTES:
        raise ApiError(413, "etcdserver: request is too large", "RequestEntityTooLarge")
