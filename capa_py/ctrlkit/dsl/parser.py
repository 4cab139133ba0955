"""The CtrlKit DSL's hand-written parser: a document's syntax, every error pointing at the offending token
and saying what was expected and what was found."""

from __future__ import annotations

import re

from capa_py.ctrlkit.dsl.scanner import Scanner, Tok, Token
from capa_py.ctrlkit.dsl.tree import (
    ActionDecl,
    Alias,
    Bind,
    Decl,
    Document,
    DSLError,
    KindRef,
    SelectorLine,
    StateDecl,
    StateRef,
)
from capa_py.ctrlkit.state import Selector

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GROUP = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_GROUP_VERSION = re.compile(rf"({_GROUP}/)?v[0-9]+((alpha|beta)[0-9]+)?")
_REFERENCE_START = "${"
_REFERENCE_BODY = re.compile(r"target(\.[A-Za-z_][A-Za-z0-9_]*)+")
_SELECTOR_FORMS = "name=VALUE, labels/KEY=VALUE, fields/PATH=VALUE or owned"


def _is_identifier(text: str) -> bool:
    return _IDENTIFIER.fullmatch(text) is not None


class Parser:
    def __init__(self, text: str, filename: str) -> None:
        self.filename = filename
        self.scanner = Scanner(text)

    def error(self, line: int, col: int, message: str) -> DSLError:
        return DSLError(self.filename, line, col, message)

    def unexpected(self, token: Token, expected: str) -> DSLError:
        return self.error(token.line, token.col, f"expected {expected}, found {token.describe()}")

    def expect_punct(self, char: str, context: str, newlines: bool = False) -> Token:
        token = self.scanner.peek(newlines)
        if token.kind is not Tok.PUNCT or token.text != char:
            raise self.unexpected(token, f"'{char}' {context}")
        return self.scanner.take(newlines)

    def expect_word(self, expected: str, newlines: bool = False) -> Token:
        token = self.scanner.peek(newlines)
        if token.kind is not Tok.WORD:
            raise self.unexpected(token, expected)
        return self.scanner.take(newlines)

    def expect_identifier(self, expected: str, newlines: bool = False) -> Token:
        token = self.scanner.peek(newlines)
        if token.kind is not Tok.WORD or not _is_identifier(token.text):
            raise self.unexpected(token, f"{expected} (letters, digits and '_')")
        return self.scanner.take(newlines)

    def expect_line_end(self, after: str) -> None:
        token = self.scanner.peek(newlines=True)
        if token.kind not in (Tok.NEWLINE, Tok.EOF):
            raise self.unexpected(token, f"end of line after {after}")
        self.scanner.take(newlines=True)

    # -- document ---------------------------------------------------------------------------------
    def document(self) -> Document:
        binds: list[Bind] = []
        aliases: list[Alias] = []
        decls: list[Decl] = []
        while True:
            token = self.scanner.peek()
            if token.kind is Tok.EOF:
                break
            if token.kind is Tok.WORD and token.text == "bind":
                binds.append(self.bind())
            elif token.kind is Tok.WORD and token.text == "alias":
                aliases.append(self.alias())
            elif token.kind is Tok.WORD and token.text == "decl":
                decls.append(self.decl())
            else:
                raise self.unexpected(token, "'bind', 'alias' or 'decl'")
        return Document(self.filename, tuple(binds), tuple(aliases), tuple(decls))

    def group_version(self, token: Token, what: str) -> str:
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
        if for_token.kind is not Tok.WORD or for_token.text != "for":
            raise self.unexpected(for_token, f"'for' after 'decl {name.text}'")
        self.scanner.take()
        target = self.expect_identifier(f"the kind that 'decl {name.text}' is for")
        opening = self.expect_punct("{", f"to open the body of decl '{name.text}'")
        states: list[StateDecl] = []
        actions: list[ActionDecl] = []
        while True:
            token = self.scanner.peek()
            if token.kind is Tok.PUNCT and token.text == "}":
                self.scanner.take()
                break
            if token.kind is Tok.WORD and token.text == "state":
                states.extend(self.state_block())
            elif token.kind is Tok.WORD and token.text == "action":
                actions.extend(self.action_block())
            elif token.kind is Tok.EOF:
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
            if token.kind is Tok.PUNCT and token.text == "}":
                self.scanner.take()
                return states
            if token.kind is Tok.EOF:
                raise self.unexpected(
                    token, f"'}}' to close the state block opened at {opening.line}:{opening.col}"
                )
            states.append(self.state())

    def state(self) -> StateDecl:
        name = self.expect_identifier("a state name or '}'")
        kind = self.scanner.peek()
        expected_kind = f"the kind of state '{name.text}' (Kind or []Kind)"
        if kind.kind is not Tok.WORD:
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

    def selectors(self, state: str, opening: Token) -> list[SelectorLine]:
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
            if token.kind is Tok.PUNCT and token.text == "}":
                self.scanner.take()
                return actions
            if token.kind is Tok.EOF:
                raise self.unexpected(
                    token, f"'}}' to close the action block opened at {opening.line}:{opening.col}"
                )
            actions.append(self.action())

    def action(self) -> ActionDecl:
        name = self.expect_identifier("an action name or '}'")
        self.expect_punct("(", f"after action name '{name.text}'")
        states: list[StateRef] = []
        token = self.scanner.peek()
        if token.kind is Tok.PUNCT and token.text == ")":
            self.scanner.take()
        else:
            while True:
                state = self.expect_identifier(
                    f"a state name or ')' in the arguments of '{name.text}'" if not states else "a state name"
                )
                states.append(StateRef(line=state.line, col=state.col, name=state.text))
                token = self.scanner.peek()
                if token.kind is Tok.PUNCT and token.text == ")":
                    self.scanner.take()
                    break
                if token.kind is not Tok.PUNCT or token.text != ",":
                    raise self.unexpected(token, f"',' or ')' in the arguments of '{name.text}'")
                self.scanner.take()
        return ActionDecl(
            line=name.line,
            col=name.col,
            name=name.text,
            states=tuple(states),
            doc=self.scanner.doc_above(name.line),
        )
