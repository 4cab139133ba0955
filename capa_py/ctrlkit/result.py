"""Reconcile results and the rules for joining them.

A :class:`Result` is what an action tells the work queue: requeue now, requeue after a delay, an error
(which requeues with backoff), or nothing. The join rules are the CtrlKit RFC's, so that an interruption
always happens if any joined action asks for it and never later than the earliest one asked:

* no error joined with an error is that error; two errors make a :class:`MultiError` of both;
* ``requeue`` flags are OR-ed;
* ``requeue_after`` is the shortest non-zero delay, or zero when none is set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class ExitWorkflow(Exception):
    """Raised (or returned) to stop a workflow early without it being a failure; see :func:`ignore_exit`."""

    def __init__(self, reason: str = "exit") -> None:
        super().__init__(reason)


class MultiError(Exception):
    """Errors of several joined actions, flattened and in the order they were joined."""

    def __init__(self, errors: Iterable[Exception]) -> None:
        flat: list[Exception] = []
        for error in errors:
            flat.extend(error.errors if isinstance(error, MultiError) else [error])
        self.errors: tuple[Exception, ...] = tuple(flat)
        super().__init__("; ".join(f"{type(e).__name__}: {e}" for e in self.errors))


@dataclass(frozen=True)
class Result:
    """An action's outcome: ``requeue``, ``requeue_after`` (seconds) and an optional ``error``."""

    requeue: bool = False
    requeue_after: float = 0.0
    error: Exception | None = None

    @property
    def interrupts(self) -> bool:
        """Whether this result stops a :class:`~capa_py.ctrlkit.combinators.Sequential` flow."""
        return self.error is not None or self.requeue or self.requeue_after > 0

    @property
    def is_exit(self) -> bool:
        return isinstance(self.error, ExitWorkflow)

    def __str__(self) -> str:
        parts = []
        if self.requeue:
            parts.append("requeue")
        if self.requeue_after:
            parts.append(f"requeue after {self.requeue_after:g}s")
        if self.error is not None:
            parts.append(f"error: {self.error}")
        return ", ".join(parts) or "done"


def join_errors(first: Exception | None, second: Exception | None) -> Exception | None:
    if first is None:
        return second
    if second is None:
        return first
    return MultiError([first, second])


def join_delays(first: float, second: float) -> float:
    if first > 0 and second > 0:
        return min(first, second)
    return first if first > 0 else second


def join(*results: Result) -> Result:
    """Join results by the CtrlKit rules (see the module docstring)."""
    requeue = False
    delay = 0.0
    error: Exception | None = None
    for result in results:
        requeue = requeue or result.requeue
        delay = join_delays(delay, result.requeue_after)
        error = join_errors(error, result.error)
    return Result(requeue=requeue, requeue_after=delay, error=error)


# -- the workflow interaction helpers of the RFC --------------------------------------------------------


def no_requeue() -> Result:
    """No effect: the workflow goes on."""
    return Result()


def requeue_immediately() -> Result:
    """Interrupt the workflow and requeue the object at once."""
    return Result(requeue=True)


def requeue_after(seconds: float) -> Result:
    """Interrupt the workflow and requeue the object after ``seconds``."""
    if seconds <= 0:
        raise ValueError("requeue_after needs a positive delay; use requeue_immediately() for none")
    return Result(requeue_after=seconds)


def requeue_if_error(error: Exception | None) -> Result:
    """Interrupt and requeue (with backoff) when there is an error; otherwise no effect."""
    return Result(error=error)


def exit_workflow(reason: str = "exit") -> Result:
    """Interrupt the workflow without a failure: ``requeue_if_error(ExitWorkflow())``."""
    return Result(error=ExitWorkflow(reason))


def ignore_exit(result: Result) -> Result:
    """Drop :class:`ExitWorkflow` errors (also inside a MultiError), keeping every other outcome."""
    error = result.error
    if isinstance(error, ExitWorkflow):
        error = None
    elif isinstance(error, MultiError):
        kept = [e for e in error.errors if not isinstance(e, ExitWorkflow)]
        error = None if not kept else kept[0] if len(kept) == 1 else MultiError(kept)
    return Result(requeue=result.requeue, requeue_after=result.requeue_after, error=error)
