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
"""

from __future__ import annotations

import importlib
import json
import keyword
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import PurePath

from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.dsl import Alias, Decl, Document, DSLError, Node, StateDecl, validate
from capa_py.ctrlkit.state import Selector

__all__ = ["generate", "snake_case"]

LINE_LENGTH = 110
_INDENT = "    "
_DOTTED_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Names the generated module binds itself; a kind class imported under one of them would shadow it.
_FRAMEWORK_NAMES = frozenset(
    {
        "Any",
        "Mapping",
        "Protocol",
        "Sequence",
        "cast",
        "KubeObject",
        "REGISTRY",
        "KindRegistry",
        "ActionHook",
        "Context",
        "StatefulAction",
        "Result",
        "Selector",
        "StateSpec",
        "fetch_state",
        "ObjectStore",
        "_require_kind",
    }
)
# Attributes of the generated classes that an action or state method must not replace.
_MANAGER_ATTRIBUTES = frozenset({"state", "impl", "hooks"})
_IMPL_HOOK_METHODS = frozenset({"before_action", "after_action"})
_RESERVED_PARAMETERS = frozenset({"self", "ctx"})


def snake_case(name: str) -> str:
    """``ListActiveJobs`` -> ``list_active_jobs``; ``UpdateAWSCluster`` -> ``update_aws_cluster``."""
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", spaced)
    return spaced.lower()


# -- kinds -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Kind:
    """How the generated code gets the class of an aliased kind."""

    group_version: str
    kind: str
    module: str | None = None  # import ``kind`` from this module; None: ask the registry

    @property
    def annotation(self) -> str:
        return self.kind if self.module else "KubeObject"


def _kind_module(document: Document, alias: Alias) -> str | None:
    """The module to import the kind class from, when the bound package is an importable Python module."""
    bind = document.bind(alias.group_version)
    package = bind.package
    if not _DOTTED_MODULE.fullmatch(package) or keyword.iskeyword(package.split(".")[0]):
        return None
    try:
        module = importlib.import_module(package)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if package == missing or package.startswith(missing + "."):
            return None  # not a Python module: the kind comes from the registry
        raise DSLError(
            document.filename, bind.line, bind.col, f"importing package '{package}' failed: {exc}"
        ) from exc
    except Exception as exc:
        raise DSLError(
            document.filename, bind.line, bind.col, f"importing package '{package}' failed: {exc}"
        ) from exc
    model = getattr(module, alias.kind, None)
    if not (isinstance(model, type) and issubclass(model, KubeObject)):
        raise DSLError(
            document.filename,
            alias.line,
            alias.col,
            f"expected Python package '{package}' (bound to {alias.group_version}) to define the KubeObject "
            f"class '{alias.kind}', found {'no such name' if model is None else repr(model)}",
        )
    if (alias.group_version, alias.kind) != (model.API_VERSION, model.KIND):
        raise DSLError(
            document.filename,
            alias.line,
            alias.col,
            f"expected {package}.{alias.kind} to be the kind {alias.gvk}, "
            f"found {model.API_VERSION}/{model.KIND}",
        )
    return package


def _resolve_kinds(document: Document) -> dict[str, _Kind]:
    used = {decl.target.name for decl in document.decls} | {
        state.kind.name for decl in document.decls for state in decl.states
    }
    kinds: dict[str, _Kind] = {}
    imported: dict[str, Alias] = {}
    for alias in document.aliases:
        if alias.name not in used or alias.name in kinds:
            continue
        module = _kind_module(document, alias)
        kinds[alias.name] = _Kind(alias.group_version, alias.kind, module)
        if module is None:
            continue
        other = imported.get(alias.kind)
        if other is not None and kinds[other.name] != kinds[alias.name]:
            raise DSLError(
                document.filename,
                alias.line,
                alias.col,
                f"expected imported kind classes to have distinct names, found '{alias.kind}' from both "
                f"{kinds[other.name].module} (alias at {other.position}) and {module}",
            )
        imported[alias.kind] = alias
    return kinds


# -- names -----------------------------------------------------------------------------------------------


def _check_names(document: Document, kinds: dict[str, _Kind]) -> None:
    """Reject documents whose names would collide or be invalid once turned into Python."""

    def fail(node: Node, message: str) -> DSLError:
        return DSLError(document.filename, node.line, node.col, message)

    module_names: dict[str, str] = {
        kind.kind: f"the imported kind {kind.kind}" for kind in kinds.values() if kind.module
    }
    for decl in document.decls:
        for generated in (decl.name, f"{decl.name}State", f"{decl.name}Impl"):
            if generated in _FRAMEWORK_NAMES or generated in module_names:
                owner = module_names.get(generated, "the runtime import")
                raise fail(
                    decl,
                    f"expected decl '{decl.name}' to generate class names of its own, "
                    f"found '{generated}' taken by {owner}",
                )
            module_names[generated] = f"decl '{decl.name}' (at {decl.position})"
        parameters: dict[str, str] = {}
        for state in decl.states:
            python = snake_case(state.name)
            if keyword.iskeyword(python) or python in _RESERVED_PARAMETERS:
                raise fail(
                    state,
                    f"expected a state name usable as a Python parameter, found '{state.name}' "
                    f"(it becomes '{python}')",
                )
            if python in parameters:
                raise fail(
                    state,
                    f"expected state names distinct in snake_case, found '{state.name}' and "
                    f"'{parameters[python]}' (both '{python}')",
                )
            parameters[python] = state.name
        methods: dict[str, str] = {}
        for action in decl.actions:
            python = snake_case(action.name)
            if keyword.iskeyword(python) or python in _MANAGER_ATTRIBUTES | _IMPL_HOOK_METHODS:
                raise fail(
                    action,
                    f"expected an action name usable as a Python method, found '{action.name}' "
                    f"(it becomes '{python}')",
                )
            if python in methods:
                raise fail(
                    action,
                    f"expected action names distinct in snake_case, found '{action.name}' and "
                    f"'{methods[python]}' (both '{python}')",
                )
            methods[python] = action.name


# -- source helpers --------------------------------------------------------------------------------------


def _literal(text: str) -> str:
    """A double-quoted Python string literal (JSON escapes are valid Python escapes)."""
    return json.dumps(text, ensure_ascii=False)


def _fit(line: str) -> str:
    """Keep a line the generator cannot break (a long literal) lint-clean.

    Like ruff's E501, this lets through a line of a single word and one ending with a URL that starts
    within the limit, so that the ``noqa`` is never unused.
    """
    chunks = line.split()
    if len(line) <= LINE_LENGTH or len(chunks) < 2:
        return line
    if "://" in chunks[-1] and line.rindex(chunks[-1]) < LINE_LENGTH:
        return line
    return f"{line}  # noqa: E501"


def _call(indent: str, head: str, args: Sequence[str], tail: str) -> list[str]:
    """``head(args)tail`` on one line when it fits, otherwise one argument per line."""
    one_line = f"{indent}{head}({', '.join(args)}){tail}"
    if len(one_line) <= LINE_LENGTH or not args:
        return [_fit(one_line)]
    inner = indent + _INDENT
    return [f"{indent}{head}(", *(_fit(f"{inner}{arg},") for arg in args), f"{indent}){tail}"]


def _docstring(text: str, indent: str) -> list[str]:
    """A docstring of ``text``, lines wrapped to the line length, quotes and backslashes escaped."""
    text = text.strip().replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    # A quote next to the docstring's own quotes would end (or blur) them.
    if text.startswith('"'):
        text = "\\" + text
    if text.endswith('"'):
        text = text[:-1] + '\\"'
    width = LINE_LENGTH - len(indent)
    lines: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if len(line) + 3 <= width:
            lines.append(line)
        else:
            lead = line[: len(line) - len(line.lstrip())]
            lines.extend(
                textwrap.wrap(
                    line,
                    width - 3,
                    initial_indent=lead,
                    subsequent_indent=lead,
                    break_long_words=False,
                    break_on_hyphens=False,
                )
            )
    if not lines:
        return []
    if len(lines) == 1 and len(lines[0]) + 6 <= width:
        return [f'{indent}"""{lines[0]}"""']
    body = [f"{indent}{line}" if line else "" for line in lines[1:]]
    return [_fit(f'{indent}"""{lines[0]}'), *(_fit(line) for line in body), f'{indent}"""']


def _selector_args(selector: Selector) -> list[str]:
    if selector.kind == "owned":
        return ['"owned"']
    return [_literal(selector.kind), _literal(selector.key), _literal(selector.value)]


def _selector_source(selector: Selector) -> str:
    return f"Selector({', '.join(_selector_args(selector))})"


# -- imports ---------------------------------------------------------------------------------------------


def _is_third_party(module: str) -> bool:
    """Whether ruff's isort would file ``module`` under third-party: installed into site-packages."""
    try:
        spec = find_spec(module.partition(".")[0])
    except (ImportError, ValueError):
        return True
    locations = [spec.origin or ""] if spec is not None else []
    if spec is not None and spec.submodule_search_locations:
        locations.extend(spec.submodule_search_locations)
    parts = {part for location in locations for part in PurePath(location).parts}
    return bool(parts & {"site-packages", "dist-packages"})


