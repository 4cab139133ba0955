"""Actions: the single-responsibility units a reconcile is built from.

An action has a ``description`` and ``run(ctx) -> Result``. ``run`` is a template: it fetches the action's
input states, calls the lifecycle hooks (``before_action`` with the action and its states,
``after_action`` with the result too), then the action's own work in :meth:`Action.act`. An exception raised
while fetching states or acting becomes ``Result(error=exc)`` — the RFC's ``RequeueIfError`` — so one
failing action never unwinds a whole workflow by surprise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from capa_py.ctrlkit.result import Result
from capa_py.logging import get_logger

_log = get_logger("ctrlkit")


class Cancelled(Exception):
    """The action's context was cancelled (its Timeout expired or its caller gave up)."""


@runtime_checkable
class ActionHook(Protocol):
    """Lifecycle hook: called before and after every action run, for logging, tracing and events."""

    def before_action(self, action: Action, states: Mapping[str, Any]) -> None: ...

    def after_action(self, action: Action, states: Mapping[str, Any], result: Result) -> None: ...


@dataclass
class Context:
    """What an action runs with: hooks, a cancellation flag, a deadline and free-form values."""

    hooks: list[ActionHook] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None
    cancel_event: threading.Event = field(default_factory=threading.Event)
    parent: Context | None = None

    @property
    def cancelled(self) -> bool:
        if self.cancel_event.is_set():
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return True
        return self.parent.cancelled if self.parent is not None else False

    def check_cancelled(self) -> None:
        """Raise :class:`Cancelled` when the context is done; long actions call this between steps."""
        if self.cancelled:
            raise Cancelled("the action's context was cancelled")

    def remaining(self) -> float | None:
        """Seconds left before the nearest deadline of this context or its parents."""
        deadlines = []
        ctx: Context | None = self
        while ctx is not None:
            if ctx.deadline is not None:
                deadlines.append(ctx.deadline)
            ctx = ctx.parent
        return None if not deadlines else max(0.0, min(deadlines) - time.monotonic())

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early (and raising :class:`Cancelled`) if the context is cancelled."""
        end = time.monotonic() + seconds
        while True:
            self.check_cancelled()
            left = end - time.monotonic()
            if left <= 0:
                return
            self.cancel_event.wait(min(left, 0.05))

    def child(self, timeout: float | None = None) -> Context:
        """A context that is cancelled with this one, and on its own ``cancel_event`` or deadline."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return Context(hooks=self.hooks, values=self.values, deadline=deadline, parent=self)


class Action:
    """Base of every action. Subclasses implement :meth:`act` (and :meth:`fetch_states` if they read any)."""

    description: str = ""
    hooks: Sequence[ActionHook] = ()

    def children(self) -> Sequence[Action]:
        """The actions this one composes (empty for a leaf)."""
        return ()

    def fetch_states(self, ctx: Context) -> Mapping[str, Any]:
        """Read the states this action needs; an exception here requeues without acting."""
        return {}

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        raise NotImplementedError(f"{type(self).__name__} must implement act()")

    def run(self, ctx: Context | None = None) -> Result:
        ctx = ctx if ctx is not None else Context()
        hooks = [*ctx.hooks, *self.hooks]
        try:
            states = self.fetch_states(ctx)
        except Exception as exc:
            return Result(error=exc)
        for hook in hooks:
            _call_hook(hook.before_action, self, states)
        try:
            result = self.act(ctx, states) or Result()
        except Exception as exc:
            result = Result(error=exc)
        for hook in hooks:
            _call_hook(hook.after_action, self, states, result)
        return result

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.description!r}>"


def _call_hook(fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # a broken hook must not change the reconcile's outcome
        _log.exception("action hook failed", hook=getattr(fn, "__qualname__", repr(fn)))


ActionFn = Callable[[Context], Result | None]
StatefulFn = Callable[[Context, Mapping[str, Any]], Result | None]


class FuncAction(Action):
    """A leaf action from a function of the context."""

    def __init__(self, description: str, fn: ActionFn, hooks: Sequence[ActionHook] = ()) -> None:
        self.description = description
        self.fn = fn
        self.hooks = hooks

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        return self.fn(ctx)


class StatefulAction(Action):
    """A leaf action whose inputs are fetched by named state getters before the hooks and the work."""

    def __init__(
        self,
        description: str,
        getters: Mapping[str, Callable[[], Any]],
        fn: StatefulFn,
        hooks: Sequence[ActionHook] = (),
    ) -> None:
        self.description = description
        self.getters = dict(getters)
        self.fn = fn
        self.hooks = hooks

    def fetch_states(self, ctx: Context) -> Mapping[str, Any]:
        return {name: getter() for name, getter in self.getters.items()}

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        return self.fn(ctx, states)


def wrap_action(description: str, fn: ActionFn, hooks: Sequence[ActionHook] = ()) -> Action:
    """An action from a function, as the RFC's ``WrapAction``."""
    return FuncAction(description, fn, hooks)


def action(description: str) -> Callable[[ActionFn], Action]:
    """Decorator form of :func:`wrap_action`."""

    def decorate(fn: ActionFn) -> Action:
        return FuncAction(description, fn)

    return decorate


class LoggingHook:
    """A hook that logs each leaf action's start and outcome (states are named, never dumped)."""

    def __init__(self, logger: Any = None, leaves_only: bool = True) -> None:
        self.logger = logger or get_logger("ctrlkit")
        self.leaves_only = leaves_only
        self._started: dict[int, float] = {}

    def before_action(self, action: Action, states: Mapping[str, Any]) -> None:
        if self.leaves_only and action.children():
            return
        self._started[id(action)] = time.monotonic()
        self.logger.debug("action started", action=action.description, states=sorted(states))

    def after_action(self, action: Action, states: Mapping[str, Any], result: Result) -> None:
        if self.leaves_only and action.children():
            return
        started = self._started.pop(id(action), time.monotonic())
        elapsed_ms = round((time.monotonic() - started) * 1000, 1)
        if result.error is not None and not result.is_exit:
            self.logger.info(
                "action failed", action=action.description, error=str(result.error), ms=elapsed_ms
            )
        else:
            self.logger.debug("action finished", action=action.description, result=str(result), ms=elapsed_ms)
