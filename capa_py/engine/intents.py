"""Intents: what makes a create with neither tags, token nor key recoverable after a crash.

Before such a create the engine writes an *intent* to the owner's status, with the candidates that
already existed (:func:`write_intent`); after a crash between the create and its record,
:func:`adopt_intent` finds the one resource the interrupted create made and adopts it, or reports that it
cannot decide. That adoption is bounded by the profile's adoption window and by what the intent's first
examination saw (see docs/strategies.md, "Intents").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TypeVar

from capa_py.api.aws import IntentRecord
from capa_py.engine.errors import RecordError, RetryableError, UndecidableIntent
from capa_py.engine.lookup import compared
from capa_py.engine.profiles import EndpointProfile
from capa_py.engine.resource import Observed, ResourceClass
from capa_py.engine.scope import Scope
from capa_py.logging import get_logger

D = TypeVar("D")
_log = get_logger("engine")
PREEXISTING = "preexisting"
"""The intent's request key listing the candidates that existed when it was written."""


def _fingerprint(values: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(values), sort_keys=True).encode()).hexdigest()[:16]


def adopt_intent(
    rc: ResourceClass[D],
    role: str,
    desired: D,
    scope: Scope,
    profile: EndpointProfile,
    clock: Callable[[], datetime],
) -> Observed | None:
    """After a crash between create and record: find the one resource the interrupted create made.

    Evidence bounds it (see docs/strategies.md, "Intents"): candidates that existed when the intent was
    written are excluded; a candidate whose creation time AWS reports must have been created within
    ``[started_at - clock_skew, started_at + adoption_window]``; the first examination is written into
    the intent and later ones consider only what it saw; a first examination after the window that
    sees a candidate without a creation time cannot attribute it (undecidable). One candidate left is
    adopted (after the comparison every adoption makes), none means create anew, several are
    undecidable.
    """
    intent = scope.recorder.intent(role)
    if intent is None:
        return None
    now = clock()
    window_end = intent.started_at + timedelta(seconds=profile.adoption_window)
    earliest = intent.started_at - timedelta(seconds=profile.clock_skew)
    preexisting = set(filter(None, intent.request.get(PREEXISTING, "").split(",")))
    candidates = [
        c
        for c in rc.describe_candidates(desired)
        if c.id not in preexisting and (c.created_at is None or earliest <= c.created_at <= window_end)
    ]
    if intent.examined_at is None:
        examined_at = now
        _note_examination(rc, role, intent, now, sorted(c.id for c in candidates), scope)
    else:
        examined_at = intent.examined_at
        seen_first = set(intent.seen)
        candidates = [c for c in candidates if c.id in seen_first]
    undated = sorted(c.id for c in candidates if c.created_at is None)
    if examined_at > window_end and undated:
        raise UndecidableIntent(
            f"{rc.kind} for role {role}: the interrupted create of "
            f"{intent.started_at:%Y-%m-%d %H:%M:%S} was first examined "
            f"{(examined_at - intent.started_at).total_seconds():.0f}s later, after the "
            f"{profile.adoption_window:.0f}s adoption window, and {', '.join(undated)} cannot be "
            "dated: it may be someone else's; nothing is adopted. Check it (see `capa audit`); once it "
            "is deleted (or tagged by its owner) the next reconcile creates anew",
            sorted(c.id for c in candidates),
        )
    if len(candidates) == 1:
        _log.warning(
            "adopting the resource an interrupted create made",
            kind=rc.kind,
            role=role,
            resource_id=candidates[0].id,
            intent_started=str(intent.started_at),
        )
        return compared(rc, candidates[0], desired, "adopted from an interrupted create's intent")
    if len(candidates) > 1:
        ids = sorted(c.id for c in candidates)
        raise UndecidableIntent(
            f"{rc.kind} for role {role}: an interrupted create may have made one of {', '.join(ids)}; "
            "cannot decide which; delete the strays (see `capa audit`): the next reconcile adopts the "
            "one left",
            ids,
        )
    return None


def _note_examination(
    rc: ResourceClass[D], role: str, intent: IntentRecord, now: datetime, seen: list[str], scope: Scope
) -> None:
    """Write what the first examination of an intent saw, before deciding anything from it."""
    examined = intent.model_copy(update={"examined_at": now, "seen": seen})
    try:
        scope.recorder.write_intent(role, examined)
    except RecordError as exc:
        raise RetryableError(
            f"{rc.kind} for role {role}: cannot record the examination of the intent; nothing adopted"
        ) from exc


def write_intent(
    rc: ResourceClass[D], role: str, desired: D, scope: Scope, needed: bool, clock: Callable[[], datetime]
) -> None:
    """Write the intent of a create of ``role`` (when ``needed``), with the candidates that exist now."""
    if not needed:
        return
    request = dict(rc.fingerprint(desired))
    request[PREEXISTING] = ",".join(sorted(c.id for c in rc.describe_candidates(desired)))
    intent = IntentRecord(
        kind=rc.kind, started_at=clock(), fingerprint=_fingerprint(request), request=request
    )
    try:
        scope.recorder.write_intent(role, intent)
    except RecordError as exc:
        raise RetryableError(
            f"{rc.kind} for role {role}: cannot write the intent; nothing was created"
        ) from exc


__all__ = ["PREEXISTING", "adopt_intent", "write_intent"]
