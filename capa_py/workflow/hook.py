"""Hooks: handlers that run before or after a task, registered through a :class:`Binder`.

Components that extend a workflow (providers, writing the cluster configuration, ...) implement the
registrar protocol of the workflow kind (``bind_create_hooks(binder)`` and so on) and inherit
:class:`NoopHookRegistrar` for the kinds they do not care about. A handler receives the workflow's typed
context, carries a docstring saying when it runs and what it may assume (the binder refuses one without),
and raises on failure: the error goes to the workflow's error handler like a task's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol

from capa_py.workflow.task import HANDLE_ERROR, C, Task

Handler = Callable[[C], None]
"""A hook handler: called with the workflow's context; raises on failure."""


class HookError(ValueError):
    """A hook could not be bound: an unknown task or a handler without a docstring."""


def handler_name(handler: Callable[..., Any]) -> str:
    """The handler's qualified name (a partial's function's), for plans, logs and messages."""
    if isinstance(handler, functools.partial):
        handler = handler.func
    return getattr(handler, "__qualname__", None) or type(handler).__qualname__


class Binder(Generic[C]):
    """Binds handlers before or after the tasks of one workflow (and its error handling step).

    Several handlers bound to the same side of one task run in the order they were bound.
    """

    def __init__(self, workflow: str, tasks: Sequence[Task[C]]) -> None:
        self.workflow = workflow
        self._tasks: list[Task[Any]] = [*tasks, HANDLE_ERROR]
        self._before: dict[int, list[Handler[C]]] = {id(t): [] for t in self._tasks}
        self._after: dict[int, list[Handler[C]]] = {id(t): [] for t in self._tasks}

    def _check(self, task: Task[Any], handler: Handler[C]) -> None:
        if id(task) not in self._before:
            names = ", ".join(t.name for t in self._tasks)
            raise HookError(f"workflow {self.workflow!r} has no task {task.name!r} (its tasks: {names})")
        documented = handler.func if isinstance(handler, functools.partial) else handler
        if not (getattr(documented, "__doc__", None) or "").strip():
            raise HookError(
                f"hook {handler_name(handler)} on {task.name!r} needs a docstring saying when it runs "
                "and what it may assume"
            )

    def before(self, task: Task[Any], handler: Handler[C]) -> None:
        """Run ``handler`` before ``task``."""
        self._check(task, handler)
        self._before[id(task)].append(handler)

    def after(self, task: Task[Any], handler: Handler[C]) -> None:
        """Run ``handler`` after ``task`` succeeded."""
        self._check(task, handler)
        self._after[id(task)].append(handler)

    @property
    def tasks(self) -> list[Task[Any]]:
        """The workflow's tasks in order, then its error handling step."""
        return list(self._tasks)

    def has(self, task: Task[Any]) -> bool:
        """Whether ``task`` is part of this workflow (so a registrar may bind to it)."""
        return id(task) in self._before

    def handlers_before(self, task: Task[Any]) -> list[Handler[C]]:
        return list(self._before[id(task)])

    def handlers_after(self, task: Task[Any]) -> list[Handler[C]]:
        return list(self._after[id(task)])


class CreateHookRegistrar(Protocol):
    def bind_create_hooks(self, binder: Binder[Any]) -> None:
        """Bind handlers to the tasks of a create workflow."""


class UpgradeHookRegistrar(Protocol):
    def bind_upgrade_hooks(self, binder: Binder[Any]) -> None:
        """Bind handlers to the tasks of an upgrade workflow."""


class DeleteHookRegistrar(Protocol):
    def bind_delete_hooks(self, binder: Binder[Any]) -> None:
        """Bind handlers to the tasks of a delete workflow."""


class NoopHookRegistrar:
    """Inherit this to implement only the registrar methods a component needs."""

    def bind_create_hooks(self, binder: Binder[Any]) -> None:
        """Binds nothing."""

    def bind_upgrade_hooks(self, binder: Binder[Any]) -> None:
        """Binds nothing."""

    def bind_delete_hooks(self, binder: Binder[Any]) -> None:
        """Binds nothing."""
