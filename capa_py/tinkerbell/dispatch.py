"""What the workflow server decides: which workflow goes to which agent, and what an agent's event does.

The gRPC layer (:mod:`capa_py.tinkerbell.server`) only moves messages; everything here is synchronous and
runs on informer threads, on the timer thread and in the calls the gRPC layer makes.

* **Agents.** An agent id names a Hardware by its name or by any of its MAC addresses (colon, dash or dot
  notation, any case). A connected agent is a :class:`Session`, bound to the Hardware its id matches;
  an id no Hardware matches yet waits, and is bound (and served) when such a Hardware appears. An id two
  Hardware match (in two namespaces, or a name and a MAC of two machines) is refused.
* **Identity.** The id only says which Hardware a stream claims to be; its credentials
  (:mod:`capa_py.tinkerbell.agentauth`) must prove it: checked when the stream opens, when it is bound to a
  Hardware that appears later, and again before anything is sent on it (so a rotated token ends a stream
  that no longer proves its Hardware, ``PERMISSION_DENIED``). Every event is checked against the
  Hardware of the workflow it names.
* **One stream per Hardware.** A second stream for a Hardware that already has one is refused
  ``ALREADY_EXISTS``; the first keeps its workflow. An agent that lost its connection reconnects once
  the server has noticed the old stream is gone (at once on a closed connection; by keepalive, within
  about 80 seconds, on a vanished one): a stream that proves the same Hardware is no reason to believe
  the old one is dead, and taking over would hand a running workflow (and its secrets) to whoever holds
  the credentials, with the real agent cut off.
* **Dispatch.** Per Hardware, one workflow at a time: while one is Scheduled, Running or Cancelling
  nothing new is sent; otherwise the oldest (``creationTimestamp``, then name) Pending workflow with
  ``Prepared=True``, not being deleted and not backing off after a rejection is moved to Scheduled
  (:func:`capa_py.tinkerbell.states.scheduled`, written with its resourceVersion: a conflict re-reads
  and decides again, so two servers never schedule one workflow twice) and then sent as StartWorkflow.
  A session that connects while its Hardware's workflow is Scheduled or Running is sent it again; one
  whose workflow is Cancelling is sent StopWorkflow.
* **Stops.** A workflow the controller moves to Cancelling is stopped on its agent's stream; a workflow
  sent to a session that ends (or disappears) without that session's own events saying so — the
  supervisor failed it or gave up on a cancellation — is stopped too, so the agent does not go on.
* **Events** change a workflow only through :mod:`capa_py.tinkerbell.states`, written under optimistic
  concurrency; a refused event (:class:`Refused`) changes nothing. An event starts from the newest state
  the server knows (its watch, its own writes), not a read of the store: the status write, made before the
  reply, is its one store round trip; a state the server has not seen yet conflicts, is read once, and
  the event is applied to it again.
* **Rejections** put a workflow back to Pending and hold it back for ``base * 2**(n-1)`` seconds (capped)
  after its n-th rejection. The count lives in this process's memory: a restarted server forgets it.

Workflows and Hardware are followed with informers (watches), never polled. The watch event of a state the
server wrote itself is passed over: the writer indexed it and decided what to send once it was stored.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import TypeVar, cast

import grpc

from capa_py.api.conditions import is_true
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import END_STATES, Hardware, Workflow
from capa_py.logging import get_logger
from capa_py.runtime.informer import CachedStore, Informer
from capa_py.store.errors import Conflict, StoreError
from capa_py.store.protocol import ObjectStore, WatchEvent
from capa_py.tinkerbell import states
from capa_py.tinkerbell.agentauth import NONE, Authenticator, Credentials
from capa_py.tinkerbell.backoff import Backoff, Clock, wall_clock
from capa_py.tinkerbell.dispatch_commands import (
    SecretReader,
    SecretUnavailable,
    start_command,
    stop_command,
    store_secret_reader,
)
from capa_py.tinkerbell.dispatch_events import apply_event, event_target
from capa_py.tinkerbell.dispatch_sessions import AgentSessions
from capa_py.tinkerbell.dispatch_streams import (
    HardwareKey,
    Metrics,
    NoMetrics,
    Outbox,
    Refused,
    Session,
    WorkflowKey,
    hardware_of,
    key_of,
    normalise_agent_id,
    workflow_id,
)
from capa_py.tinkerbell.proto import workflow_pb2 as pb

_log = get_logger("tinkerbell.server")

T = TypeVar("T", bound=KubeObject)

PREPARED = "Prepared"
"""The condition the workflow controller sets once a workflow's actions are rendered."""
ACTIVE_STATES = frozenset({"Scheduled", "Running", "Cancelling"})
WRITE_ATTEMPTS = 8


