"""Tasks and contexts: the unit of work of a workflow and the single typed value every task receives.

A :class:`Task` is one named, single-purpose step. Its docstring says when it runs and what it may assume;
the workflow refuses a task without one. A task's ``run(ctx)`` does its work or raises: it never picks
its successor and holds no error path (the workflow's error handler owns that).

Every workflow kind has its own :class:`Context` subclass (a dataclass). Fields whose metadata is
:data:`CHECKPOINTED` are saved with the workflow's checkpoint after every task and restored on resume, so
a value a task produces (a kubeconfig path, say) is there for later tasks after a restart.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

CHECKPOINT_METADATA_KEY = "capa_py.workflow.checkpointed"


@dataclass(frozen=True)
class Failure:
    """What went wrong: the task (or hook point) that raised, the exception and its traceback."""

    task: str
    phase: str
    """``task``, ``before`` or ``after``: whether the task itself or one of its hooks raised."""
    error_type: str
    message: str
    traceback: str

    @classmethod
    def from_exception(cls, task: str, phase: str, exc: BaseException) -> Failure:
        return cls(
            task=task,
            phase=phase,
            error_type=f"{type(exc).__module__}.{type(exc).__qualname__}",
            message=str(exc),
            traceback="".join(traceback.format_exception(exc)),
        )


@dataclass
class Context:
    """Base of every workflow kind's context.

    Subclasses are dataclasses adding what their tasks need. ``failure`` is set by the runner before the
    error handler (and its hooks) run.
    """

    failure: Failure | None = field(default=None, init=False, repr=False)


C = TypeVar("C", bound=Context)


CHECKPOINTED: Mapping[str, Any] = MappingProxyType({CHECKPOINT_METADATA_KEY: True})
"""Field metadata marking a context field as saved in the checkpoint after every task and restored when
the workflow resumes: ``kubeconfig: Path | None = field(default=None, metadata=CHECKPOINTED)``. Its type
must be serialisable by pydantic (str, Path, int, lists, models, ...)."""


@dataclass(frozen=True, eq=False)
class Task(Generic[C]):
    """A named step of a workflow. Identity is the object: two tasks with the same name are different."""

    name: str
    run: Callable[[C], None]
    doc: str

    @property
    def summary(self) -> str:
        """The first sentence of the docstring (its first paragraph when that has no full stop)."""
        head, dot, _ = self.description.partition(". ")
        return head + dot.strip() if dot else self.description

    @property
    def description(self) -> str:
        """The docstring's first paragraph, on one line: when the task runs, what it assumes and does."""
        # Docstrings mark code with reST's double backquotes; a plan reads better with single ones.
        return " ".join(self.doc.strip().split("\n\n")[0].split()).replace("``", "`")

    def __repr__(self) -> str:
        return f"Task({self.name!r})"


def task(name: str) -> Callable[[Callable[[C], None]], Task[C]]:
    """Make a task of a function; its docstring becomes the task's documentation."""

    def wrap(fn: Callable[[C], None]) -> Task[C]:
        return Task(name=name, run=fn, doc=inspect.cleandoc(fn.__doc__ or ""))

    return wrap


def task_of(context: type[C], name: str, run: Callable[[C], None]) -> Task[C]:
    """A task of workflows over ``context`` doing what ``run`` does. ``run`` may be written for a base of
    ``context``: one behaviour (Create Bootstrap Cluster, say) then makes a task of each workflow kind that
    lists it, each typed on its own context. The docstring is ``run``'s."""
    del context  # only types the task
    return Task(name=name, run=run, doc=inspect.cleandoc(run.__doc__ or ""))


def _no_work(_: Context) -> None:
    return None


def hook_point(name: str, doc: str, context: type[C]) -> Task[C]:
    """A task of workflows over ``context`` whose only work is running the hooks bound before and after
    it (Pre Create, Post Create...). The same hook point may appear in several workflows of one kind."""
    del context  # only types the task: a hook point typed on one context cannot join another's workflow
    return Task(name=name, run=_no_work, doc=inspect.cleandoc(doc))


HANDLE_ERROR: Task[Any] = Task(
    name="Handle Error",
    run=_no_work,
    doc=inspect.cleandoc(
        """Runs when a task or a hook raised: records the failure and writes the diagnostics bundle.

    Hooks bound before or after it receive the workflow's context with ``failure`` set; the workflow stops
    after it whatever they do."""
    ),
)
"""The error handling step of every workflow; bind hooks to it like to any task."""