def _member_key(name: str) -> tuple[int, str, str]:
    # isort's order-by-type: CONSTANTS, then Classes, then everything else.
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name.lower(), name


def _import_lines(imports: dict[str, set[str]]) -> list[str]:
    sections: dict[bool, list[str]] = {True: [], False: []}
    for module in sorted(imports, key=lambda m: (m.lower(), m)):
        names = sorted(imports[module], key=_member_key)
        line = f"from {module} import {', '.join(names)}"
        if len(line) > LINE_LENGTH:
            line = "\n".join([f"from {module} import (", *(f"{_INDENT}{n}," for n in names), ")"])
        sections[_is_third_party(module)].append(line)
    blocks = [block for block in (sections[True], sections[False]) if block]
    return "\n\n".join("\n".join(block) for block in blocks).splitlines()


_STDLIB_IMPORTS = """\
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast"""


# -- the module ------------------------------------------------------------------------------------------


class _Writer:
    def __init__(self, document: Document, kinds: dict[str, _Kind]) -> None:
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
        i1, i2, i3 = _INDENT, _INDENT * 2, _INDENT * 3
        self.emit(f"class {decl.name}State:")
        self.emit(
            *_docstring(
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
        self.emit(*_call(i1, "def __init__", params, " -> None:"))
        args = [
            "target",
            _literal(target.group_version),
            _literal(target.kind),
            _literal(f"{decl.name}State"),
        ]
        self.emit(*_call(i2, "_require_kind", args, ""))
        self.emit(f"{i2}self.store = store", f"{i2}self.target = target", f"{i2}self.registry = registry")
        for state in decl.states:
            kind = self.kinds[state.kind.name]
            shape = f"the {kind.kind} objects" if state.is_list else f"the {kind.kind} (or None)"
            summary = f"The ``{state.name}`` state: {shape} its selectors select."
            self.blank()
            self.emit(f"{i1}def get_{snake_case(state.name)}(self) -> {self.state_type(state)}:")
            self.emit(*_docstring(f"{summary}\n\n{state.doc}" if state.doc else summary, i2))
            if kind.module:
                model = kind.kind
            else:
                model = f"self.registry.for_gvk({_literal(kind.group_version)}, {_literal(kind.kind)})"
            self.emit(f"{i2}spec = StateSpec(")
            self.emit(f"{i3}name={_literal(state.name)},", _fit(f"{i3}kind={model},"))
            self.emit(f"{i3}is_list={state.is_list},")
            sources = [_selector_source(line.selector) for line in state.selectors]
            if len(sources) == 1 and len(f"{i3}selectors=({sources[0]},),") <= LINE_LENGTH:
                self.emit(f"{i3}selectors=({sources[0]},),")
            elif sources:
                self.emit(f"{i3}selectors=(")
                for line in state.selectors:
                    self.emit(*_call(i3 + _INDENT, "Selector", _selector_args(line.selector), ","))
                self.emit(f"{i3}),")
            self.emit(f"{i2})")
            cast_args = [self.state_type(state), "fetch_state(self.store, self.target, spec)"]
            self.emit(*_call(i2, "return cast", cast_args, ""))

    def impl_protocol(self, decl: Decl) -> None:
        i1, i2 = _INDENT, _INDENT * 2
        self.emit(f"class {decl.name}Impl(Protocol):")
        intro = (
            f"The actions of {decl.name}, for a controller to implement.\n\n"
            "An implementation that also has ``before_action`` and ``after_action`` (an ActionHook) has them "
            "called around each of its actions."
        )
        self.emit(*_docstring(f"{intro}\n\n{decl.doc}" if decl.doc else intro, i1))
        for action in decl.actions:
            self.blank()
            params = ["self", "ctx: Context"]
            params += [
                f"{snake_case(ref.name)}: {self.state_type(decl.state(ref.name))}" for ref in action.states
            ]
            if action.doc:
                self.emit(*_call(i1, f"def {snake_case(action.name)}", params, " -> Result | None:"))
                self.emit(*_docstring(action.doc, i2))
            else:
                self.emit(*_call(i1, f"def {snake_case(action.name)}", params, " -> Result | None: ..."))

    def manager_class(self, decl: Decl) -> None:
        i1, i2, i3 = _INDENT, _INDENT * 2, _INDENT * 3
        self.emit(f"class {decl.name}:")
        self.emit(
            *_docstring(
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
        self.emit(*_call(i1, "def __init__", params, " -> None:"))
        self.emit(f"{i2}self.state = state", f"{i2}self.impl = impl")
        self.emit(f"{i2}self.hooks: tuple[ActionHook, ...] = tuple(hooks)")
        self.emit(f"{i2}if isinstance(impl, ActionHook):")
        self.emit(f"{i3}# The implementation's own before_action/after_action run after the other hooks.")
        self.emit(f"{i3}self.hooks = (*self.hooks, impl)")
        for action in decl.actions:
            method = snake_case(action.name)
            self.blank()
            self.emit(f"{i1}def {method}(self) -> StatefulAction:")
            self.emit(*(_docstring(action.doc, i2) or _docstring(f"The ``{action.name}`` action.", i2)))
            self.blank()
            self.emit(f"{i2}def act(ctx: Context, states: Mapping[str, Any]) -> Result | None:")
            args = ["ctx", *(f"states[{_literal(ref.name)}]" for ref in action.states)]
            self.emit(*_call(i3, f"return self.impl.{method}", args, ""))
            self.blank()
            getters = [
                f"{_literal(ref.name)}: self.state.get_{snake_case(ref.name)}" for ref in action.states
            ]
            args = [_literal(action.name), f"{{{', '.join(getters)}}}", "act", "self.hooks"]
            call = _call(i2, "return StatefulAction", args, "")
            if len(call) > 1 and len(call[2]) > LINE_LENGTH:
                # The getters mapping does not fit on its line either: one getter per line.
                call[2:3] = [f"{i3}{{", *(f"{i3}{_INDENT}{getter}," for getter in getters), f"{i3}}},"]
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
    kinds = _resolve_kinds(document)
    _check_names(document, kinds)
    source = " ".join(source_name.split())  # one line, whatever the caller passes
    writer = _Writer(document, kinds)
    writer.emit(f"# Code generated by capa_py.ctrlkit.codegen from {source}. DO NOT EDIT.")
    writer.emit(*_docstring(_module_doc(document, source), ""))
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
        writer.emit(*_STDLIB_IMPORTS.splitlines())
        writer.blank()
        writer.emit(*_import_lines(imports))
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
    listed = [_literal(name) for name in names]
    one_line = f"__all__ = [{', '.join(listed)}]"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    return ["__all__ = [", *(f"{_INDENT}{name}," for name in listed), "]"]


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
