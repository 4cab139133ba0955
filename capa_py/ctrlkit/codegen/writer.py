"""The code generator's writer: the state class, the implementation protocol and the manager class of each
decl, and :func:`generate`, which checks a document and returns the module's source."""

from __future__ import annotations

from collections.abc import Iterable

from capa_py.ctrlkit.codegen.kinds import Kind, check_names, resolve_kinds, snake_case
from capa_py.ctrlkit.codegen.source import (
    INDENT,
    LINE_LENGTH,
    STDLIB_IMPORTS,
    call_lines,
    docstring_lines,
    fit_line,
    import_lines,
    selector_args,
    selector_source,
    string_literal,
)
from capa_py.ctrlkit.dsl import Decl, Document, StateDecl, validate


class _Writer:
    def __init__(self, document: Document, kinds: dict[str, Kind]) -> None:
        self.document = document
        self.kinds = kinds
        self.lines: list[str] = []

    def emit(self, *lines: str) -> None:
        self.lines.extend(lines)

    def blank(self, count: int = 1) -> None:
        self.lines.extend([""] * count)

    def state_type(self, state: StateDecl) -> str:
        annotation = self.kinds[state.kind.name].annotation
        return f"list[{annotation}]" if state.is_list else f"{annotation} | None"

    def decl(self, decl: Decl) -> None:
        self.state_class(decl)
        self.blank(2)
        self.impl_protocol(decl)
        self.blank(2)
        self.manager_class(decl)

    def state_class(self, decl: Decl) -> None:
        target = self.kinds[decl.target.name]
        i1, i2, i3 = INDENT, INDENT * 2, INDENT * 3
        self.emit(f"class {decl.name}State:")
        self.emit(
            *docstring_lines(
                f"Reads the states of {decl.name} from an object store.\n\n"
                f"The target, whose fields the selectors may reference, is a {target.group_version} "
                f"{target.kind}.",
                i1,
            )
        )
        self.blank()
        params = [
            "self",
            "store: ObjectStore",
            f"target: {target.annotation}",
            "registry: KindRegistry = REGISTRY",
        ]
        self.emit(*call_lines(i1, "def __init__", params, " -> None:"))
        args = [
            "target",
            string_literal(target.group_version),
            string_literal(target.kind),
            string_literal(f"{decl.name}State"),
        ]
        self.emit(*call_lines(i2, "_require_kind", args, ""))
        self.emit(f"{i2}self.store = store", f"{i2}self.target = target", f"{i2}self.registry = registry")
        for state in decl.states:
            kind = self.kinds[state.kind.name]
            shape = f"the {kind.kind} objects" if state.is_list else f"the {kind.kind} (or None)"
            summary = f"The ``{state.name}`` state: {shape} its selectors select."
            self.blank()
            self.emit(f"{i1}def get_{snake_case(state.name)}(self) -> {self.state_type(state)}:")
            self.emit(*docstring_lines(f"{summary}\n\n{state.doc}" if state.doc else summary, i2))
            if kind.module:
                model = kind.kind
            else:
                gvk = f"{string_literal(kind.group_version)}, {string_literal(kind.kind)}"
                model = f"self.registry.for_gvk({gvk})"
            self.emit(f"{i2}spec = StateSpec(")
            self.emit(f"{i3}name={string_literal(state.name)},", fit_line(f"{i3}kind={model},"))
            self.emit(f"{i3}is_list={state.is_list},")
            sources = [selector_source(line.selector) for line in state.selectors]
            if len(sources) == 1 and len(f"{i3}selectors=({sources[0]},),") <= LINE_LENGTH:
                self.emit(f"{i3}selectors=({sources[0]},),")
            elif sources:
                self.emit(f"{i3}selectors=(")
                for line in state.selectors:
                    self.emit(*call_lines(i3 + INDENT, "Selector", selector_args(line.selector), ","))
                self.emit(f"{i3}),")
            self.emit(f"{i2})")
            cast_args = [self.state_type(state), "fetch_state(self.store, self.target, spec)"]
            self.emit(*call_lines(i2, "return cast", cast_args, ""))

    def impl_protocol(self, decl: Decl) -> None:
        i1, i2 = INDENT, INDENT * 2
        self.emit(f"class {decl.name}Impl(Protocol):")
        intro = (
            f"The actions of {decl.name}, for a controller to implement.\n\n"
            "An implementation that also has ``before_action`` and ``after_action`` (an ActionHook) has them "
            "called around each of its actions."
        )
        self.emit(*docstring_lines(f"{intro}\n\n{decl.doc}" if decl.doc else intro, i1))
        for action in decl.actions:
            self.blank()
            params = ["self", "ctx: Context"]
            params += [
                f"{snake_case(ref.name)}: {self.state_type(decl.state(ref.name))}" for ref in action.states
            ]
            if action.doc:
                self.emit(*call_lines(i1, f"def {snake_case(action.name)}", params, " -> Result | None:"))
                self.emit(*docstring_lines(action.doc, i2))
            else:
                self.emit(*call_lines(i1, f"def {snake_case(action.name)}", params, " -> Result | None: ..."))

    def manager_class(self, decl: Decl) -> None:
        i1, i2, i3 = INDENT, INDENT * 2, INDENT * 3
        self.emit(f"class {decl.name}:")
        self.emit(
            *docstring_lines(
                f"The actions of {decl.name} as workflow steps.\n\n"
                "Each method returns a StatefulAction that reads the action's states, runs the hooks and "
                "calls the implementation; a state that cannot be read requeues with the error instead.",
                i1,
            )
        )
        self.blank()
        params = [
            "self",
            f"state: {decl.name}State",
            f"impl: {decl.name}Impl",
            "hooks: Sequence[ActionHook] = ()",
        ]
        self.emit(*call_lines(i1, "def __init__", params, " -> None:"))
        self.emit(f"{i2}self.state = state", f"{i2}self.impl = impl")
        self.emit(f"{i2}self.hooks: tuple[ActionHook, ...] = tuple(hooks)")
        self.emit(f"{i2}if isinstance(impl, ActionHook):")
        self.emit(f"{i3}# The implementation's own before_action/after_action run after the other hooks.")
        self.emit(f"{i3}self.hooks = (*self.hooks, impl)")
        for action in decl.actions:
            method = snake_case(action.name)
            self.blank()
            self.emit(f"{i1}def {method}(self) -> StatefulAction:")
            self.emit(
                *(docstring_lines(action.doc, i2) or docstring_lines(f"The ``{action.name}`` action.", i2))
            )
            self.blank()
            self.emit(f"{i2}def act(ctx: Context, states: Mapping[str, Any]) -> Result | None:")
            args = ["ctx", *(f"states[{string_literal(ref.name)}]" for ref in action.states)]
            self.emit(*call_lines(i3, f"return self.impl.{method}", args, ""))
            self.blank()
            getters = [
                f"{string_literal(ref.name)}: self.state.get_{snake_case(ref.name)}" for ref in action.states
            ]
            args = [string_literal(action.name), f"{{{', '.join(getters)}}}", "act", "self.hooks"]
            call = call_lines(i2, "return StatefulAction", args, "")
            if len(call) > 1 and len(call[2]) > LINE_LENGTH:
                # The getters mapping does not fit on its line either: one getter per line.
                call[2:3] = [f"{i3}{{", *(f"{i3}{INDENT}{getter}," for getter in getters), f"{i3}}},"]
            self.emit(*call)


