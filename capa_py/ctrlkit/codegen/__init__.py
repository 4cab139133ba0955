"""The CtrlKit code generator: Python state getters, action stubs and action wrappers from a DSL document.

Writing a controller with ctrlkit means writing actions; the code that reads each action's inputs from the
store, calls the lifecycle hooks and turns failures into requeues is the same every time, so it is
generated. For each ``decl Name for Kind`` of a document, :func:`generate` writes:

``NameState``
    built from ``(store, target, registry)``; one ``get_<state>()`` per declared state, reading it with
    :func:`~capa_py.ctrlkit.state.fetch_state` and a :class:`~capa_py.ctrlkit.state.StateSpec` of the
    declared selectors. The kind is resolved from the registry when the getter runs, unless the bound
    package is an importable Python module defining the kind class, which is then imported;
``NameImpl``
    a :class:`typing.Protocol` with one method per action, ``(self, ctx, <states>) -> Result | None``, for
    the controller to implement (the DSL comment above an action becomes its docstring);
``Name``
    built from ``(state, impl, hooks)``; one method per action returning a
    :class:`~capa_py.ctrlkit.action.StatefulAction` that fetches the states, runs the hooks (the impl's
    own ``before_action``/``after_action`` too when it implements
    :class:`~capa_py.ctrlkit.action.ActionHook`) and calls the impl. A state that cannot be read
    requeues with the error without calling the impl, as every action run does.

The output passes ``ruff check`` and ``mypy --strict`` with this project's settings. Python-only naming
problems (two actions with the same snake_case name, a state called ``ctx``) are :class:`DSLError`\\ s at
the offending declaration, like the DSL's own errors.

The package's modules: resolving kinds and checking names (:mod:`~capa_py.ctrlkit.codegen.kinds`), writing
source lint-clean (:mod:`~capa_py.ctrlkit.codegen.source`) and the writer
(:mod:`~capa_py.ctrlkit.codegen.writer`).
"""

from __future__ import annotations

from capa_py.ctrlkit.codegen.kinds import snake_case
from capa_py.ctrlkit.codegen.source import LINE_LENGTH
from capa_py.ctrlkit.codegen.writer import generate

__all__ = ["LINE_LENGTH", "generate", "snake_case"]
