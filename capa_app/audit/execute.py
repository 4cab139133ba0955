"""Carrying out a deletion plan: kind after kind in dependency order, retrying what AWS is not ready for.

Each kind's deletes are started together; those refused because a dependency is still going away
(``DependencyViolation``, ``ResourceInUse``, an address still in use) or because AWS throttled or failed
transiently are retried, with backoff, until ``dependency_timeout`` — every such refusal ends either deleted
or reported as failed, never unhandled. Slow deletes (instances, load balancers, NAT gateways, VPC
endpoints) are then waited for before the next kind, since what comes next depends on them. Security groups
first lose the rules by which they reference each other.

Right before each delete the caller's ``recheck`` may veto it: the store is read again, and a resource a
reconcile recorded (or a cluster that came back) since the audit is left alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import groupby

from capa_app.audit.deleters import DELETERS, revoke_cross_references
from capa_app.audit.model import (
    GLOBAL_REGION,
    AuditRow,
    DeletionPlan,
    DeletionReport,
    DeletionResult,
    Outcome,
    PlannedDeletion,
)
from capa_app.audit.plan import GOES_WITH_PARENT
from capa_py.aws.errors import AWSError, NotFound, Retryable
from capa_py.aws.session import AWSClients, ClientPool
from capa_py.logging import get_logger

_log = get_logger("audit.delete")

Recheck = Callable[[AuditRow], str | None]
"""Returns why a planned delete must not happen after all (None: go ahead)."""


@dataclass(frozen=True)
class DeletionSettings:
    dependency_timeout: float = 300.0
    """How long a delete refused for a dependency (or throttling) is retried."""
    wait_timeout: float = 900.0
    """How long a slow delete (a NAT gateway takes minutes) is waited for."""
    poll_interval: float = 5.0
    max_poll_interval: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


@dataclass
class _Attempt:
    step: PlannedDeletion
    attempts: int = 0
    error: AWSError | None = None
    result: DeletionResult | None = field(default=None)

    @property
    def row(self) -> AuditRow:
        return self.step.row


def _result(row: AuditRow, outcome: Outcome, detail: str = "", attempts: int = 0) -> DeletionResult:
    return DeletionResult(
        region=row.region,
        kind=row.kind,
        id=row.id,
        cluster=row.cluster,
        classification=row.classification,
        outcome=outcome,
        detail=detail,
        attempts=attempts,
    )


class PlanExecutor:
    def __init__(self, pool: ClientPool, settings: DeletionSettings, recheck: Recheck | None) -> None:
        self.pool = pool
        self.settings = settings
        self.recheck = recheck
        self.results: dict[tuple[str, str], DeletionResult] = {}

    def clients(self, region: str) -> AWSClients:
        return self.pool.for_region(None if region == GLOBAL_REGION else region)

    def record(self, attempt: _Attempt, outcome: Outcome, detail: str = "") -> None:
        result = _result(attempt.row, outcome, detail, attempt.attempts)
        self.results[(attempt.row.kind, attempt.row.id)] = result
        log = _log.warning if outcome == Outcome.FAILED else _log.info
        log("orphan " + outcome.value, kind=attempt.row.kind, resource_id=attempt.row.id, detail=detail)

    def run(self, plan: DeletionPlan) -> DeletionReport:
        for kind, group in groupby(plan.steps, key=lambda s: s.row.kind):
            self.run_kind(kind, list(group))
        for step in plan.steps:
            if step.with_parent is not None:
                self.settle_with_parent(step)
        skipped = [_result(s.row, Outcome.SKIPPED, s.reason) for s in plan.skipped]
        ordered = [self.results[(s.row.kind, s.row.id)] for s in plan.steps]
        return DeletionReport(results=[*ordered, *skipped])

    def run_kind(self, kind: str, steps: list[PlannedDeletion]) -> None:
        own: list[_Attempt] = []
        for step in steps:
            if step.with_parent is not None:
                continue  # settled once its parent's kind has run
            attempt = _Attempt(step)
            veto = self.recheck(step.row) if self.recheck is not None else None
            if veto is not None:
                self.record(attempt, Outcome.SKIPPED, veto)
                continue
            own.append(attempt)
        if kind == "security-group" and own:
            by_region: dict[str, list[str]] = {}
            for attempt in own:
                by_region.setdefault(attempt.row.region, []).append(attempt.row.id)
            for region, group_ids in by_region.items():
                try:
                    revoke_cross_references(self.clients(region), group_ids)
                except AWSError as exc:
                    _log.warning("could not revoke the groups' references to each other", error=str(exc))
        started = self.start_all(own)
        self.wait_for(kind, started)

    def start_all(self, attempts: list[_Attempt]) -> list[_Attempt]:
        deleter_of = DELETERS
        started: list[_Attempt] = []
        pending = attempts
        deadline = self.settings.clock() + self.settings.dependency_timeout
        delay = self.settings.poll_interval
        while pending:
            blocked: list[_Attempt] = []
            for attempt in pending:
                attempt.attempts += 1
                try:
                    deleter_of[attempt.row.kind].start(self.clients(attempt.row.region), attempt.row)
                except NotFound:
                    self.record(attempt, Outcome.ALREADY_GONE)
                except Retryable as exc:
                    attempt.error = exc
                    blocked.append(attempt)
                except AWSError as exc:
                    self.record(attempt, Outcome.FAILED, str(exc))
                else:
                    started.append(attempt)
            pending = blocked
            if not pending:
                break
            if self.settings.clock() >= deadline:
                for attempt in pending:
                    code = attempt.error.code if attempt.error else "?"
                    self.record(
                        attempt,
                        Outcome.FAILED,
                        f"still refused ({code}) after {attempt.attempts} attempts over "
                        f"{self.settings.dependency_timeout:g}s: {attempt.error}",
                    )
                break
            self.settings.sleep(delay)
            delay = min(delay * 2, self.settings.max_poll_interval)
        return started

    def wait_for(self, kind: str, started: list[_Attempt]) -> None:
        gone = DELETERS[kind].gone
        if gone is None:
            for attempt in started:
                self.record(attempt, Outcome.DELETED)
            return
        waiting = started
        deadline = self.settings.clock() + self.settings.wait_timeout
        delay = self.settings.poll_interval
        while waiting:
            still: list[_Attempt] = []
            for attempt in waiting:
                try:
                    finished = gone(self.clients(attempt.row.region), attempt.row)
                except NotFound:
                    finished = True
                except Retryable:
                    finished = False
                if finished:
                    self.record(attempt, Outcome.DELETED)
                else:
                    still.append(attempt)
            waiting = still
            if not waiting:
                return
            if self.settings.clock() >= deadline:
                for attempt in waiting:
                    self.record(
                        attempt,
                        Outcome.FAILED,
                        f"deletion started but not finished after {self.settings.wait_timeout:g}s",
                    )
                return
            self.settings.sleep(delay)
            delay = min(delay * 2, self.settings.max_poll_interval)

    def settle_with_parent(self, step: PlannedDeletion) -> None:
        parent = self.results.get((GOES_WITH_PARENT[step.row.kind], step.with_parent or ""))
        attempt = _Attempt(step)
        if parent is not None and parent.removed:
            self.record(attempt, Outcome.WITH_PARENT, f"with {parent.kind} {parent.id}")
        else:
            detail = parent.outcome.value if parent is not None else "not attempted"
            self.record(attempt, Outcome.FAILED, f"its {step.with_parent} was not deleted ({detail})")


def execute_plan(
    plan: DeletionPlan,
    pool: ClientPool,
    settings: DeletionSettings | None = None,
    recheck: Recheck | None = None,
) -> DeletionReport:
    """Delete what the plan says, in its order; report per resource what happened."""
    return PlanExecutor(pool, settings or DeletionSettings(), recheck).run(plan)
