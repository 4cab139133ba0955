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
  concurrency; a refused event (:class:`Refused`) changes nothing.
* **Rejections** put a workflow back to Pending and hold it back for ``base * 2**(n-1)`` seconds (capped)
  after its n-th rejection. The count lives in this process's memory: a restarted server forgets it.

Workflows and Hardware are followed with informers (watches), never polled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NoReturn, Protocol

import grpc

from capa_py.api.conditions import is_true
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import END_STATES, Hardware, SecretKeySelector, Workflow
from capa_py.api.tinkerbell_checks import normalise_mac
from capa_py.logging import get_logger
from capa_py.runtime.informer import CachedStore, Informer
from capa_py.store.errors import Conflict, NotFound, StoreError
from capa_py.store.protocol import ObjectStore, WatchEvent
from capa_py.tinkerbell import states
from capa_py.tinkerbell.agentauth import NONE, Authenticator, Credentials
from capa_py.tinkerbell.proto import workflow_pb2 as pb

_log = get_logger("tinkerbell.server")

PREPARED = "Prepared"
"""The condition the workflow controller sets once a workflow's actions are rendered."""
ACTIVE_STATES = frozenset({"Scheduled", "Running", "Cancelling"})
WRITE_ATTEMPTS = 8

Clock = Callable[[], datetime]
HardwareKey = tuple[str, str]
WorkflowKey = tuple[str, str]


def wall_clock() -> datetime:
    return datetime.now(UTC)


def workflow_id(key: WorkflowKey) -> str:
    """The wire id of a workflow: ``<namespace>/<name>``."""
    return f"{key[0]}/{key[1]}"


def key_of(obj: KubeObject) -> tuple[str, str]:
    return (obj.metadata.namespace or "default", obj.metadata.name)


def hardware_of(workflow: Workflow) -> HardwareKey:
    ref = workflow.spec.hardware_ref
    return (ref.namespace or workflow.metadata.namespace or "default", ref.name)


def normalise_agent_id(agent_id: str) -> str:
    """A MAC in lowercase colon form, anything else lowercased (Hardware names are lowercase)."""
    text = agent_id.strip()
    return normalise_mac(text) or text.lower()


def _newer_or_same(candidate: str | None, known: str | None) -> bool:
    try:
        return int(candidate or "") >= int(known or "")
    except ValueError:
        return True


@dataclass(frozen=True)
class Backoff:
    """How long a rejected workflow is held back: ``base * 2**(n-1)`` seconds after the n-th rejection,
    at most ``maximum``."""

    base: float = 10.0
    maximum: float = 300.0

    def delay(self, rejections: int) -> float:
        return float(min(self.base * 2 ** min(max(rejections - 1, 0), 62), self.maximum))


class Refused(Exception):
    """An RPC refused with a gRPC status code; nothing was changed."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


class Outbox(Protocol):
    """Where a session's commands go (the agent's stream)."""

    def send(self, response: pb.GetWorkflowsResponse) -> None: ...

    def abort(self, code: grpc.StatusCode, message: str) -> None: ...


class Metrics(Protocol):
    def agents(self, count: int) -> None: ...

    def dispatched(self) -> None: ...

    def stopped(self) -> None: ...

    def event(self, kind: str, result: str) -> None: ...

    def rejected(self) -> None: ...


class NoMetrics:
    def agents(self, count: int) -> None:
        pass

    def dispatched(self) -> None:
        pass

    def stopped(self) -> None:
        pass

    def event(self, kind: str, result: str) -> None:
        pass

    def rejected(self) -> None:
        pass


@dataclass(eq=False)
class Session:
    """One agent's command stream."""

    agent_id: str
    outbox: Outbox
    credentials: Credentials = NONE
    key: str = ""
    hardware: HardwareKey | None = None
    started: set[WorkflowKey] = field(default_factory=set)
    """Workflows sent as StartWorkflow on this stream whose end this stream has not reported."""
    stopped: set[WorkflowKey] = field(default_factory=set)
    """Workflows sent as StopWorkflow on this stream."""

    def __post_init__(self) -> None:
        self.key = normalise_agent_id(self.agent_id)

    def forget(self) -> None:
        self.started.clear()
        self.stopped.clear()