_REQUIRE_KIND = """\
def _require_kind(target: KubeObject, api_version: str, kind: str, reader: str) -> None:
    if (target.api_version, target.kind) != (api_version, kind):
        found = f"{target.api_version}/{target.kind}"
        raise TypeError(f"{reader} reads the states of a {api_version}/{kind}, not of a {found}")"""


def generate(document: Document, source_name: str) -> str:
    """The Python module for ``document``; ``source_name`` (the DSL file's name) goes in its header.

    Raises :class:`DSLError` for declarations that cannot become Python (see the module docstring).
    """
    validate(document)  # a no-op for a parsed document; a hand-built one gets the same checks
    kinds = resolve_kinds(document)
    check_names(document, kinds)
    source = " ".join(source_name.split())  # one line, whatever the caller passes
    writer = _Writer(document, kinds)
    writer.emit(f"# Code generated by capa_py.ctrlkit.codegen from {source}. DO NOT EDIT.")
    writer.emit(*docstring_lines(_module_doc(document, source), ""))
    writer.blank()
    writer.emit("from __future__ import annotations")
    if document.decls:
        imports: dict[str, set[str]] = {
            "capa_py.api.meta": {"KubeObject"},
            "capa_py.api.registry": {"REGISTRY", "KindRegistry"},
            "capa_py.ctrlkit.action": {"ActionHook", "Context", "StatefulAction"},
            "capa_py.ctrlkit.result": {"Result"},
            "capa_py.ctrlkit.state": {"StateSpec", "fetch_state"},
            "capa_py.store.protocol": {"ObjectStore"},
        }
        if any(state.selectors for decl in document.decls for state in decl.states):
            imports["capa_py.ctrlkit.state"].add("Selector")
        for kind in kinds.values():
            if kind.module:
                imports.setdefault(kind.module, set()).add(kind.kind)
        writer.blank()
        writer.emit(*STDLIB_IMPORTS.splitlines())
        writer.blank()
        writer.emit(*import_lines(imports))
        writer.blank()
        names = [
            name for decl in document.decls for name in (f"{decl.name}State", f"{decl.name}Impl", decl.name)
        ]
        writer.emit(*_all_lines(names))
        writer.blank(2)
        writer.emit(*_REQUIRE_KIND.splitlines())
        for decl in document.decls:
            writer.blank(2)
            writer.decl(decl)
    return "\n".join(writer.lines) + "\n"


def _all_lines(names: Iterable[str]) -> list[str]:
    listed = [string_literal(name) for name in names]
    one_line = f"__all__ = [{', '.join(listed)}]"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    return ["__all__ = [", *(f"{INDENT}{name}," for name in listed), "]"]


def _module_doc(document: Document, source: str) -> str:
    if not document.decls:
        return f"Generated from {source}, which declares no controller manager."
    managers = ", ".join(decl.name for decl in document.decls)
    return (
        f"CtrlKit managers generated from {source}: {managers}.\n\n"
        "For each manager ``M``: ``MState`` reads its states from an object store, ``MImpl`` is the protocol "
        "a controller implements (one method per action), and ``M`` wraps each action as a StatefulAction "
        "that reads the action's states, runs the lifecycle hooks and calls the implementation."
    )