class SharedReads(CachedStore):
    """Reads of informed kinds return the cached objects themselves: for readers that never change them."""

    def get(self, kind: type[T], name: str, namespace: str | None = None) -> T:
        informer = self.informer_for(kind)
        if informer is None:
            return self.store.get(kind, name, namespace)
        return cast(T, informer.peek(name, namespace))


class Dispatcher(AgentSessions):
    """The server's decisions over one store (see the module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        backoff: Backoff | None = None,
        clock: Clock = wall_clock,
        metrics: Metrics | None = None,
        allow_unauthenticated_agents: bool = False,
    ) -> None:
        super().__init__(store)
        self.backoff = backoff or Backoff()
        self.clock = clock
        self.metrics = metrics or NoMetrics()
        self._timer = threading.Condition()
        self._woken = False
        self._stop = threading.Event()
        self._informers = [Informer(store, Hardware), Informer(store, Workflow), Informer(store, Secret)]
        self._informers[0].add_handler(self._on_hardware)
        self._informers[1].add_handler(self._on_workflow)
        self._informers[2].add_handler(self._on_secret)
        # Hardware and Secrets (credentials, envValueFrom) are read from the watches' caches: the
        # controller's role lists and watches Secrets but never gets one.
        self.reads = CachedStore(store, [self._informers[0], self._informers[2]])
        # The authenticator only looks (at every event and dispatch): it reads the cached objects
        # themselves, without the copy a reader that may change them gets.
        self.auth = Authenticator(
            SharedReads(store, self.reads.informers.values()), allow_unauthenticated_agents
        )
        self.read_secret = store_secret_reader(self.reads)
        self._timer_thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self, sync_timeout: float = 60.0) -> None:
        """Follow the store, and return once Hardware and Workflows are known."""
        for informer in self._informers:
            informer.start(self._stop)
        for informer in self._informers:
            if not informer.wait_for_sync(sync_timeout):
                raise TimeoutError(f"could not list the {informer.kind.KIND} objects of the store")
        self._timer_thread = threading.Thread(target=self._run_timer, name="capa-tink-backoff", daemon=True)
        self._timer_thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake()
        for informer in self._informers:
            informer.join(5.0)
        if self._timer_thread is not None:
            self._timer_thread.join(5.0)

    def wake(self) -> None:
        """Look again at the back-offs now (the clock moved, or a back-off was recorded)."""
        with self._timer:
            self._woken = True
            self._timer.notify_all()

    # -- following the store ------------------------------------------------------------------------
    def _on_workflow(self, event: WatchEvent[KubeObject]) -> None:
        workflow = event.object
        assert isinstance(workflow, Workflow)
        key = key_of(workflow)
        with self._lock:
            if event.type != "DELETED" and self._written_here(workflow):
                return  # the server's own write: indexed when written, and acted on by its writer
            before = self._workflows.get(key)
            if event.type == "DELETED":
                self._forget(key)
            else:
                self._remember(workflow)
            affected = {hardware_of(workflow)} | ({hardware_of(before)} if before is not None else set())
        for hardware in affected:
            self.evaluate(hardware)

    def _on_secret(self, event: WatchEvent[KubeObject]) -> None:
        """A Secret changed: a workflow held back for a missing ``envValueFrom`` Secret may go now, and
        a rotated token must no longer serve the streams that presented the old one."""
        namespace = event.object.metadata.namespace or "default"
        with self._lock:
            bound = {s.hardware for s in self._sessions if s.hardware is not None}
            waiting = {
                hardware_of(w)
                for key, w in self._workflows.items()
                if key[0] == namespace and w.status.state in ("Pending", *ACTIVE_STATES)
            }
        for hardware in sorted(h for h in bound if h[0] == namespace or h in waiting):
            self.evaluate(hardware)

    # -- dispatching --------------------------------------------------------------------------------
    def evaluate(self, hardware: HardwareKey) -> None:
        """Send the hardware's agent what it should have now (start, stop or nothing). A store that
        cannot be written is logged: the next change of the hardware's workflows looks again."""
        try:
            self._evaluate(hardware)
        except StoreError as exc:
            _log.warning("cannot dispatch: the store failed", hardware="/".join(hardware), error=str(exc))

    def _evaluate(self, hardware: HardwareKey) -> None:
        with self._hardware_lock(hardware):
            for _ in range(WRITE_ATTEMPTS):
                session = self._session_for(hardware)
                if session is None:
                    return
                try:
                    self._dispatch(session, hardware)
                    return
                except Conflict:
                    continue  # the fresh state is indexed: decide again
            _log.warning("gave up dispatching after repeated conflicts", hardware="/".join(hardware))

    def _dispatch(self, session: Session, hardware: HardwareKey) -> None:
        problem = self.auth.check(session.credentials, hardware)
        if problem is not None:
            # Credentials revoked or rotated since the stream opened: nothing more goes to it.
            with self._lock:
                self._end(session, *problem)
            return
        workflows = self._workflows_of(hardware)
        by_key = {key_of(w): w for w in workflows}
        for key in sorted(session.started | session.stopped):
            current = by_key.get(key)
            state = current.status.state if current is not None else None
            if current is None or state in END_STATES or state == "Pending":
                if state != "Pending":
                    # Ended without this agent saying so (the supervisor's timeouts, or gone): make sure
                    # the agent stops, even if it was told to before (a forced Canceled).
                    self._send_stop(session, key, "ended without the agent's report")
                session.started.discard(key)
                session.stopped.discard(key)
        active = [w for w in workflows if w.status.state in ACTIVE_STATES]
        for workflow in active:
            key = key_of(workflow)
            if workflow.status.state == "Cancelling":
                if key not in session.stopped:
                    session.started.discard(key)
                    self._send_stop(session, key, "cancelling")
            elif key not in session.started:
                try:
                    command = start_command(workflow, self.read_secret)
                except SecretUnavailable as exc:
                    _log.warning("workflow not sent again", workflow=workflow_id(key), error=str(exc))
                    continue
                session.started.add(key)
                session.outbox.send(command)
                _log.info("workflow sent again", workflow=workflow_id(key), agent=session.agent_id)
        if active:
            return
        now = self.clock()
        for workflow in workflows:
            key = key_of(workflow)
            if not self._runnable(workflow) or self._backing_off(key, now):
                continue
            try:
                command = start_command(workflow, self.read_secret)
            except SecretUnavailable as exc:
                # Held Pending: looked at again on the next change of the hardware's workflows.
                _log.warning("workflow not dispatched", workflow=workflow_id(key), error=str(exc))
                continue
            scheduled = states.for_transition(workflow)
            try:
                states.scheduled(scheduled, now)
            except states.TransitionError as exc:
                _log.warning("workflow cannot be scheduled", workflow=workflow_id(key), error=str(exc))
                continue
            written = self._write(scheduled)
            session.started.add(key)
            self.metrics.dispatched()
            session.outbox.send(command)
            _log.info(
                "workflow dispatched",
                workflow=workflow_id(key),
                agent=session.agent_id,
                actions=[name for name, _ in written.ordered_actions()],
            )
            return

    def _send_stop(self, session: Session, key: WorkflowKey, why: str) -> None:
        session.stopped.add(key)
        self.metrics.stopped()
        session.outbox.send(stop_command(key))
        _log.info("workflow stop sent", workflow=workflow_id(key), agent=session.agent_id, why=why)

    @staticmethod
    def _runnable(workflow: Workflow) -> bool:
        return (
            workflow.status.state == "Pending"
            and is_true(workflow.status, PREPARED)
            and not workflow.being_deleted
            and bool(workflow.status.actions)
        )

    # -- back-off -----------------------------------------------------------------------------------
    def _record_rejection(self, key: WorkflowKey, now: datetime) -> float:
        with self._lock:
            count = self._rejections.get(key, (0, now))[0] + 1
            delay = self.backoff.delay(count)
            self._rejections[key] = (count, now + timedelta(seconds=delay))
        self.wake()
        return delay

    def _run_timer(self) -> None:
        """Offer a workflow again once its back-off has passed."""
        while not self._stop.is_set():
            now = self.clock()
            with self._lock:
                due = {
                    hardware_of(self._workflows[k])
                    for k, (_, until) in self._rejections.items()
                    if until <= now and k in self._workflows
                }
                waiting = [until for _, until in self._rejections.values() if until > now]
            for hardware in due:
                self.evaluate(hardware)
            with self._timer:
                if self._stop.is_set():
                    return
                # Real seconds until the next back-off ends by this clock; a clock that jumps calls wake().
                timeout = min(((min(waiting) - now).total_seconds() if waiting else 3600.0), 3600.0)
                if not self._woken:  # a wake() while this pass looked must not be lost
                    self._timer.wait(max(timeout, 0.01))
                self._woken = False

    # -- events -------------------------------------------------------------------------------------
    def publish(self, event: pb.Event, credentials: Credentials = NONE) -> None:
        """Apply an agent's event to its workflow; Refused (nothing changed) when it cannot be, or when
        the credentials do not prove the workflow's Hardware."""
        kind = event.WhichOneof("event") or ""
        try:
            if (problem := self.auth.unauthenticated(credentials)) is not None:
                raise Refused(*problem)
            self._publish(event, kind, credentials)
        except Refused as exc:
            self.metrics.event(kind or "none", exc.code.name.lower())
            _log.info(
                "event refused",
                workflow=event.workflow_id,
                event_type=kind,
                code=exc.code.name,
                reason=exc.message,
            )
            raise
        self.metrics.event(kind, "ok")

    def _publish(self, event: pb.Event, kind: str, credentials: Credentials) -> None:
        key, action = event_target(event, kind)
        missing = Refused(grpc.StatusCode.NOT_FOUND, f"workflow {event.workflow_id} not found")
        # The newest state this server knows (its watch, its own writes); read from the store only when
        # unknown. A stale one costs nothing but a retry: the write carries its resourceVersion, and a
        # conflict reads the store again.
        current = self._known(key) or self._refresh(key)
        if current is None:
            raise missing
        hardware = hardware_of(current)
        if (problem := self.auth.check(credentials, hardware)) is not None:
            raise Refused(*problem)
        with self._hardware_lock(hardware):
            for _ in range(WRITE_ATTEMPTS):
                if action and action not in current.status.actions:
                    raise Refused(
                        grpc.StatusCode.NOT_FOUND, f"workflow {event.workflow_id} has no action {action!r}"
                    )
                # An event changes the status only: the rest is shared with the known state, not copied.
                changed = states.for_transition(current)
                now = self.clock()
                try:
                    apply_event(changed, event, kind, action, now)
                except states.TransitionError as exc:
                    raise Refused(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
                try:
                    written = self._write(changed)
                except Conflict:
                    # The write read the store's state on its conflict (or forgot the workflow, gone).
                    fresh = self._known(key)
                    if fresh is None:
                        raise missing from None
                    current = fresh
                    continue
                break
            else:
                raise Refused(grpc.StatusCode.ABORTED, f"workflow {event.workflow_id} kept changing; retry")
            self._after_event(key, kind, written, now)
        _log.info(
            "event applied",
            workflow=event.workflow_id,
            event_type=kind,
            action=action or None,
            state=written.status.state,
        )
        self.evaluate(hardware)

    def _after_event(self, key: WorkflowKey, kind: str, written: Workflow, now: datetime) -> None:
        """What the sessions remember of a workflow the agent itself moved on."""
        state = written.status.state
        if state in END_STATES or state == "Pending":
            with self._lock:
                for session in self._sessions:
                    session.started.discard(key)
                    session.stopped.discard(key)
                if state in END_STATES:
                    self._rejections.pop(key, None)
        if kind == "workflow_rejected" and state == "Pending":
            delay = self._record_rejection(key, now)
            self.metrics.rejected()
            _log.info("workflow rejected; held back", workflow=workflow_id(key), seconds=delay)


__all__ = [
    "Backoff",
    "Dispatcher",
    "Outbox",
    "Refused",
    "SecretReader",
    "SecretUnavailable",
    "Session",
    "normalise_agent_id",
    "start_command",
    "stop_command",
    "workflow_id",
]
