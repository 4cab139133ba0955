"""``meta.k8s.io/v1`` Status objects: how the API server reports every failure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from capa_py.store.errors import AlreadyExists, Conflict, Expired, Invalid, NotFound, StoreError

REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass(frozen=True)
class Cause:
    field: str
    message: str
    reason: str = "FieldValueInvalid"

    def to_dict(self) -> dict[str, str]:
        document = {"message": self.message, "reason": self.reason}
        if self.field:  # as the API server omits an empty one
            document["field"] = self.field
        return document


@dataclass
class ApiError(Exception):
    """A failure answered with a Status: ``code`` is the HTTP status, ``reason`` the API's reason."""

    code: int
    message: str
    reason: str = ""
    name: str = ""
    kind: str = ""
    group: str = ""
    causes: Sequence[Cause] = field(default_factory=tuple)
    retry_after_seconds: int = 0

    def __post_init__(self) -> None:
        super().__init__(self.message)
        if not self.reason:
            self.reason = REASONS.get(self.code, "Unknown")

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.to_dict() for c in self.causes]
        if self.retry_after_seconds:
            details["retryAfterSeconds"] = self.retry_after_seconds
        document: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if details:
            document["details"] = details
        return document


def success(name: str, kind: str, group: str, uid: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "group": group, "kind": kind}
    if uid:
        details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def from_store_error(exc: StoreError, resource: str, group: str, name: str = "") -> ApiError:
    """The Status a store error maps onto, named as the API server names the resource
    (``awsclusters.infrastructure.cluster.x-k8s.io "x" not found``)."""
    qualified = f"{resource}.{group}" if group else resource
    if isinstance(exc, NotFound):
        return ApiError(404, f'{qualified} "{name}" not found', name=name, kind=resource, group=group)
    if isinstance(exc, AlreadyExists):
        return ApiError(
            409,
            f'{qualified} "{name}" already exists',
            "AlreadyExists",
            name=name,
            kind=resource,
            group=group,
        )
    if isinstance(exc, Conflict):
        return ApiError(
            409,
            f'Operation cannot be fulfilled on {qualified} "{name}": {exc}',
            "Conflict",
            name=name,
            kind=resource,
            group=group,
        )
    if isinstance(exc, Invalid):
        causes = (Cause(exc.field, str(exc).removeprefix(f"{exc.field}: ")),) if exc.field else ()
        return ApiError(
            422,
            f'{qualified} "{name}" is invalid: {exc}',
            name=name,
            kind=resource,
            group=group,
            causes=causes,
        )
    if isinstance(exc, Expired):
        return ApiError(410, str(exc), "Expired")
    return ApiError(exc.status, str(exc))
