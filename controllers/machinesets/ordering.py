"""When a Machine counts as ready, available or failed, and the order a scale-down deletes Machines in."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from capa_py.api.cluster import Machine
from capa_py.api.conditions import READY, get_condition
from capa_py.api.machinesets import DELETE_MACHINE_ANNOTATION, DeletePolicy
from capa_py.api.meta import KubeObject


def created_at(obj: KubeObject) -> datetime:
    """The object's creation time; the earliest time when it has none yet."""
    return obj.metadata.creation_timestamp or datetime.min.replace(tzinfo=UTC)


def machine_ready(machine: Machine) -> bool:
    """Ready as Cluster API core counts replicas: the Machine's Ready condition is true."""
    condition = get_condition(machine.status, READY)
    return not machine.being_deleted and condition is not None and condition.status == "True"


def machine_available(machine: Machine, min_ready_seconds: int, now: datetime) -> bool:
    """Ready for at least ``min_ready_seconds``."""
    if not machine_ready(machine):
        return False
    if min_ready_seconds <= 0:
        return True
    condition = get_condition(machine.status, READY)
    since = condition.last_transition_time if condition is not None else None
    return since is None or (now - since).total_seconds() >= min_ready_seconds


def machine_failed(machine: Machine) -> bool:
    return bool(machine.status.failure_reason or machine.status.failure_message)


def deletion_order(machines: Sequence[Machine], policy: DeletePolicy) -> list[Machine]:
    """The Machines in the order a scale-down deletes them: those already being deleted, those annotated
    ``cluster.x-k8s.io/delete-machine``, failed or not ready ones, then the rest by ``policy`` (newest or
    oldest first by creation time; by name for ``Random``, as Cluster API core orders equals)."""

    def grade(machine: Machine) -> int:
        if machine.being_deleted:
            return 0
        if DELETE_MACHINE_ANNOTATION in machine.metadata.annotations:
            return 1
        if machine_failed(machine) or not machine_ready(machine):
            return 2
        return 3

    ordered = sorted(machines, key=lambda m: m.name)
    if policy == "Random":
        return sorted(ordered, key=grade)
    newest_first = policy == "Newest"
    ordered.sort(key=lambda m: (created_at(m), m.name), reverse=newest_first)
    return sorted(ordered, key=grade)
