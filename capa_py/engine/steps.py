"""The steps the strategy flows are made of: create, record, tag, roll back, forget a record.

Each step says what failing means for its flow: a record or tag that fails is retried
(:class:`~capa_py.engine.errors.RetryableError`), a rollback that fails leaves an orphan
(:class:`~capa_py.engine.errors.RollbackFailed`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TypeVar

from capa_py.api.aws import RecordedResource
from capa_py.api.meta import utcnow
from capa_py.aws.errors import AWSError, NotFound
from capa_py.cache.front import ReadThrough
from capa_py.engine.errors import RecordError, RetryableError, RollbackFailed
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.scope import Scope
from capa_py.engine.tokens import client_token as _token
from capa_py.engine.traits import Traits, choose_strategy
from capa_py.logging import get_logger

D = TypeVar("D")
_log = get_logger("engine")


def create(
    reads: ReadThrough[D],
    role: str,
    desired: D,
    tags: dict[str, str] | None,
    token: str | None,
    traits: Traits,
    scope: Scope,
) -> Observed:
    """Create the resource of ``role`` (noted by the front), report it and log it."""
    observed = reads.create(desired, tags, token, scope.cluster)
    if scope.events is not None:
        scope.events.created(reads.kind, role, observed.id)
    _log.info(
        "created",
        kind=reads.kind,
        role=role,
        resource_id=observed.id,
        strategy=choose_strategy(traits).label,
    )
    return observed


def client_token(scope: Scope, role: str) -> str:
    """The token for a create of ``role``: the owner's and the role's, or — when the role's recorded
    resource is gone (drift) — one derived from the lost id as well.

    AWS answers a token with the result of its first request for at least a day, even after that
    resource was deleted, so the lost resource's token would return the lost resource. A create with
    a record still in status happens only after drift under a token strategy (see ``Engine.ensure``); the
    lost record stays until its replacement is recorded, so a crash in between derives the same token
    again and gets the same replacement back.
    """
    lost = scope.recorder.recorded(role)
    return _token(scope.owner_uid, role if lost is None else f"{role}:replacing:{lost.id}")


def record(
    scope: Scope,
    role: str,
    rc: ResourceClass[D],
    observed: Observed,
    traits: Traits,
    tags_complete: bool,
    quiet: bool = False,
) -> None:
    """Record ``observed`` under ``role``; with ``quiet`` a failed write is logged (the update flow
    records it later) instead of raised."""
    resource = RecordedResource(
        kind=rc.kind,
        id=observed.id,
        strategy=choose_strategy(traits).label,
        tags_complete=tags_complete,
        created_at=observed.created_at.replace(microsecond=0) if observed.created_at else utcnow(),
    )
    try:
        scope.recorder.record(role, resource)
    except RecordError:
        if quiet:
            _log.info("status write failed; the update flow will record it", kind=rc.kind, role=role)
            return
        raise


def record_or_retry(
    scope: Scope, role: str, rc: ResourceClass[D], observed: Observed, traits: Traits, tags_complete: bool
) -> None:
    try:
        record(scope, role, rc, observed, traits, tags_complete)
    except RecordError as exc:
        raise RetryableError(
            f"{rc.kind} {observed.id}: recording failed, requeueing the create: {exc}"
        ) from exc


def tag_or_retry(rc: ResourceClass[D], observed: Observed, tags: Mapping[str, str]) -> None:
    if not tags:
        return
    try:
        rc.tag(observed.id, tags)
        observed.tags.update(tags)
    except AWSError as exc:
        raise RetryableError(f"{rc.kind} {observed.id}: tagging failed, reconciled on update: {exc}") from exc


def rollback(rc: ResourceClass[D], observed: Observed, role: str, why: str) -> None:
    """Delete a created resource that could not be recorded; always raises (retry, or orphaned)."""
    try:
        with contextlib.suppress(NotFound):  # already gone is what a rollback wants
            rc.delete(observed.id)
    except AWSError as exc:
        _log.error(
            "ORPHANED AWS RESOURCE: could not record it and could not delete it; delete it by hand or "
            "run `capa audit --delete`",
            kind=rc.kind,
            role=role,
            resource_id=observed.id,
            cause=why,
            delete_error=str(exc),
        )
        raise RollbackFailed(
            f"{rc.kind} {observed.id} was created but {why}, and deleting it failed ({exc}): it is orphaned",
            observed.id,
            rc.kind,
        ) from exc
    _log.warning(
        "rolled back a create that could not be recorded",
        kind=rc.kind,
        resource_id=observed.id,
        cause=why,
    )
    raise RetryableError(f"{rc.kind} {observed.id}: {why}; the create was rolled back and will be retried")


def forget_record(scope: Scope, role: str) -> None:
    try:
        scope.recorder.forget(role)
    except RecordError as exc:
        raise RetryableError(f"cannot drop the record of role {role}: {exc}") from exc


__all__ = [
    "client_token",
    "create",
    "forget_record",
    "record",
    "record_or_retry",
    "rollback",
    "tag_or_retry",
]
