"""The audit's intent matching mirrors the engine's bounds: a resource made after the adoption window, or
one the intent's first examination did not see, is not "pending intent" (the engine will never adopt it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from capa_app.audit.classify import matches_intent
from capa_app.audit.model import Found
from capa_app.audit.records import Intent
from capa_py.api.aws import IntentRecord
from capa_py.engine.engine import PREEXISTING
from capa_py.engine.profiles import ADOPTION_WINDOW, CLOCK_SKEW

STARTED = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
REGION = "us-east-1"


def _intent(kind: str, request: dict[str, str], **examined: object) -> Intent:
    record = IntentRecord(
        kind=kind, started_at=STARTED, fingerprint="f", request={**request, PREEXISTING: "old-1"}, **examined
    )
    return Intent("alpha", "AWSCluster/default/alpha", "default", REGION, "role", record)


def _nat(created_at: datetime | None) -> Found:
    return Found(
        REGION,
        "nat-gateway",
        "nat-1",
        created_at=created_at,
        attributes={"subnet_id": "subnet-1", "allocation_ids": ["eipalloc-1"]},
    )


NAT_INTENT = _intent("nat-gateway", {"subnet_id": "subnet-1", "allocation_id": "eipalloc-1"})


def test_a_dated_resource_matches_only_inside_the_adoption_window() -> None:
    assert matches_intent(_nat(STARTED + timedelta(seconds=5)), NAT_INTENT)
    assert matches_intent(_nat(STARTED + timedelta(seconds=ADOPTION_WINDOW)), NAT_INTENT)
    assert not matches_intent(_nat(STARTED + timedelta(seconds=ADOPTION_WINDOW + 1)), NAT_INTENT)
    assert not matches_intent(_nat(STARTED - timedelta(seconds=CLOCK_SKEW + 1)), NAT_INTENT)
    assert not matches_intent(_nat(STARTED + timedelta(seconds=30)), NAT_INTENT, window=10.0)


def test_once_examined_only_what_the_first_examination_saw_matches() -> None:
    address = Found(REGION, "elastic-ip", "eipalloc-7", attributes={"domain": "vpc", "association_id": None})
    unexamined = _intent("elastic-ip", {"domain": "vpc"})
    saw_it = _intent("elastic-ip", {"domain": "vpc"}, examined_at=STARTED, seen=["eipalloc-7"])
    saw_another = _intent("elastic-ip", {"domain": "vpc"}, examined_at=STARTED, seen=["eipalloc-8"])

    assert matches_intent(address, unexamined), "undated and not yet examined: the engine may adopt it"
    assert matches_intent(address, saw_it)
    assert not matches_intent(address, saw_another), "appeared after the first examination"
