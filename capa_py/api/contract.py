"""What an infrastructure object reports to Cluster API core under both contracts, v1beta1 and v1beta2.

capa-py's infrastructure kinds (AWSCluster, AWSMachine, TinkerbellCluster, TinkerbellMachine) carry one
status that a reader of either contract understands (``docs/cluster-api.md``, "Contracts"):

* v1beta1: ``status.ready``, ``status.failureReason``/``failureMessage`` and ``status.conditions`` in
  Cluster API's v1beta1 condition shape (with ``severity``) — what capa-py's controllers and embedded core
  keep writing and reading;
* v1beta2: ``status.initialization.provisioned`` (set when ``ready`` first becomes true, never unset) and
  ``status.v1beta2.conditions``, the same conditions as ``metav1.Condition`` (a reason always set and in
  the API's CamelCase form, a ``lastTransitionTime`` that moves only when the status changes), with the
  ``Paused`` condition Cluster API's own controllers report on theirs: True (reason ``Paused``) while the
  object's Cluster is paused (``spec.paused`` or the ``cluster.x-k8s.io/paused`` annotation) or the object
  carries that annotation, and the controller leaves it alone; False (``NotPaused``) otherwise.

:meth:`InfrastructureStatus.sync_contract` derives the v1beta2 fields from the v1beta1 ones; every status
write of a controller (``controllers.base.patch_status``) runs it, so the two never disagree.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import Field

from capa_py.api.meta import Condition, ConditionStatus, KubeModel, Time, utcnow

REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
"""``metav1.Condition``'s reason: CamelCase, as the API server's schema for it requires."""
REASON_MAX_LENGTH = 1024
MESSAGE_MAX_LENGTH = 32768
TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
TYPE_MAX_LENGTH = 316

READY = "Ready"
NOT_READY_REASON = "NotReady"
READY_UNKNOWN_REASON = "ReadyUnknown"
PAUSED = "Paused"
PAUSED_REASON = "Paused"
NOT_PAUSED_REASON = "NotPaused"

_REASON = re.compile(REASON_PATTERN)
_SEPARATOR = re.compile(r"[^A-Za-z0-9_,:]+")


class MetaCondition(KubeModel):
    """A ``metav1.Condition``: what a v1beta2 reader of Cluster API expects, every required field set."""

    type: str = Field(max_length=TYPE_MAX_LENGTH, pattern=TYPE_PATTERN)
    status: ConditionStatus
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: Time
    reason: str = Field(min_length=1, max_length=REASON_MAX_LENGTH, pattern=REASON_PATTERN)
    message: str = Field(max_length=MESSAGE_MAX_LENGTH)


class Initialization(KubeModel):
    """``status.initialization`` of the v1beta2 contract."""

    provisioned: bool | None = None
    """True once the infrastructure was first fully provisioned (``status.ready`` first true); never unset."""


class V1Beta2Status(KubeModel):
    """``status.v1beta2``: the conditions in ``metav1.Condition`` form, where Cluster API core reads them
    first (before ``status.conditions``) whichever contract it picked for the kind."""

    conditions: list[MetaCondition] = Field(default_factory=list)


def v1beta2_reason(condition: Condition) -> str:
    """The condition's reason in ``metav1.Condition``'s form: the v1beta1 reason with the characters the
    form refuses dropped (the letter after a dropped run upper-cased: ``InvalidAMIID.NotFound`` →
    ``InvalidAMIIDNotFound``); without one, ``<Type>`` when True, ``NotReady``/``ReadyUnknown`` for
    ``Ready`` otherwise, ``Not<Type>``/``<Type>Unknown`` for other types."""
    if condition.reason:
        parts = [p for p in _SEPARATOR.split(condition.reason) if p]
        joined = "".join(parts[:1] + [p[:1].upper() + p[1:] for p in parts[1:]])
        joined = joined.lstrip("0123456789_,:").rstrip(",:")[:REASON_MAX_LENGTH].rstrip(",:")
        if _REASON.match(joined):
            return joined
    if condition.status == "True":
        return condition.type
    if condition.type == READY:
        return NOT_READY_REASON if condition.status == "False" else READY_UNKNOWN_REASON
    return f"Not{condition.type}" if condition.status == "False" else f"{condition.type}Unknown"


def v1beta2_condition(
    condition: Condition, previous: MetaCondition | None, generation: int | None, now: datetime | None = None
) -> MetaCondition:
    """``condition`` as a ``metav1.Condition``; ``previous`` (the same type's, as last written) keeps its
    ``lastTransitionTime`` while the status is unchanged."""
    reason = v1beta2_reason(condition)
    message = condition.message or ""
    if condition.reason and reason != condition.reason:
        # The reason had to be rewritten: the message keeps the original (an AWS error code, say).
        message = f"{condition.reason}: {message}" if message else condition.reason
    if previous is not None and previous.status == condition.status:
        transition = previous.last_transition_time
    else:
        transition = condition.last_transition_time or now or utcnow()
    observed = condition.observed_generation if condition.observed_generation is not None else generation
    return MetaCondition(
        type=condition.type,
        status=condition.status,
        observed_generation=observed,
        last_transition_time=transition,
        reason=reason,
        message=message[:MESSAGE_MAX_LENGTH],
    )


class InfrastructureStatus(KubeModel):
    """Base of an infrastructure kind's status: the v1beta1 fields every subclass has (``ready``,
    ``conditions``) and the v1beta2 fields derived from them."""

    ready: bool = False
    conditions: list[Condition] = Field(default_factory=list)
    initialization: Initialization | None = None
    v1beta2: V1Beta2Status | None = Field(default=None, alias="v1beta2")

    @property
    def provisioned(self) -> bool:
        return bool(self.initialization and self.initialization.provisioned)

    def sync_contract(self, generation: int | None, paused: str | None = None) -> None:
        """Write the v1beta2 contract's fields from the v1beta1 ones (idempotent), and the ``Paused``
        condition: True with ``paused`` as its message when given (why the controller leaves the object
        alone), False otherwise."""
        if self.ready and not self.provisioned:
            self.initialization = Initialization(provisioned=True)
        previous = {c.type: c for c in (self.v1beta2.conditions if self.v1beta2 else [])}
        now = utcnow()
        converted = [
            v1beta2_condition(c, previous.get(c.type), generation, now)
            for c in self.conditions
            if c.type != PAUSED
        ]
        status: ConditionStatus = "True" if paused is not None else "False"
        before = previous.get(PAUSED)
        converted.append(
            MetaCondition(
                type=PAUSED,
                status=status,
                observed_generation=generation,
                last_transition_time=before.last_transition_time
                if before is not None and before.status == status
                else now,
                reason=PAUSED_REASON if paused is not None else NOT_PAUSED_REASON,
                message=(paused or "")[:MESSAGE_MAX_LENGTH],
            )
        )
        self.v1beta2 = V1Beta2Status(conditions=converted)

    @property
    def paused_condition(self) -> MetaCondition | None:
        """The v1beta2 ``Paused`` condition as last written, if any."""
        return next((c for c in (self.v1beta2.conditions if self.v1beta2 else []) if c.type == PAUSED), None)
