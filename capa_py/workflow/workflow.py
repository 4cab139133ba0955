"""A workflow: an ordered list of tasks decided up front by a constructor, and the hooks bound to them.

Constructors (``new_create_workflow(...)`` and the like) are the one place that decides which tasks run;
they receive their dependencies as arguments and hand the hook registrars the workflow's :class:`Binder`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Generic

from capa_py.workflow.diagnostics import ErrorHandler
from capa_py.workflow.hook import Binder
from capa_py.workflow.task import C, Task


class WorkflowDefinitionError(ValueError):
    """A workflow cannot be built as asked (a task without a docstring, the same task twice, ...)."""


class Workflow(Generic[C]):
    """An ordered list of tasks over one context type ``C``, with its hooks and its error handler."""

    def __init__(
        self,
        name: str,
        context_type: type[C],
        tasks: Sequence[Task[C]],
        *,
        hooks: Iterable[Callable[[Binder[C]], None]] = (),
        error_handler: ErrorHandler | None = None,
    ) -> None:
        """Build the workflow ``name``; every callable of ``hooks`` (a registrar's ``bind_*_hooks``)
        is given the binder in turn; ``error_handler`` defaults to one without collectors."""
        names: set[str] = set()
        for task in tasks:
            if not task.doc.strip():
                raise WorkflowDefinitionError(
                    f"task {task.name!r} of workflow {name!r} needs a docstring saying when it runs and "
                    "what it may assume"
                )
            if task.name in names:
                raise WorkflowDefinitionError(f"workflow {name!r} lists task {task.name!r} twice")
            names.add(task.name)
        if not tasks:
            raise WorkflowDefinitionError(f"workflow {name!r} has no tasks")
        self.name = name
        self.context_type = context_type
        self.tasks: tuple[Task[C], ...] = tuple(tasks)
        self.binder: Binder[C] = Binder(name, self.tasks)
        for bind in hooks:
            bind(self.binder)
        self.error_handler = error_handler if error_handler is not None else ErrorHandler()

    @property
    def task_names(self) -> list[str]:
        return [task.name for task in self.tasks]

    def __repr__(self) -> str:
        return f"Workflow({self.name!r}, {self.task_names})"
