"""What a workflow server knows, under one lock: the workflows of each Hardware (as last seen, newest
resourceVersion wins), the agent ids each Hardware answers to, the open agent streams and the
rejections; and the writes of workflow status that keep it current."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import grpc

from capa_py.api.tinkerbell import Workflow
from capa_py.store.errors import Conflict, NotFound
from capa_py.store.protocol import ObjectStore
from capa_py.tinkerbell.dispatch_streams import (
    HardwareKey,
    Refused,
    Session,
    WorkflowKey,
    hardware_of,
    key_of,
    workflow_id,
)


def _newer_or_same(candidate: str | None, known: str | None) -> bool:
    try:
        return int(candidate or "") >= int(known or "")
    except ValueError:
        return True


def _order(workflow: Workflow) -> tuple[datetime, str]:
    created = workflow.metadata.creation_timestamp or datetime.max.replace(tzinfo=UTC)
    return (created, workflow.metadata.name)


class DispatchState:
    """The workflow server's view of its store and its agents (the base of
    :class:`capa_py.tinkerbell.dispatch.Dispatcher`)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._hardware_locks: dict[HardwareKey, threading.Lock] = {}
        self._workflows: dict[WorkflowKey, Workflow] = {}
        self._by_hardware: dict[HardwareKey, set[WorkflowKey]] = {}
        self._hardware_ids: dict[HardwareKey, frozenset[str]] = {}
        """The agent ids each Hardware answers to: its name and its MACs (normalised)."""
        self._by_agent_id: dict[str, set[HardwareKey]] = {}
        self._sessions: list[Session] = []
        self._rejections: dict[WorkflowKey, tuple[int, datetime]] = {}
        self._own_writes: dict[WorkflowKey, str] = {}
        """The resourceVersion of each workflow's last state this server wrote itself and has acted on
        since: its watch event needs no second look (taken once, by :meth:`_written_here`)."""

    # -- the workflows --------------------------------------------------------------------------------
    def _remember(self, workflow: Workflow) -> None:
        """Index a workflow state (with the lock held), unless a newer one is known."""
        key = key_of(workflow)
        known = self._workflows.get(key)
        if known is not None:
            if not _newer_or_same(workflow.metadata.resource_version, known.metadata.resource_version):
                return
            self._by_hardware.get(hardware_of(known), set()).discard(key)
        self._workflows[key] = workflow
        self._by_hardware.setdefault(hardware_of(workflow), set()).add(key)

    def _forget(self, key: WorkflowKey) -> None:
        known = self._workflows.pop(key, None)
        self._own_writes.pop(key, None)
        if known is not None:
            self._by_hardware.get(hardware_of(known), set()).discard(key)
        self._rejections.pop(key, None)

    def _workflows_of(self, hardware: HardwareKey) -> list[Workflow]:
        with self._lock:
            keys = self._by_hardware.get(hardware, set())
            return sorted((self._workflows[k] for k in keys), key=_order)

    def _write(self, workflow: Workflow) -> Workflow:
        """Write a status change under optimistic concurrency; on Conflict the fresh object is indexed
        (or forgotten when gone) and Conflict is raised for the caller to decide again."""
        key = key_of(workflow)
        try:
            written = self.store.update_status(workflow)
        except (Conflict, NotFound):
            self._refresh(key)
            raise Conflict(f"workflow {workflow_id(key)} changed meanwhile") from None
        with self._lock:
            self._remember(written)
            if written.metadata.resource_version:
                self._own_writes[key] = written.metadata.resource_version
        return written

    def _written_here(self, workflow: Workflow) -> bool:
        """Whether this state is one this server wrote (with the lock held): its writer decided what to
        send after writing it, so the watch event that brings it back changes nothing."""
        key = key_of(workflow)
        if self._own_writes.get(key) != workflow.metadata.resource_version:
            return False
        del self._own_writes[key]
        return True

    def _known(self, key: WorkflowKey) -> Workflow | None:
        """The newest state of a workflow this server has seen (not a copy: never change it)."""
        with self._lock:
            return self._workflows.get(key)

    def _refresh(self, key: WorkflowKey) -> Workflow | None:
        try:
            fresh = self.store.get(Workflow, key[1], key[0])
        except NotFound:
            with self._lock:
                self._forget(key)
            return None
        with self._lock:
            self._remember(fresh)
        return fresh

    # -- the agents' streams --------------------------------------------------------------------------
    def _resolve(self, key: str) -> HardwareKey | None:
        """The Hardware an agent key names (with the lock held); Refused when two do."""
        found = sorted(self._by_agent_id.get(key, ()))
        if len(found) > 1:
            names = " and ".join(f"hardware {ns}/{name}" for ns, name in found)
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, f"agent id {key!r} matches {names}")
        return found[0] if found else None

    def _session_for(self, hardware: HardwareKey) -> Session | None:
        with self._lock:
            return self._session_for_locked(hardware)

    def _session_for_locked(self, hardware: HardwareKey) -> Session | None:
        return next((s for s in self._sessions if s.hardware == hardware), None)

    def sessions(self) -> list[Session]:
        with self._lock:
            return list(self._sessions)

    def _hardware_lock(self, hardware: HardwareKey) -> threading.Lock:
        with self._lock:
            return self._hardware_locks.setdefault(hardware, threading.Lock())

    # -- rejections and introspection -----------------------------------------------------------------
    def _backing_off(self, key: WorkflowKey, now: datetime) -> bool:
        with self._lock:
            entry = self._rejections.get(key)
        return entry is not None and entry[1] > now

    def known_state(self, key: WorkflowKey) -> str | None:
        """The state of a workflow as this server last saw it (None when unknown)."""
        with self._lock:
            known = self._workflows.get(key)
        return known.status.state if known is not None else None

    def held_back_until(self, key: WorkflowKey) -> datetime | None:
        with self._lock:
            entry = self._rejections.get(key)
        return entry[1] if entry is not None else None