class SecretUnavailable(Exception):
    """An ``envValueFrom`` Secret or key that cannot be read; the message names them, never a value."""


SecretReader = Callable[[str, SecretKeySelector], str]
"""Reads a Secret's key in a namespace (SecretUnavailable when it cannot)."""


def _no_secrets(namespace: str, ref: SecretKeySelector) -> str:
    raise SecretUnavailable(f"secret {namespace}/{ref.name} cannot be read here")


def store_secret_reader(store: ObjectStore) -> SecretReader:
    def read(namespace: str, ref: SecretKeySelector) -> str:
        try:
            value = store.get(Secret, ref.name, namespace).value(ref.key)
        except NotFound:
            raise SecretUnavailable(f"secret {namespace}/{ref.name} not found") from None
        except KeyError:
            raise SecretUnavailable(f"secret {namespace}/{ref.name} has no key {ref.key!r}") from None
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise SecretUnavailable(f"secret {namespace}/{ref.name} key {ref.key!r} is not UTF-8") from None

    return read


def start_command(workflow: Workflow, read_secret: SecretReader = _no_secrets) -> pb.GetWorkflowsResponse:
    """StartWorkflow with the rendered actions in order (action id = the action's name), each
    ``envValueFrom`` read (from the Workflow's namespace) into its env; SecretUnavailable otherwise."""
    namespace = key_of(workflow)[0]
    actions = []
    for name, status in workflow.ordered_actions():
        rendered = status.rendered
        env = dict(rendered.env)
        for var, source in rendered.env_value_from.items():
            env[var] = read_secret(namespace, source.secret_key_ref)
        action = pb.Workflow.Action(
            id=name,
            name=rendered.name,
            image=rendered.image,
            args=list(rendered.args),
            env=env,
            volumes=list(rendered.volumes),
        )
        if rendered.command is not None:
            action.cmd = rendered.command
        if rendered.network_namespace is not None:
            action.ns.network = rendered.network_namespace
        actions.append(action)
    message = pb.Workflow(workflow_id=workflow_id(key_of(workflow)), actions=actions)
    return pb.GetWorkflowsResponse(start_workflow=pb.GetWorkflowsResponse.StartWorkflow(workflow=message))


def stop_command(key: WorkflowKey) -> pb.GetWorkflowsResponse:
    return pb.GetWorkflowsResponse(
        stop_workflow=pb.GetWorkflowsResponse.StopWorkflow(workflow_id=workflow_id(key))
    )


def _order(workflow: Workflow) -> tuple[datetime, str]:
    created = workflow.metadata.creation_timestamp or datetime.max.replace(tzinfo=UTC)
    return (created, workflow.metadata.name)


