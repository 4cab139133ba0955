"""The CtrlKit DSL: a parser that turns a ``.ctrlkit`` document into a typed, checked syntax tree.

A document declares, for one custom resource, the states a controller reads and the actions it runs; the
code generator (:mod:`capa_py.ctrlkit.codegen`) turns the tree into state getters, an implementation
protocol and action wrappers, so that writing a controller is writing the actions and composing them::

    bind batch/v1 k8s.io/api/batch/v1          // a group/version and the package holding its types
    alias Job batch/v1/Job                     // a short name for a group/version/kind

    // CronJobControllerManager declares the actions of the CronJob controller.
    decl CronJobControllerManager for CronJob {
        state {
            jobs []Job {                       // a list state; 'Job' alone is a single object
                labels/cronjob=${target.Name}  // one selector per line, read raw to the end of line
                owned
            }
        }
        action {
            // List all active jobs, and update the status.
            ListActiveJobsAndUpdateStatus(jobs)
        }
    }

Comment lines directly above a ``decl``, a state or an action are kept as its documentation.

The parser is hand-written so that every error points at the offending token: a :class:`DSLError` reads
``FILE:LINE:COL: message`` and its message says what was expected and what was found. :func:`parse`
checks the syntax and then the meaning (aliases use bound group/versions, decls and states use aliases,
actions take declared states, no name is declared twice).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from capa_py.ctrlkit.state import Selector

__all__ = [
    "ActionDecl",
    "Alias",
    "Bind",
    "Decl",
    "DSLError",
    "Document",
    "KindRef",
    "SelectorLine",
    "StateDecl",
    "StateRef",
    "parse",
    "parse_file",
    "validate",
]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GROUP = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_GROUP_VERSION = re.compile(rf"({_GROUP}/)?v[0-9]+((alpha|beta)[0-9]+)?")
_REFERENCE_START = "${"
_REFERENCE_BODY = re.compile(r"target(\.[A-Za-z_][A-Za-z0-9_]*)+")
_SELECTOR_FORMS = "name=VALUE, labels/KEY=VALUE, fields/PATH=VALUE or owned"


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


# -- the syntax tree -------------------------------------------------------------------------------------


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


# -- the scanner -----------------------------------------------------------------------------------------


class _Tok(StrEnum):
    WORD = "word"
    PUNCT = "punctuation"
    NEWLINE = "end of line"
    EOF = "end of file"


class _Token(NamedTuple):
    kind: _Tok
    text: str
    line: int  # 1-based
    col: int  # 1-based

    def describe(self) -> str:
        if self.kind in (_Tok.WORD, _Tok.PUNCT):
            return f"'{self.text}'"
        return str(self.kind)


_PUNCTUATION = "{}(),"


class _Scanner:
    """Tokens on demand: the parser decides when newlines matter and when a line is read raw."""

    def __init__(self, text: str) -> None:
        # Lines as editors count them: split on newlines only (not on form feeds and other separators).
        self.lines = text.replace("\r\n", "\n").split("\n")
        if self.lines[-1] == "":
            self.lines.pop()  # a final newline ends the last line; it does not start another
        self.row = 0  # 0-based index into lines
        self.col = 0  # 0-based index into the current line
        # Full-line comments by 1-based line number: the documentation of the node below them.
        self.comments: dict[int, str] = {}
        for number, line in enumerate(self.lines, start=1):
            stripped = line.strip()
            if stripped.startswith("//"):
                body = stripped[2:]
                self.comments[number] = (body[1:] if body.startswith(" ") else body).rstrip()

    def eof(self) -> _Token:
        if not self.lines:
            return _Token(_Tok.EOF, "", 1, 1)
        return _Token(_Tok.EOF, "", len(self.lines), len(self.lines[-1]) + 1)

    def _skip_blanks(self) -> None:
        text = self.lines[self.row]
        while self.col < len(text) and text[self.col].isspace():
            self.col += 1

    def _at_line_end(self) -> bool:
        text = self.lines[self.row]
        return self.col >= len(text) or text.startswith("//", self.col)

    def peek(self, newlines: bool = False) -> _Token:
        """The next token; with ``newlines`` the end of the current line is a token too."""
        while self.row < len(self.lines):
            self._skip_blanks()
            if not self._at_line_end():
                return self._word_or_punct()
            if newlines:
                return _Token(_Tok.NEWLINE, "", self.row + 1, self.col + 1)
            self.row += 1
            self.col = 0
        return self.eof()

    def take(self, newlines: bool = False) -> _Token:
        token = self.peek(newlines)
        if token.kind is _Tok.NEWLINE:
            self.row += 1
            self.col = 0
        elif token.kind is not _Tok.EOF:
            self.col = token.col - 1 + len(token.text)
        return token

    def _word_or_punct(self) -> _Token:
        text = self.lines[self.row]
        start = self.col
        if text[start] in _PUNCTUATION:
            return _Token(_Tok.PUNCT, text[start], self.row + 1, start + 1)
        end = start
        while (
            end < len(text)
            and not text[end].isspace()
            and text[end] not in _PUNCTUATION
            and not text.startswith("//", end)
        ):
            end += 1
        return _Token(_Tok.WORD, text[start:end], self.row + 1, start + 1)

    def raw_lines(self) -> Iterable[tuple[str, int, int]]:
        """The rest of the current line, then whole lines: ``(text, line, col)`` without blanks or comments.

        A ``//`` starts a comment at the beginning of a line or after whitespace, so values such as
        ``a//b`` survive. The caller stops iterating at the line that closes the block and seeks back to
        just after its brace.
        """
        while self.row < len(self.lines):
            text = self.lines[self.row]
            self._skip_blanks()
            start = self.col
            comment = re.search(r"(^|\s)//", text[start:])
            end = len(text) if comment is None else start + comment.start()
            content = text[start:end].rstrip()
            row = self.row
            self.row += 1
            self.col = 0
            if content:
                yield content, row + 1, start + 1

    def seek(self, line: int, col: int) -> None:
        """Continue scanning at a 1-based position (after a block read with :meth:`raw_lines`)."""
        self.row = line - 1
        self.col = col - 1

    def doc_above(self, line: int) -> str:
        """The comment lines directly above ``line``, joined, without leading or trailing blank lines."""
        collected: list[str] = []
        number = line - 1
        while number in self.comments:
            collected.append(self.comments[number])
            number -= 1
        return "\n".join(reversed(collected)).strip("\n")


# -- the parser ------------------------------------------------------------------------------------------


def _is_identifier(text: str) -> bool:
    return _IDENTIFIER.fullmatch(text) is not None


class _Parser:
    def __init__(self, text: str, filename: str) -> None:
        self.filename = filename
        self.scanner = _Scanner(text)

    def error(self, line: int, col: int, message: str) -> DSLError:
        return DSLError(self.filename, line, col, message)

    def unexpected(self, token: _Token, expected: str) -> DSLError:
        return self.error(token.line, token.col, f"expected {expected}, found {token.describe()}")

    def expect_punct(self, char: str, context: str, newlines: bool = False) -> _Token:
        token = self.scanner.peek(newlines)
        if token.kind is not _Tok.PUNCT or token.text != char:
            raise self.unexpected(token, f"'{char}' {context}")
        return self.scanner.take(newlines)

    def expect_word(self, expected: str, newlines: bool = False) -> _Token:
        token = self.scanner.peek(newlines)
        if token.kind is not _Tok.WORD:
            raise self.unexpected(token, expected)
        return self.scanner.take(newlines)

    def expect_identifier(self, expected: str, newlines: bool = False) -> _Token:
        token = self.scanner.peek(newlines)
        if token.kind is not _Tok.WORD or not _is_identifier(token.text):
            raise self.unexpected(token, f"{expected} (letters, digits and '_')")
        return self.scanner.take(newlines)

    def expect_line_end(self, after: str) -> None:
        token = self.scanner.peek(newlines=True)
        if token.kind not in (_Tok.NEWLINE, _Tok.EOF):
            raise self.unexpected(token, f"end of line after {after}")
        self.scanner.take(newlines=True)

    # -- document ---------------------------------------------------------------------------------
    def document(self) -> Document:
        binds: list[Bind] = []
        aliases: list[Alias] = []
        decls: list[Decl] = []
        while True:
            token = self.scanner.peek()
            if token.kind is _Tok.EOF:
                break
            if token.kind is _Tok.WORD and token.text == "bind":
                binds.append(self.bind())
            elif token.kind is _Tok.WORD and token.text == "alias":
                aliases.append(self.alias())
            elif token.kind is _Tok.WORD and token.text == "decl":
                decls.append(self.decl())
            else:
                raise self.unexpected(token, "'bind', 'alias' or 'decl'")
        return Document(self.filename, tuple(binds), tuple(aliases), tuple(decls))

    def group_version(self, token: _Token, what: str) -> str:
        if not _GROUP_VERSION.fullmatch(token.text):
            raise self.unexpected(token, f"{what} such as 'apps/v1' or 'v1'")
        return token.text

    def bind(self) -> Bind:
        keyword = self.scanner.take()
        gv_token = self.expect_word("a group/version after 'bind'", newlines=True)
        group_version = self.group_version(gv_token, "a group/version after 'bind'")
        package = self.expect_word(f"a package after 'bind {group_version}'", newlines=True)
        self.expect_line_end(f"'bind {group_version} {package.text}'")
        return Bind(line=keyword.line, col=keyword.col, group_version=group_version, package=package.text)

    def alias(self) -> Alias:
        keyword = self.scanner.take()
        name = self.expect_identifier("an alias name after 'alias'", newlines=True)
        gvk = self.expect_word(f"a group/version/kind after 'alias {name.text}'", newlines=True)
        group_version, slash, kind = gvk.text.rpartition("/")
        expected = f"a group/version/kind such as 'batch/v1/Job' after 'alias {name.text}'"
        if not slash or not _GROUP_VERSION.fullmatch(group_version) or not _is_identifier(kind):
            raise self.unexpected(gvk, expected)
        self.expect_line_end(f"'alias {name.text} {gvk.text}'")
        return Alias(
            line=keyword.line, col=keyword.col, name=name.text, group_version=group_version, kind=kind
        )

    def decl(self) -> Decl:
        keyword = self.scanner.take()
        doc = self.scanner.doc_above(keyword.line)
        name = self.expect_identifier("a manager name after 'decl'")
        for_token = self.scanner.peek()
        if for_token.kind is not _Tok.WORD or for_token.text != "for":
            raise self.unexpected(for_token, f"'for' after 'decl {name.text}'")
        self.scanner.take()
        target = self.expect_identifier(f"the kind that 'decl {name.text}' is for")
        opening = self.expect_punct("{", f"to open the body of decl '{name.text}'")
        states: list[StateDecl] = []
        actions: list[ActionDecl] = []
        while True:
            token = self.scanner.peek()
            if token.kind is _Tok.PUNCT and token.text == "}":
                self.scanner.take()
                break
            if token.kind is _Tok.WORD and token.text == "state":
                states.extend(self.state_block())
            elif token.kind is _Tok.WORD and token.text == "action":
                actions.extend(self.action_block())
            elif token.kind is _Tok.EOF:
                raise self.unexpected(
                    token, f"'}}' to close decl '{name.text}' (opened at {opening.line}:{opening.col})"
                )
            else:
                raise self.unexpected(token, f"'state', 'action' or '}}' in the body of decl '{name.text}'")
        return Decl(
            line=keyword.line,
            col=keyword.col,
            name=name.text,
            target=KindRef(line=target.line, col=target.col, name=target.text),
            states=tuple(states),
            actions=tuple(actions),
            doc=doc,
        )

    def state_block(self) -> list[StateDecl]:
        self.scanner.take()
        opening = self.expect_punct("{", "after 'state'")
        states: list[StateDecl] = []
        while True:
            token = self.scanner.peek()
            if token.kind is _Tok.PUNCT and token.text == "}":
                self.scanner.take()
                return states
            if token.kind is _Tok.EOF:
                raise self.unexpected(
                    token, f"'}}' to close the state block opened at {opening.line}:{opening.col}"
                )
            states.append(self.state())

    def state(self) -> StateDecl:
        name = self.expect_identifier("a state name or '}'")
        kind = self.scanner.peek()
        expected_kind = f"the kind of state '{name.text}' (Kind or []Kind)"
        if kind.kind is not _Tok.WORD:
            raise self.unexpected(kind, expected_kind)
        is_list = kind.text.startswith("[]")
        kind_name = kind.text.removeprefix("[]")
        if not _is_identifier(kind_name):
            raise self.unexpected(kind, expected_kind)
        self.scanner.take()
        kind_col = kind.col + (2 if is_list else 0)
        opening = self.expect_punct("{", f"after the kind of state '{name.text}'")
        selectors = self.selectors(name.text, opening)
        return StateDecl(
            line=name.line,
            col=name.col,
            name=name.text,
            kind=KindRef(line=kind.line, col=kind_col, name=kind_name),
            is_list=is_list,
            selectors=tuple(selectors),
            doc=self.scanner.doc_above(name.line),
        )

    def selectors(self, state: str, opening: _Token) -> list[SelectorLine]:
        lines: list[SelectorLine] = []
        seen: dict[str, SelectorLine] = {}
        for text, line, col in self.scanner.raw_lines():
            if text.startswith("}"):
                self.scanner.seek(line, col + 1)  # whatever follows the brace is ordinary tokens again
                return lines
            if any(char.isspace() for char in text):
                raise self.error(
                    line,
                    col,
                    f"expected one selector per line ({_SELECTOR_FORMS}) with the state's '}}' on its own "
                    f"line, found '{text}'",
                )
            try:
                selector = Selector.parse(text)
            except ValueError:
                raise self.error(
                    line, col, f"expected a selector ({_SELECTOR_FORMS}), found '{text}'"
                ) from None
            if selector.kind == "name" and not selector.value:
                raise self.error(
                    line, col + len(text), "expected the object's name after 'name=', found end of line"
                )
            self.check_references(text, line, col)
            node = SelectorLine(line=line, col=col, text=text, selector=selector)
            if selector.kind in ("name", "owned"):
                if selector.kind in seen:
                    first = seen[selector.kind]
                    raise self.error(
                        line,
                        col,
                        f"expected at most one '{selector.kind}' selector in state '{state}', found another "
                        f"(the first is at {first.position})",
                    )
                seen[selector.kind] = node
            lines.append(node)
        end = self.scanner.eof()
        raise self.unexpected(
            end, f"'}}' to close the selectors of state '{state}' (opened at {opening.line}:{opening.col})"
        )

    def check_references(self, text: str, line: int, col: int) -> None:
        """Each ``${...}`` must be closed and name a field of the target: ``${target.Name}``."""
        start = text.find(_REFERENCE_START)
        while start != -1:
            end = text.find("}", start)
            if end == -1:
                raise self.error(
                    line, col + start, f"expected '}}' to close the reference, found '{text[start:]}'"
                )
            reference = text[start : end + 1]
            if not _REFERENCE_BODY.fullmatch(reference[2:-1]):
                raise self.error(
                    line,
                    col + start,
                    f"expected a reference to the target such as '${{target.Name}}', found '{reference}'",
                )
            start = text.find(_REFERENCE_START, end)

    def action_block(self) -> list[ActionDecl]:
        self.scanner.take()
        opening = self.expect_punct("{", "after 'action'")
        actions: list[ActionDecl] = []
        while True:
            token = self.scanner.peek()
            if token.kind is _Tok.PUNCT and token.text == "}":
                self.scanner.take()
                return actions
            if token.kind is _Tok.EOF:
                raise self.unexpected(
                    token, f"'}}' to close the action block opened at {opening.line}:{opening.col}"
                )
            actions.append(self.action())

    def action(self) -> ActionDecl:
        name = self.expect_identifier("an action name or '}'")
        self.expect_punct("(", f"after action name '{name.text}'")
        states: list[StateRef] = []
        token = self.scanner.peek()
        if token.kind is _Tok.PUNCT and token.text == ")":
            self.scanner.take()
        else:
            while True:
                state = self.expect_identifier(
                    f"a state name or ')' in the arguments of '{name.text}'" if not states else "a state name"
                )
                states.append(StateRef(line=state.line, col=state.col, name=state.text))
                token = self.scanner.peek()
                if token.kind is _Tok.PUNCT and token.text == ")":
                    self.scanner.take()
                    break
                if token.kind is not _Tok.PUNCT or token.text != ",":
                    raise self.unexpected(token, f"',' or ')' in the arguments of '{name.text}'")
                self.scanner.take()
        return ActionDecl(
            line=name.line,
            col=name.col,
            name=name.text,
            states=tuple(states),
            doc=self.scanner.doc_above(name.line),
        )


# -- meaning ---------------------------------------------------------------------------------------------


def _choices(names: Iterable[str]) -> str:
    listed = sorted(set(names))
    return ", ".join(listed) if listed else "none is declared"


def _problems(document: Document) -> list[DSLError]:
    problems: list[DSLError] = []

    def report(node: Node, message: str) -> None:
        problems.append(DSLError(document.filename, node.line, node.col, message))

    def once(seen: dict[str, Node], key: str, node: Node, what: str) -> bool:
        """Record ``node`` under ``key``; report it when ``key`` was declared before."""
        if key in seen:
            report(
                node,
                f"expected each {what} declared once, found '{key}' again (first at {seen[key].position})",
            )
            return False
        seen[key] = node
        return True

    binds: dict[str, Node] = {}
    for bind in document.binds:
        once(binds, bind.group_version, bind, "group/version")

    aliases: dict[str, Node] = {}
    for alias in document.aliases:
        if once(aliases, alias.name, alias, "alias") and alias.group_version not in binds:
            report(
                alias,
                f"expected alias '{alias.name}' to use a bound group/version ({_choices(binds)}), "
                f"found '{alias.group_version}'",
            )

    decls: dict[str, Node] = {}
    for decl in document.decls:
        once(decls, decl.name, decl, "decl")
        if decl.target.name not in aliases:
            report(
                decl.target,
                f"expected the kind of decl '{decl.name}' to be an alias ({_choices(aliases)}), "
                f"found '{decl.target.name}'",
            )
        states: dict[str, Node] = {}
        for state in decl.states:
            once(states, state.name, state, f"state of decl '{decl.name}'")
            if state.kind.name not in aliases:
                report(
                    state.kind,
                    f"expected the kind of state '{state.name}' to be an alias ({_choices(aliases)}), "
                    f"found '{state.kind.name}'",
                )
        actions: dict[str, Node] = {}
        for action in decl.actions:
            once(actions, action.name, action, f"action of decl '{decl.name}'")
            taken: dict[str, Node] = {}
            for ref in action.states:
                if ref.name not in states:
                    report(
                        ref,
                        f"expected action '{action.name}' to take states that decl '{decl.name}' declares "
                        f"({_choices(states)}), found '{ref.name}'",
                    )
                else:
                    once(taken, ref.name, ref, f"state argument of action '{action.name}'")
    return problems


def validate(document: Document) -> Document:
    """Check the meaning of a parsed document; raise the first :class:`DSLError` (the rest in ``others``)."""
    problems = sorted(_problems(document), key=lambda e: (e.line, e.col))
    if problems:
        first = problems[0]
        first.others = tuple(problems[1:])
        raise first
    return document


def parse(text: str, filename: str = "<string>") -> Document:
    """Parse and check a document; raise :class:`DSLError` at the first problem."""
    return validate(_Parser(text, filename).document())


def parse_file(path: str | Path) -> Document:
    """Parse and check the document in a file; errors name the file as given."""
    path = Path(path)
    return parse(path.read_text(encoding="utf-8"), str(path))
