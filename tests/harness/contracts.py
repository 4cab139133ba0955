"""What a Cluster API reader of the v1beta2 contract requires of an infrastructure object's conditions."""

from __future__ import annotations

import re
from typing import Any

REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
"""``metav1.Condition``'s reason (the pattern of its OpenAPI schema)."""
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def assert_valid_meta_conditions(status: dict[str, Any]) -> list[dict[str, Any]]:
    """``status.v1beta2.conditions`` as the wire has them, each a valid ``metav1.Condition`` (the required
    fields, the reason's form, an RFC 3339 time), one per v1beta1 condition, with the same status, and the
    v1beta2-only ``Paused`` condition False (the controller is at work on the object)."""
    v1beta1 = {c["type"]: c["status"] for c in status["conditions"]}
    conditions: list[dict[str, Any]] = status["v1beta2"]["conditions"]
    for condition in conditions:
        assert {"type", "status", "reason", "message", "lastTransitionTime"} <= set(condition), condition
        assert "severity" not in condition, condition
        assert REASON.match(condition["reason"]), condition
        assert TIME.match(condition["lastTransitionTime"]), condition
        assert condition["status"] in ("True", "False", "Unknown"), condition
    assert {c["type"]: c["status"] for c in conditions} == {**v1beta1, "Paused": "False"}
    paused = next(c for c in conditions if c["type"] == "Paused")
    assert (paused["reason"], paused["message"]) == ("NotPaused", ""), paused
    return conditions
