"""Cluster lifecycle workflows: ordered lists of single-purpose tasks, with hooks, one error path and
checkpoints.

Scope: this package orchestrates; it does not provision. A workflow says *which* steps run and in what
order (decided once, by a constructor, from its injected dependencies), runs them with one typed context,
lets other components hook in before or after any step, sends every failure to one error handler that
writes a diagnostics bundle, and records progress so an interrupted run resumes where it stopped. What
a step does lives with the component that knows how (providers install their own components).

Layout:

* this package — what management and workload workflows share:
  :mod:`~capa_py.workflow.task` (``Task``, ``Context``, ``hook_point``, ``CHECKPOINTED``),
  :mod:`~capa_py.workflow.hook` (``Binder``, the hook registrar protocols, ``NoopHookRegistrar``),
  :mod:`~capa_py.workflow.workflow` (``Workflow``), :mod:`~capa_py.workflow.runner` (``run_workflow``,
  progress events, results), :mod:`~capa_py.workflow.checkpoint`, :mod:`~capa_py.workflow.diagnostics`
  (the error handler and its collectors), :mod:`~capa_py.workflow.render` (list and graph) and
  :mod:`~capa_py.workflow.progress` (the rich progress view);
* :mod:`~capa_py.workflow.management` and :mod:`~capa_py.workflow.workload` — the create, upgrade and
  delete workflows of each cluster kind: their contexts, their tasks and their ``new_*_workflow``
  constructors;
* what those workflows use: :mod:`~capa_py.workflow.config` (cluster files), :mod:`~capa_py.workflow.provider`
  (the provider interface: what a workflow asks of a provider and of capa-py's own components),
  :mod:`~capa_py.workflow.clusters` (reaching a cluster, the bootstrap cluster),
  :mod:`~capa_py.workflow.steps` (behaviour several tasks share) and :mod:`~capa_py.workflow.kubeapply`
  (applying manifests to an API server).

The AWS and Tinkerbell providers, capa-py's own components and the rollout of Upgrade Cluster compose the
controllers, so they live in the application layer (``capa_app.providers``, ``capa_app.rollout``).

See ``docs/workflows.md`` for how to write a task, a hook and a constructor.
"""

from capa_py.workflow.checkpoint import CheckpointError
from capa_py.workflow.diagnostics import (
    AWSCallCollector,
    DiagnosticsCollector,
    ErrorHandler,
    LogCollector,
    StoreCollector,
)
from capa_py.workflow.hook import (
    Binder,
    CreateHookRegistrar,
    DeleteHookRegistrar,
    Handler,
    HookError,
    NoopHookRegistrar,
    UpgradeHookRegistrar,
)
from capa_py.workflow.runner import TaskEvent, WorkflowResult, run_workflow
from capa_py.workflow.task import (
    CHECKPOINTED,
    HANDLE_ERROR,
    Context,
    Failure,
    Task,
    hook_point,
    task,
    task_of,
)
from capa_py.workflow.workflow import Workflow, WorkflowDefinitionError

__all__ = [
    "CHECKPOINTED",
    "HANDLE_ERROR",
    "AWSCallCollector",
    "Binder",
    "CheckpointError",
    "Context",
    "CreateHookRegistrar",
    "DeleteHookRegistrar",
    "DiagnosticsCollector",
    "ErrorHandler",
    "Failure",
    "Handler",
    "HookError",
    "LogCollector",
    "NoopHookRegistrar",
    "StoreCollector",
    "Task",
    "TaskEvent",
    "UpgradeHookRegistrar",
    "Workflow",
    "WorkflowDefinitionError",
    "WorkflowResult",
    "hook_point",
    "run_workflow",
    "task",
    "task_of",
]
