"""A command's deadline for AWS calls: once it has passed, no AWS call starts.

``capa apply --timeout 20s`` bounds the whole command, the reconciles it runs included. A reconcile makes
many AWS calls, some slow; waiting for it to end after the timeout could take minutes. So the command sets
a deadline (:func:`aws_deadline`) and every AWS call checks it as it starts (the client pool's
``before-call`` hook, :func:`check`) and again as its signed request leaves (``before-send``): the call in
flight at the deadline finishes, the next one raises :class:`DeadlinePassed` instead of starting.

:class:`DeadlinePassed` is a :class:`BaseException`, as :class:`KeyboardInterrupt` is: the reconcile
steps' ``except Exception`` handlers, which record a failure (an event, a condition) for an AWS error, do
not take it for one. It ends the reconcile where it is, as if the process had stopped there; the manager
catches it and notes what was cut short (:attr:`Deadline.stopped`), which the command reports.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


class DeadlinePassed(BaseException):
    """An AWS call was about to start after the command's deadline."""

    def __init__(self, service: str, operation: str) -> None:
        self.call = f"{service}:{operation}"
        super().__init__(f"the command's deadline passed before {self.call}")


@dataclass
class Deadline:
    at: float
    """``time.monotonic()`` when it passes."""
    stopped: list[str] = field(default_factory=list)
    """What the deadline cut short, one line each: ``awscluster/demo before ec2:CreateSubnet``."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def left(self) -> float:
        """Seconds until it passes (0 once it has)."""
        return max(self.at - time.monotonic(), 0.0)

    def note(self, what: str) -> None:
        with self._lock:
            if what not in self.stopped:
                self.stopped.append(what)


_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("capa_aws_deadline", default=None)


@contextmanager
def aws_deadline(at: float) -> Iterator[Deadline]:
    """No AWS call starts in this context (and the threads that copy it) after ``at`` (monotonic)."""
    deadline = Deadline(at)
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)


def current() -> Deadline | None:
    return _current.get()


def check(service: str, operation: str) -> None:
    """Raise :class:`DeadlinePassed` when this context's deadline has passed."""
    deadline = _current.get()
    if deadline is not None and deadline.passed():
        raise DeadlinePassed(service, operation)


__all__ = ["Deadline", "DeadlinePassed", "aws_deadline", "check", "current"]
