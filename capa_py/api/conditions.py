"""Helpers for status conditions, with Cluster API's semantics.

``lastTransitionTime`` moves only when a condition's status changes, so a controller that re-asserts the
same condition on every reconcile does not churn the object (and its watchers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from capa_py.api.meta import Condition, ConditionStatus, utcnow

READY = "Ready"


class HasConditions(Protocol):
    conditions: list[Condition]


def get_condition(holder: HasConditions, condition_type: str) -> Condition | None:
    return next((c for c in holder.conditions if c.type == condition_type), None)


def is_true(holder: HasConditions, condition_type: str) -> bool:
    condition = get_condition(holder, condition_type)
    return condition is not None and condition.status == "True"


def set_condition(
    holder: HasConditions,
    condition_type: str,
    status: ConditionStatus | bool,
    reason: str | None = None,
    message: str | None = None,
    severity: str | None = None,
    observed_generation: int | None = None,
) -> Condition:
    """Set (or replace) one condition, keeping the transition time when the status is unchanged."""
    if isinstance(status, bool):
        status = "True" if status else "False"
    previous = get_condition(holder, condition_type)
    transition = utcnow()
    if previous is not None and previous.status == status and previous.last_transition_time:
        transition = previous.last_transition_time
    if status == "True":
        severity = None
    elif severity is None:
        severity = "Info" if status == "Unknown" else "Warning"
    condition = Condition(
        type=condition_type,
        status=status,
        severity=severity,
        reason=reason,
        message=message,
        last_transition_time=transition,
        observed_generation=observed_generation,
    )
    holder.conditions = [c for c in holder.conditions if c.type != condition_type] + [condition]
    return condition


def mark_true(holder: HasConditions, condition_type: str, observed_generation: int | None = None) -> None:
    set_condition(holder, condition_type, True, observed_generation=observed_generation)


def mark_false(
    holder: HasConditions,
    condition_type: str,
    reason: str,
    message: str,
    severity: str = "Warning",
    observed_generation: int | None = None,
) -> None:
    set_condition(holder, condition_type, False, reason, message, severity, observed_generation)


def summarize_ready(
    holder: HasConditions,
    condition_types: Sequence[str],
    observed_generation: int | None = None,
    *,
    complete: bool | None = None,
) -> bool:
    """Set ``Ready`` as the summary of ``condition_types`` and return whether it is True.

    The first of them, in the order given, that is set but not True gives ``Ready`` its status, reason,
    message and severity. ``complete`` says whether the caller's pass finished:

    * None: the conditions alone decide; one not set yet makes ``Ready`` Unknown (``<Type>Pending``);
    * False: a condition not set yet belongs to a step the pass did not reach and is passed over; when
      nothing listed is pending, ``Ready`` is False (``Reconciling``: something the conditions do not
      cover is still under way);
    * True: a condition not set yet is passed over, and ``Ready`` is True when nothing listed is pending.
    """
    for condition_type in condition_types:
        condition = get_condition(holder, condition_type)
        if condition is None:
            if complete is not None:
                continue
            set_condition(
                holder,
                READY,
                "Unknown",
                f"{condition_type}Pending",
                f"{condition_type} not yet true",
                observed_generation=observed_generation,
            )
            return False
        if condition.status != "True":
            set_condition(
                holder,
                READY,
                condition.status,
                condition.reason or f"{condition_type}Pending",
                condition.message or f"{condition_type} not yet true",
                condition.severity,
                observed_generation=observed_generation,
            )
            return False
    if complete is False:
        set_condition(
            holder,
            READY,
            False,
            "Reconciling",
            "reconciling",
            "Info",
            observed_generation=observed_generation,
        )
        return False
    set_condition(holder, READY, True, observed_generation=observed_generation)
    return True
