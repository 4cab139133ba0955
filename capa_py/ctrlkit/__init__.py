"""ctrlkit: compose controllers from small single-purpose actions (after the CtrlKit RFC).

* :mod:`~capa_py.ctrlkit.result`: results, the join rules and the requeue helpers;
* :mod:`~capa_py.ctrlkit.action`: actions, context and lifecycle hooks;
* :mod:`~capa_py.ctrlkit.combinators`: Sequential, Join, ParallelJoin, JoinOrdered, Timeout, If, IfElse,
  Shared, Retry, Nop and the optimiser;
* :mod:`~capa_py.ctrlkit.state`: state getters declared with selectors;
* :mod:`~capa_py.ctrlkit.dsl` and :mod:`~capa_py.ctrlkit.codegen`: the DSL and its Python generator;
* :mod:`~capa_py.ctrlkit.graph`: Mermaid and DOT renderings of a composed workflow.
"""

from capa_py.ctrlkit.action import (
    Action,
    ActionHook,
    Cancelled,
    Context,
    FuncAction,
    LoggingHook,
    StatefulAction,
    action,
    wrap_action,
)
from capa_py.ctrlkit.codegen import generate
from capa_py.ctrlkit.combinators import (
    NOP,
    ActionTimeout,
    If,
    IfElse,
    Join,
    JoinOrdered,
    Nop,
    ParallelJoin,
    Retry,
    Sequential,
    Shared,
    Timeout,
    optimize,
)
from capa_py.ctrlkit.dsl import Document, DSLError, parse, parse_file
from capa_py.ctrlkit.graph import to_dot, to_mermaid
from capa_py.ctrlkit.result import (
    ExitWorkflow,
    MultiError,
    Result,
    exit_workflow,
    ignore_exit,
    join,
    no_requeue,
    requeue_after,
    requeue_if_error,
    requeue_immediately,
)
from capa_py.ctrlkit.state import NotOwned, Selector, StateError, StateSpec, fetch_state

__all__ = [
    "NOP",
    "Action",
    "ActionHook",
    "ActionTimeout",
    "Cancelled",
    "Context",
    "ExitWorkflow",
    "FuncAction",
    "If",
    "IfElse",
    "Join",
    "JoinOrdered",
    "LoggingHook",
    "MultiError",
    "Nop",
    "NotOwned",
    "ParallelJoin",
    "Result",
    "Retry",
    "Selector",
    "Sequential",
    "Shared",
    "StateError",
    "StateSpec",
    "StatefulAction",
    "Timeout",
    "action",
    "exit_workflow",
    "fetch_state",
    "ignore_exit",
    "join",
    "no_requeue",
    "optimize",
    "requeue_after",
    "requeue_if_error",
    "requeue_immediately",
    "wrap_action",
    # the DSL, its generator and the workflow renderers
    "DSLError",
    "Document",
    "generate",
    "parse",
    "parse_file",
    "to_dot",
    "to_mermaid",
]