class Dispatcher:
    """The server's decisions over one store (see the module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        backoff: Backoff | None = None,
        clock: Clock = wall_clock,
        metrics: Metrics | None = None,
        allow_unauthenticated_agents: bool = False,
    ) -> None:
        self.store = store
        self.backoff = backoff or Backoff()
        self.clock = clock
        self.metrics: Metrics = metrics or NoMetrics()
        self._lock = threading.Lock()
        self._hardware_locks: dict[HardwareKey, threading.Lock] = {}
        self._workflows: dict[WorkflowKey, Workflow] = {}
        self._by_hardware: dict[HardwareKey, set[WorkflowKey]] = {}
        self._hardware_ids: dict[HardwareKey, frozenset[str]] = {}
        """The agent ids each Hardware answers to: its name and its MACs (normalised)."""
        self._by_agent_id: dict[str, set[HardwareKey]] = {}
        self._sessions: list[Session] = []
        self._rejections: dict[WorkflowKey, tuple[int, datetime]] = {}
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
        self.auth = Authenticator(self.reads, allow_unauthenticated_agents)
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

    # -- sessions -----------------------------------------------------------------------------------
    def connect(self, agent_id: str, outbox: Outbox, credentials: Credentials = NONE) -> Session:
        """A new command stream; Refused when the id is empty or matches two Hardware, when the
        credentials do not prove the Hardware (UNAUTHENTICATED or PERMISSION_DENIED), or when that
        Hardware already has a stream (ALREADY_EXISTS)."""
        session = Session(agent_id, outbox, credentials)
        if not session.key:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "agent_id: required")
        if (problem := self.auth.unauthenticated(credentials)) is not None:
            self._refuse_agent(agent_id, None, problem)
        with self._lock:
            claimed = self._resolve(session.key)
        if claimed is not None and (problem := self.auth.check(credentials, claimed)) is not None:
            self._refuse_agent(agent_id, claimed, problem)
        with self._lock:
            session.hardware = self._resolve(session.key)
            if session.hardware is not None and session.hardware != claimed:
                # The Hardware changed meanwhile: checked at once, before anything is sent.
                problem = self.auth.check(credentials, session.hardware)
                if problem is not None:
                    self._refuse_agent(agent_id, session.hardware, problem)
            if session.hardware is not None and (other := self._session_for_locked(session.hardware)):
                message = (
                    f"hardware {'/'.join(session.hardware)} already has an agent stream "
                    f"(agent id {other.agent_id!r}); retry once it has ended"
                )
                self._refuse_agent(agent_id, session.hardware, (grpc.StatusCode.ALREADY_EXISTS, message))
            self._sessions.append(session)
            self.metrics.agents(len(self._sessions))
        _log.info(
            "agent connected",
            agent=agent_id,
            hardware="/".join(session.hardware) if session.hardware else None,
        )
        if session.hardware is not None:
            self.evaluate(session.hardware)
        return session

    @staticmethod
    def _refuse_agent(
        agent_id: str, hardware: HardwareKey | None, problem: tuple[grpc.StatusCode, str]
    ) -> NoReturn:
        _log.warning(
            "agent stream refused",
            agent=agent_id,
            hardware="/".join(hardware) if hardware else None,
            code=problem[0].name,
            reason=problem[1],
        )
        raise Refused(*problem)

    def disconnect(self, session: Session) -> None:
        with self._lock:
            if session in self._sessions:
                self._sessions.remove(session)
                _log.info("agent disconnected", agent=session.agent_id)
            self.metrics.agents(len(self._sessions))

    def _end(self, session: Session, code: grpc.StatusCode, message: str) -> None:
        """End a session's stream (with the lock held)."""
        if session in self._sessions:
            self._sessions.remove(session)
            self.metrics.agents(len(self._sessions))
        _log.info("agent stream ended", agent=session.agent_id, code=code.name, reason=message)
        session.outbox.abort(code, message)

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

    # -- following the store ------------------------------------------------------------------------
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
        if known is not None:
            self._by_hardware.get(hardware_of(known), set()).discard(key)
        self._rejections.pop(key, None)

    def _on_workflow(self, event: WatchEvent[KubeObject]) -> None:
        workflow = event.object
        assert isinstance(workflow, Workflow)
        key = key_of(workflow)
        with self._lock:
            before = self._workflows.get(key)
            if event.type == "DELETED":
                self._forget(key)
            else:
                self._remember(workflow)
            affected = {hardware_of(workflow)} | ({hardware_of(before)} if before is not None else set())
        for hardware in affected:
            self.evaluate(hardware)

    def _on_hardware(self, event: WatchEvent[KubeObject]) -> None:
        hardware = event.object
        assert isinstance(hardware, Hardware)
        changed: list[HardwareKey] = []
        hw_key = key_of(hardware)
        with self._lock:
            before = self._hardware_ids.pop(hw_key, frozenset())
            for agent_id in before:
                self._by_agent_id.get(agent_id, set()).discard(hw_key)
            after: frozenset[str] = frozenset()
            if event.type != "DELETED":
                after = frozenset({hardware.metadata.name.lower(), *hardware.spec.network_interfaces})
                self._hardware_ids[hw_key] = after
                for agent_id in after:
                    self._by_agent_id.setdefault(agent_id, set()).add(hw_key)
            same = before == after
            served = same and self._session_for_locked(hw_key) is not None
        if same:
            # The ids it answers to did not change, so no agent's binding did; its credentials may have:
            # the stream serving it is checked again (and ended if it no longer proves the Hardware).
            if served:
                self.evaluate(hw_key)
            return
        with self._lock:
            for session in list(self._sessions):
                if session.key not in before | after and session.hardware != hw_key:
                    continue
                try:
                    bound = self._resolve(session.key)
                except Refused as exc:
                    self._end(session, exc.code, exc.message)
                    continue
                if bound == session.hardware:
                    continue
                if bound is not None:
                    problem = self.auth.check(session.credentials, bound)
                    if problem is not None:
                        self._end(session, *problem)
                        continue
                    if (other := self._session_for_locked(bound)) is not None and other is not session:
                        self._end(
                            session,
                            grpc.StatusCode.ALREADY_EXISTS,
                            f"hardware {'/'.join(bound)} already has an agent stream",
                        )
                        continue
                session.hardware = bound
                session.forget()
                if bound is not None:
                    changed.append(bound)
                    _log.info("agent bound to hardware", agent=session.agent_id, hardware="/".join(bound))
        for bound_key in changed:
            self.evaluate(bound_key)

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
    def _hardware_lock(self, hardware: HardwareKey) -> threading.Lock:
        with self._lock:
            return self._hardware_locks.setdefault(hardware, threading.Lock())

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

    def _workflows_of(self, hardware: HardwareKey) -> list[Workflow]:
        with self._lock:
            keys = self._by_hardware.get(hardware, set())
            return sorted((self._workflows[k] for k in keys), key=_order)

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
            scheduled = workflow.model_copy(deep=True)
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

    def _backing_off(self, key: WorkflowKey, now: datetime) -> bool:
        with self._lock:
            entry = self._rejections.get(key)
        return entry is not None and entry[1] > now

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
        return written

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
        if not event.workflow_id:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "event.workflow_id: required")
        namespace, sep, name = event.workflow_id.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"event.workflow_id: expected <namespace>/<name>, not {event.workflow_id!r}",
            )
        if not kind:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                "event: one of action_started, action_succeeded, action_failed or workflow_rejected "
                "is required",
            )
        action = ""
        if kind != "workflow_rejected":
            action = getattr(event, kind).action_id
            if not action:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"event.{kind}.action_id: required")
        key = (namespace, name)
        missing = Refused(grpc.StatusCode.NOT_FOUND, f"workflow {event.workflow_id} not found")
        current = self._refresh(key)
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
                changed = current.model_copy(deep=True)
                now = self.clock()
                try:
                    self._apply(changed, event, kind, action, now)
                except states.TransitionError as exc:
                    raise Refused(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
                try:
                    written = self._write(changed)
                except Conflict:
                    fresh = self._refresh(key)
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

    @staticmethod
    def _apply(workflow: Workflow, event: pb.Event, kind: str, action: str, now: datetime) -> None:
        if kind == "action_started":
            states.action_started(workflow, action, now)
        elif kind == "action_succeeded":
            states.action_succeeded(workflow, action, now)
        elif kind == "action_failed":
            failed = event.action_failed
            reason = failed.failure_reason if failed.HasField("failure_reason") else None
            message = failed.failure_message if failed.HasField("failure_message") else None
            if (
                workflow.status.state == "Cancelling"
                and reason == states.REASON_CANCELED
                and workflow.status.actions[action].state != "Running"
            ):
                # The agent stopped between actions and names the one it did not start: still the
                # acknowledgement of the stop.
                states.cancelled(
                    workflow, now, states.REASON_CANCELED, message or "the agent stopped the workflow"
                )
                return
            states.action_failed(workflow, action, now, reason, message)
        else:
            rejection = event.workflow_rejected
            reason = rejection.failure_reason if rejection.HasField("failure_reason") else None
            states.rejected(workflow, now, reason, rejection.failure_message or None)

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

    # -- introspection ------------------------------------------------------------------------------
    def known_state(self, key: WorkflowKey) -> str | None:
        """The state of a workflow as this server last saw it (None when unknown)."""
        with self._lock:
            known = self._workflows.get(key)
        return known.status.state if known is not None else None

    def held_back_until(self, key: WorkflowKey) -> datetime | None:
        with self._lock:
            entry = self._rejections.get(key)
        return entry[1] if entry is not None else None


__all__ = [
    "Backoff",
    "Dispatcher",
    "Outbox",
    "Refused",
    "SecretUnavailable",
    "Session",
    "normalise_agent_id",
    "start_command",
    "stop_command",
    "workflow_id",
]
