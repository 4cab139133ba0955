"""Workflow combinators: compose actions into a graph.

* :class:`Sequential` runs actions one by one and stops at the first result that interrupts (an error, a
  requeue or a requeue delay), returning that result.
* :class:`Join` runs every action and joins the results (order not guaranteed: the optimiser may
  flatten and reorder its members); :class:`JoinOrdered` guarantees declaration order;
  :class:`ParallelJoin` runs them on threads.
* :class:`Timeout` aborts waiting for an action after a time. Python threads cannot be killed, so the
  semantics are: the action runs on a worker thread with a child context whose deadline is the timeout;
  when the time is up, ``Timeout`` cancels that context and returns an :class:`ActionTimeout` error at
  once. Code that checks ``ctx.cancelled`` / ``ctx.check_cancelled()`` (or sleeps with ``ctx.sleep``)
  stops at its next check; code that ignores cancellation runs to completion in the background, its side
  effects happen, and its result is discarded (and logged).
* :class:`If` / :class:`IfElse` choose by a condition (a bool fixed when the workflow is built, or a
  callable evaluated when it runs).
* Beyond the RFC: :class:`Shared` runs its action once and gives every caller that result;
  :class:`Retry` re-runs an action that fails, with an interval; :class:`Nop` does nothing; and
  :func:`optimize` flattens nested groups and drops no-ops.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from capa_py.ctrlkit.action import Action, Cancelled, Context
from capa_py.ctrlkit.result import Result, join
from capa_py.logging import get_logger

_log = get_logger("ctrlkit")

Condition = bool | Callable[[Context], bool]


class ActionTimeout(Exception):
    def __init__(self, description: str, seconds: float) -> None:
        self.description = description
        self.seconds = seconds
        super().__init__(f"action {description!r} did not finish within {seconds:g}s")


class Nop(Action):
    """Does nothing and never interrupts."""

    description = "Nop"

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        return Result()


NOP = Nop()


class _Group(Action):
    name = "Group"

    def __init__(self, *actions: Action) -> None:
        self.actions: tuple[Action, ...] = tuple(actions)
        self.description = f"{self.name}({', '.join(a.description for a in self.actions)})"

    def children(self) -> Sequence[Action]:
        return self.actions


class Sequential(_Group):
    """Run one by one; the first interrupting result stops the flow and is returned."""

    name = "Sequential"

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        for child in self.actions:
            result = child.run(ctx)
            if result.interrupts:
                return result
        return Result()


class Join(_Group):
    """Run all and join the results. The order is not part of the contract."""

    name = "Join"

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        return join(*(child.run(ctx) for child in self.actions))


class JoinOrdered(_Group):
    """Run all in declaration order (guaranteed) and join the results."""

    name = "JoinOrdered"

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        return join(*(child.run(ctx) for child in self.actions))


class ParallelJoin(_Group):
    """Run all on threads and join the results (in declaration order, whatever finished first)."""

    name = "ParallelJoin"

    def __init__(self, *actions: Action, max_workers: int | None = None) -> None:
        super().__init__(*actions)
        self.max_workers = max_workers

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        if not self.actions:
            return Result()
        workers = self.max_workers or len(self.actions)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ctrlkit-join") as pool:
            # Each child runs in a copy of this context: call accounting and the command's deadline follow it.
            futures = [pool.submit(contextvars.copy_context().run, child.run, ctx) for child in self.actions]
            return join(*(future.result() for future in futures))


class Timeout(Action):
    """Give up waiting for an action after ``seconds`` (see the module docstring for the semantics)."""

    def __init__(self, seconds: float, action: Action) -> None:
        if seconds <= 0:
            raise ValueError("Timeout needs a positive number of seconds")
        self.seconds = seconds
        self.action = action
        self.description = f"Timeout({seconds:g}s, {action.description})"

    def children(self) -> Sequence[Action]:
        return (self.action,)

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        child = ctx.child(timeout=self.seconds)
        box: list[Result] = []
        done = threading.Event()

        def work() -> None:
            result = self.action.run(child)
            box.append(result)
            done.set()
            if child.cancel_event.is_set():
                _log.debug(
                    "result of a timed-out action discarded",
                    action=self.action.description,
                    result=str(result),
                )

        threading.Thread(target=work, name=f"ctrlkit-timeout-{self.action.description}", daemon=True).start()
        if done.wait(self.seconds):
            result = box[0]
            if isinstance(result.error, Cancelled):
                return Result(error=ActionTimeout(self.action.description, self.seconds))
            return result
        child.cancel_event.set()
        return Result(error=ActionTimeout(self.action.description, self.seconds))


def _evaluate(condition: Condition, ctx: Context) -> bool:
    return condition(ctx) if callable(condition) else bool(condition)


def _describe_condition(condition: Condition) -> str:
    if callable(condition):
        return getattr(condition, "__name__", "condition")
    return str(bool(condition))


class If(Action):
    """Run the action only when the condition holds; otherwise no effect."""

    def __init__(self, condition: Condition, action: Action) -> None:
        self.condition = condition
        self.action = action
        self.description = f"If({_describe_condition(condition)}, {action.description})"

    def children(self) -> Sequence[Action]:
        return (self.action,)

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        return self.action.run(ctx) if _evaluate(self.condition, ctx) else Result()


class IfElse(Action):
    """Run one action or the other by the condition."""

    def __init__(self, condition: Condition, then: Action, otherwise: Action) -> None:
        self.condition = condition
        self.then = then
        self.otherwise = otherwise
        self.description = (
            f"IfElse({_describe_condition(condition)}, {then.description}, {otherwise.description})"
        )

    def children(self) -> Sequence[Action]:
        return (self.then, self.otherwise)

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        return (self.then if _evaluate(self.condition, ctx) else self.otherwise).run(ctx)


class Shared(Action):
    """Run the wrapped action once; every run (from any thread) returns that first result."""

    def __init__(self, action: Action) -> None:
        self.action = action
        self.description = f"Shared({action.description})"
        self._lock = threading.Lock()
        self._result: Result | None = None

    def children(self) -> Sequence[Action]:
        return (self.action,)

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        with self._lock:
            if self._result is None:
                self._result = self.action.run(ctx)
            return self._result

    def reset(self) -> None:
        with self._lock:
            self._result = None


class Retry(Action):
    """Re-run an action whose result has an error, up to ``attempts`` runs, ``interval`` seconds apart.

    An :class:`~capa_py.ctrlkit.result.ExitWorkflow` is not retried; a requeue without an error is
    returned as is.
    """

    def __init__(self, action: Action, attempts: int = 3, interval: float = 1.0) -> None:
        if attempts < 1:
            raise ValueError("Retry needs at least one attempt")
        self.action = action
        self.attempts = attempts
        self.interval = interval
        self.description = f"Retry({action.description}, attempts={attempts}, interval={interval:g}s)"

    def children(self) -> Sequence[Action]:
        return (self.action,)

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        result = Result()
        for attempt in range(1, self.attempts + 1):
            result = self.action.run(ctx)
            if result.error is None or result.is_exit or attempt == self.attempts:
                return result
            ctx.sleep(self.interval)
        return result


def optimize(action: Action) -> Action:
    """Flatten nested groups of the same kind, drop no-ops, and fold constant conditions.

    ``Sequential(a, Sequential(b, c), Nop)`` becomes ``Sequential(a, b, c)``; a group of one action
    becomes that action and a group of none becomes :data:`NOP`; ``If(False, a)`` becomes ``NOP``.
    JoinOrdered keeps its order; Shared instances are kept as they are (sharing is their identity).
    """
    if isinstance(action, Shared):
        return action
    if isinstance(action, _Group):
        members: list[Action] = []
        for child in action.actions:
            optimized = optimize(child)
            if isinstance(optimized, Nop):
                continue
            if type(optimized) is type(action) and not isinstance(action, ParallelJoin):
                members.extend(optimized.actions)
            else:
                members.append(optimized)
        if not members:
            return NOP
        if len(members) == 1:
            return members[0]
        if isinstance(action, ParallelJoin):
            return ParallelJoin(*members, max_workers=action.max_workers)
        return type(action)(*members)
    if isinstance(action, If):
        inner = optimize(action.action)
        if isinstance(inner, Nop) or (not callable(action.condition) and not action.condition):
            return NOP
        if not callable(action.condition):
            return inner
        return If(action.condition, inner)
    if isinstance(action, IfElse):
        then, otherwise = optimize(action.then), optimize(action.otherwise)
        if not callable(action.condition):
            return then if action.condition else otherwise
        return IfElse(action.condition, then, otherwise)
    if isinstance(action, Timeout):
        inner = optimize(action.action)
        return NOP if isinstance(inner, Nop) else Timeout(action.seconds, inner)
    if isinstance(action, Retry):
        inner = optimize(action.action)
        return NOP if isinstance(inner, Nop) else Retry(inner, action.attempts, action.interval)
    return action
