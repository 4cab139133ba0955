"""Which agent stream serves which Hardware: a stream is bound to the Hardware its agent id names, proven
by its credentials, one stream per Hardware; streams are bound again (or ended) when Hardware changes
(the rules are described in :mod:`capa_py.tinkerbell.dispatch`)."""

from __future__ import annotations

from typing import NoReturn

import grpc

from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell import Hardware
from capa_py.logging import get_logger
from capa_py.store.protocol import WatchEvent
from capa_py.tinkerbell.agentauth import NONE, Authenticator, Credentials
from capa_py.tinkerbell.dispatch_state import DispatchState
from capa_py.tinkerbell.dispatch_streams import HardwareKey, Metrics, Outbox, Refused, Session, key_of

_log = get_logger("tinkerbell.server")


class AgentSessions(DispatchState):
    """The agents' streams of a workflow server (the base of
    :class:`capa_py.tinkerbell.dispatch.Dispatcher`, which decides what is sent on them)."""

    auth: Authenticator
    metrics: Metrics

    def evaluate(self, hardware: HardwareKey) -> None:
        """Send the hardware's agent what it should have now (the dispatcher decides)."""
        raise NotImplementedError

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
