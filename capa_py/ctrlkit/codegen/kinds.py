"""What the code generator checks and resolves before writing: how the generated module gets the class of
each aliased kind (imported from a bound Python package, or read from the registry), and that the Python
names a document's declarations become are valid and distinct."""

from __future__ import annotations

import importlib
import keyword
import re
from dataclasses import dataclass

from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.dsl import Alias, Document, DSLError, Node

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


@dataclass(frozen=True)
class Kind:
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


def resolve_kinds(document: Document) -> dict[str, Kind]:
    used = {decl.target.name for decl in document.decls} | {
        state.kind.name for decl in document.decls for state in decl.states
    }
    kinds: dict[str, Kind] = {}
    imported: dict[str, Alias] = {}
    for alias in document.aliases:
        if alias.name not in used or alias.name in kinds:
            continue
        module = _kind_module(document, alias)
        kinds[alias.name] = Kind(alias.group_version, alias.kind, module)
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


def check_names(document: Document, kinds: dict[str, Kind]) -> None:
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
