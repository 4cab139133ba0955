"""The query parameters of a get, list or watch, read and checked as the API server reads them.

The API server decodes ``ListOptions`` from the query first (a number that does not parse is a 400
BadRequest naming the parse error), then validates the combination (a 422 Invalid naming ``ListOptions``
and the field: ``resourceVersionMatch`` without ``resourceVersion``, ``sendInitialEvents`` on a list, a
watch's ``sendInitialEvents`` without ``resourceVersionMatch=NotOlderThan``...), then its storage parses the
``resourceVersion``. A list with a malformed one is answered 400; kube-apiserver answers a watch or a get
with one 500 InternalError, which capa serve does not copy: the parameter is the client's error, so every
request naming a malformed ``resourceVersion`` is answered 400 BadRequest (docs/conformance.md lists this
difference). A ``resourceVersion`` the store has not reached yet is waited for a moment, then answered 504
Timeout with the cause ``ResourceVersionTooLarge``, as the API server answers a get or a list; a watch from
it stays open and sends nothing until the store gets there.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from capa_py.api.meta import KubeObject
from capa_py.apiserver.status import ApiError, Cause
from capa_py.store.protocol import ObjectStore

EXACT = "Exact"
NOT_OLDER_THAN = "NotOlderThan"
TOO_LARGE_WAIT = 3.0
"""How long a get or list waits for a resourceVersion the store has not reached (the API server's 3 s)."""
_POLL = 0.1
_UINT = re.compile(r"[0-9]+")
_INT = re.compile(r"[+-]?[0-9]+")
_UINT64_MAX = 2**64 - 1
_INT64 = (-(2**63), 2**63 - 1)


def query_bool(value: str | None) -> bool:
    """A boolean query parameter as the API server converts it: absent, ``0`` and ``false`` (any case) are
    false, anything else (``1``, ``true``, ``yes``, even an empty value) is true."""
    if value is None:
        return False
    return value != "0" and value.lower() != "false"


def parse_int(value: str) -> int:
    """A query integer as Go's ``strconv.ParseInt`` reads it: 400 BadRequest with its message otherwise."""
    if not _INT.fullmatch(value):
        raise ApiError(400, f'strconv.ParseInt: parsing "{value}": invalid syntax')
    number = int(value)
    if not _INT64[0] <= number <= _INT64[1]:
        raise ApiError(400, f'strconv.ParseInt: parsing "{value}": value out of range')
    return number


def parse_resource_version(value: str | None) -> int | None:
    """The resourceVersion as a number (None when absent or empty): 400 BadRequest naming the parameter
    when it is not an unsigned 64-bit integer."""
    if not value:
        return None
    problem = "invalid syntax"
    if _UINT.fullmatch(value):
        if int(value) <= _UINT64_MAX:
            return int(value)
        problem = "value out of range"
    raise ApiError(
        400,
        f'invalid resource version: resourceVersion: Invalid value: "{value}": '
        f'strconv.ParseUint: parsing "{value}": {problem}',
    )


@dataclass(frozen=True)
class ListOptions:
    watch: bool
    resource_version: str | None
    resource_version_match: str | None
    send_initial_events: bool | None
    allow_bookmarks: bool
    timeout: float | None
    """``timeoutSeconds``: None for none (0 is none too, as the API server takes it)."""
    limit: int | None
    """None for no limit (0 and below are none, as the API server takes them)."""
    continue_token: str | None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> ListOptions:
        """The options of a list or watch: 400 for a number that does not parse, 422 for a combination the
        API server refuses, 400 for a malformed resourceVersion."""
        limit_text = query.get("limit")
        limit = parse_int(limit_text) if limit_text else None
        timeout_text = query.get("timeoutSeconds")
        timeout = parse_int(timeout_text) if timeout_text else None
        initial = query.get("sendInitialEvents")
        options = cls(
            watch=query_bool(query.get("watch")),
            resource_version=query.get("resourceVersion") or None,
            resource_version_match=query.get("resourceVersionMatch") or None,
            send_initial_events=None if initial is None else query_bool(initial),
            allow_bookmarks=query_bool(query.get("allowWatchBookmarks")),
            timeout=None if not timeout else float(timeout),
            limit=limit if limit is not None and limit > 0 else None,
            continue_token=query.get("continue") or None,
        )
        options.validate()
        parse_resource_version(options.resource_version)
        return options

    def validate(self) -> None:
        match = self.resource_version_match
        causes: list[Cause] = []

        def forbidden(field: str, message: str) -> None:
            causes.append(Cause(field, f"Forbidden: {message}", "FieldValueForbidden"))

        def unsupported(supported: tuple[str, ...]) -> None:
            listed = ", ".join(f'"{s}"' for s in supported)
            causes.append(
                Cause(
                    "resourceVersionMatch",
                    f'Unsupported value: "{match}": supported values: {listed}',
                    "FieldValueNotSupported",
                )
            )

        if self.watch:
            if self.send_initial_events is not None and match != NOT_OLDER_THAN:
                forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                )
            if match:
                if self.send_initial_events is None:
                    forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    )
                if match != NOT_OLDER_THAN:
                    unsupported((NOT_OLDER_THAN,))
                if self.continue_token:
                    forbidden(
                        "resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided"
                    )
        else:
            if match:
                if not self.resource_version:
                    forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    )
                if self.continue_token:
                    forbidden(
                        "resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided"
                    )
                if match not in (EXACT, NOT_OLDER_THAN):
                    unsupported((EXACT, NOT_OLDER_THAN, ""))
                if match == EXACT and self.resource_version == "0":
                    forbidden(
                        "resourceVersionMatch",
                        'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                    )
            if self.send_initial_events is not None:
                forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list")
        if causes:
            listed = ", ".join(f"{c.field}: {c.message}" for c in causes)
            listed = f"[{listed}]" if len(causes) > 1 else listed
            raise ApiError(
                422,
                f'ListOptions.meta.k8s.io "" is invalid: {listed}',
                kind="ListOptions",
                group="meta.k8s.io",
                causes=causes,
            )


def current_resource_version(store: ObjectStore, model: type[KubeObject]) -> int | None:
    """The store's newest resourceVersion (None when the store cannot tell)."""
    current = getattr(store, "current_resource_version", None)
    text = str(current()) if callable(current) else store.list(model).resource_version
    return int(text) if text and text.isdigit() else None


def wait_for_resource_version(
    store: ObjectStore, model: type[KubeObject], resource_version: str | None, wait: float | None = None
) -> None:
    """Return once the store has reached ``resource_version`` (at once for none, or ``0``); 504 Timeout
    with the cause ``ResourceVersionTooLarge`` when it has not after ``wait`` seconds, as the API server
    answers. A malformed one is a 400 BadRequest naming the parameter. Blocking: run it in a thread."""
    wanted = parse_resource_version(resource_version)
    if not wanted:
        return
    deadline = time.monotonic() + (TOO_LARGE_WAIT if wait is None else wait)
    while True:
        current = current_resource_version(store, model)
        if current is None or current >= wanted:
            return
        if time.monotonic() >= deadline:
            raise ApiError(
                504,
                f"Timeout: Too large resource version: {wanted}, current: {current}",
                "Timeout",
                causes=[Cause("", "Too large resource version", "ResourceVersionTooLarge")],
                retry_after_seconds=1,
            )
        time.sleep(_POLL)
