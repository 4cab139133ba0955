"""The CtrlKit DSL's syntax tree (every node knows where it starts) and its error, :class:`DSLError`."""

from __future__ import annotations

from dataclasses import dataclass

from capa_py.ctrlkit.state import Selector


class DSLError(Exception):
    """A syntax or meaning error in a document, at a 1-based line and column.

    ``str(error)`` is ``FILE:LINE:COL: message``. When a check finds several problems the first (in
    document order) is raised and the rest are in :attr:`others`.
    """

    def __init__(self, filename: str, line: int, col: int, message: str) -> None:
        self.filename = filename
        self.line = line
        self.col = col
        self.message = message
        self.others: tuple[DSLError, ...] = ()
        super().__init__(f"{filename}:{line}:{col}: {message}")


@dataclass(frozen=True, kw_only=True)
class Node:
    """Where a node starts in its document (1-based)."""

    line: int
    col: int

    @property
    def position(self) -> str:
        return f"{self.line}:{self.col}"


@dataclass(frozen=True, kw_only=True)
class Bind(Node):
    """``bind GROUP/VERSION PACKAGE``: the package that provides the types of a group/version."""

    group_version: str
    package: str


@dataclass(frozen=True, kw_only=True)
class Alias(Node):
    """``alias NAME GROUP/VERSION/KIND``: a short name for a kind."""

    name: str
    group_version: str
    kind: str

    @property
    def gvk(self) -> str:
        return f"{self.group_version}/{self.kind}"


@dataclass(frozen=True, kw_only=True)
class KindRef(Node):
    """A reference to an alias: a decl's target or a state's kind."""

    name: str


@dataclass(frozen=True, kw_only=True)
class SelectorLine(Node):
    """One selector line of a state, as written and as parsed."""

    text: str
    selector: Selector


@dataclass(frozen=True, kw_only=True)
class StateDecl(Node):
    """``name Kind { selectors }`` or ``name []Kind { selectors }``."""

    name: str
    kind: KindRef
    is_list: bool
    selectors: tuple[SelectorLine, ...]
    doc: str = ""


@dataclass(frozen=True, kw_only=True)
class StateRef(Node):
    """A state named as an action's argument."""

    name: str


@dataclass(frozen=True, kw_only=True)
class ActionDecl(Node):
    """``ActionName(state, ...)``: an action and the states it takes, in order."""

    name: str
    states: tuple[StateRef, ...]
    doc: str = ""


@dataclass(frozen=True, kw_only=True)
class Decl(Node):
    """``decl Name for Kind { state {...} action {...} }``: one controller manager."""

    name: str
    target: KindRef
    states: tuple[StateDecl, ...]
    actions: tuple[ActionDecl, ...]
    doc: str = ""

    def state(self, name: str) -> StateDecl:
        for state in self.states:
            if state.name == name:
                return state
        raise KeyError(name)


@dataclass(frozen=True)
class Document:
    """A parsed document: its binds, aliases and decls in the order written."""

    filename: str
    binds: tuple[Bind, ...] = ()
    aliases: tuple[Alias, ...] = ()
    decls: tuple[Decl, ...] = ()

    def alias(self, name: str) -> Alias:
        """The alias called ``name`` (the first, if a document that failed validation declares it twice)."""
        for alias in self.aliases:
            if alias.name == name:
                return alias
        raise KeyError(name)

    def bind(self, group_version: str) -> Bind:
        """The bind of ``group_version``."""
        for bind in self.binds:
            if bind.group_version == group_version:
                return bind
        raise KeyError(group_version)
