"""The operands of Go's ``text/template`` grammar: commands, terms, field chains, variables in scope,
strings and numbers (with Go's number syntax and its integer, float and complex constants), parsed from
the item stream shared by every tree of one text, and the parse errors as Go words them.

:class:`OperandParser` is the base of the tree parser of :mod:`~capa_py.tinkerbell.gotemplate.parse`, which
parses pipelines (:meth:`OperandParser.pipeline`) and the actions around them.
"""

from __future__ import annotations

from collections.abc import Collection

from capa_py.tinkerbell.gotemplate.errors import TemplateError
from capa_py.tinkerbell.gotemplate.lex import Item, T, go_quote
from capa_py.tinkerbell.gotemplate.literals import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    SyntaxErr,
    parse_float,
    parse_int_base0,
    unquote,
    unquote_char,
)
from capa_py.tinkerbell.gotemplate.nodes import (
    BoolNode,
    ChainNode,
    CommandNode,
    DotNode,
    FieldNode,
    IdentifierNode,
    NilNode,
    NumberNode,
    Operand,
    PipeNode,
    StringNode,
    Tree,
    VariableNode,
)

MAX_STACK_DEPTH = 10000


class ItemStream:
    """The item list shared by every tree parsed from one text, with Go's one-item error line rule."""

    def __init__(self, items: list[Item]) -> None:
        self.items = items
        self.index = 0
        self.furthest = 0

    def next(self) -> Item:
        item = self.items[min(self.index, len(self.items) - 1)]
        self.index += 1
        self.furthest = max(self.furthest, self.index - 1)
        return item

    def backup(self, n: int = 1) -> None:
        self.index -= n

    def peek(self) -> Item:
        item = self.next()
        self.backup()
        return item

    def next_non_space(self) -> Item:
        while True:
            item = self.next()
            if item.typ is not T.SPACE:
                return item

    def peek_non_space(self) -> Item:
        item = self.next_non_space()
        self.backup()
        return item

    def error_line(self) -> int:
        return self.items[min(self.furthest, len(self.items) - 1)].line


class OperandParser:
    """A parser's state and errors, and its parsing of commands and operands."""

    def __init__(
        self,
        name: str,
        parse_name: str,
        text: str,
        stream: ItemStream,
        funcs: Collection[str],
        trees: dict[str, Tree],
    ) -> None:
        self.name = name
        self.parse_name = parse_name
        self.text = text
        self.s = stream
        self.funcs = funcs
        self.trees = trees
        self.vars: list[str] = ["$"]
        self.range_depth = 0
        self.stack_depth = 0
        self.action_line = 0

    # -- errors ---------------------------------------------------------------------------------
    def errorf(self, message: str) -> TemplateError:
        line = self.s.error_line()
        text = f"template: {self.parse_name}:{line}: {message}"
        return TemplateError(text, name=self.parse_name, line=line)

    def unexpected(self, item: Item, context: str) -> TemplateError:
        if item.typ is T.ERROR:
            extra = ""
            if self.action_line not in (0, item.line):
                extra = f" in action started at {self.parse_name}:{self.action_line}"
                if item.val.endswith(" action"):
                    extra = extra[len(" in action") :]
            return self.errorf(f"{item}{extra}")
        return self.errorf(f"unexpected {item} in {context}")

    def expect(self, typ: T, context: str) -> Item:
        item = self.s.next_non_space()
        if item.typ is not typ:
            raise self.unexpected(item, context)
        return item

    def pipeline(self, context: str, end: T) -> PipeNode:
        """A pipeline up to ``end`` (the tree parser's; a parenthesized operand is one)."""
        raise NotImplementedError

    def unquote(self, quoted: str) -> str:
        try:
            return unquote(quoted)
        except SyntaxErr as exc:
            raise self.errorf(str(exc)) from None

    def command(self) -> CommandNode:
        cmd = CommandNode(self.s.peek_non_space().pos)
        while True:
            self.s.peek_non_space()
            operand = self.operand()
            if operand is not None:
                cmd.args.append(operand)
            item = self.s.next()
            if item.typ is T.SPACE:
                continue
            if item.typ in (T.RIGHT_DELIM, T.RIGHT_PAREN):
                self.s.backup()
            elif item.typ is not T.PIPE:
                raise self.unexpected(item, "operand")
            break
        if not cmd.args:
            raise self.errorf("empty command")
        return cmd

    def operand(self) -> Operand | None:
        node = self.term()
        if node is None:
            return None
        if self.s.peek().typ is T.FIELD:
            chain = ChainNode(self.s.peek().pos, node)
            while self.s.peek().typ is T.FIELD:
                chain.field.append(self.s.next().val[1:])
            if isinstance(node, FieldNode):
                return FieldNode(chain.pos, [*node.ident, *chain.field])
            if isinstance(node, VariableNode):
                return VariableNode(chain.pos, [*node.ident, *chain.field])
            if isinstance(node, (BoolNode, StringNode, NumberNode, NilNode, DotNode)):
                raise self.errorf(f"unexpected . after term {go_quote(str(node))}")
            return chain
        return node

    def term(self) -> Operand | None:
        item = self.s.next_non_space()
        typ = item.typ
        if typ is T.IDENTIFIER:
            if item.val not in self.funcs:
                raise self.errorf(f"function {go_quote(item.val)} not defined")
            return IdentifierNode(item.pos, item.val)
        if typ is T.DOT:
            return DotNode(item.pos)
        if typ is T.NIL:
            return NilNode(item.pos)
        if typ is T.VARIABLE:
            return self.use_var(item)
        if typ is T.FIELD:
            return FieldNode(item.pos, item.val[1:].split("."))
        if typ is T.BOOL:
            return BoolNode(item.pos, item.val == "true")
        if typ in (T.CHAR_CONSTANT, T.COMPLEX, T.NUMBER):
            return self.number(item)
        if typ is T.LEFT_PAREN:
            if self.stack_depth >= MAX_STACK_DEPTH:
                raise self.errorf("max expression depth exceeded")
            self.stack_depth += 1
            try:
                return self.pipeline("parenthesized pipeline", T.RIGHT_PAREN)
            finally:
                self.stack_depth -= 1
        if typ in (T.STRING, T.RAW_STRING):
            return StringNode(item.pos, item.val, self.unquote(item.val))
        self.s.backup()
        return None

    def complex_constant(self, text: str) -> complex:
        parts = _split_complex(text) if text.endswith("i") else None
        if parts is not None:
            real, imag = parse_float(parts[0]), parse_float(parts[1])
            if real is not None and imag is not None:
                return complex(real, imag)
        raise self.errorf(f"illegal number syntax: {go_quote(text)}")

    def use_var(self, item: Item) -> VariableNode:
        node = VariableNode(item.pos, item.val.split("."))
        if node.ident[0] in self.vars:
            return node
        raise self.errorf(f"undefined variable {go_quote(node.ident[0])}")

    def number(self, item: Item) -> NumberNode:
        text = item.val
        node = NumberNode(item.pos, text)
        if item.typ is T.CHAR_CONSTANT:
            try:
                ch, tail = unquote_char(text[1:], text[0])
            except SyntaxErr as exc:
                raise self.errorf(str(exc)) from None
            if tail != "'":
                raise self.errorf(f"malformed character constant: {text}")
            code = ord(ch) if not 0xDC80 <= ord(ch) <= 0xDCFF else ord(ch) - 0xDC00
            node.is_int = node.is_uint = node.is_float = True
            node.int64 = node.uint64 = code
            node.float64 = float(code)
            return node
        if item.typ is T.COMPLEX:
            node.complex128 = self.complex_constant(text)
            node.is_complex = True
            node.simplify_complex()
            return node
        if text.endswith("i") and (imag := parse_float(text[:-1])) is not None:
            node.complex128 = complex(0, imag)
            node.is_complex = True
            node.simplify_complex()
            return node
        value = parse_int_base0(text)
        if value is not None and not text.startswith(("+", "-")) and 0 <= value <= UINT64_MAX:
            node.is_uint, node.uint64 = True, value
        if value is not None and INT64_MIN <= value <= INT64_MAX:
            node.is_int, node.int64 = True, value
            if value == 0:
                node.is_uint, node.uint64 = True, 0
        if node.is_int:
            node.is_float, node.float64 = True, float(node.int64)
        elif node.is_uint:
            node.is_float, node.float64 = True, float(node.uint64)
        else:
            f = parse_float(text)
            if f is not None:
                if not any(c in text for c in ".eEpP"):
                    raise self.errorf(f"integer overflow: {go_quote(text)}")
                node.is_float, node.float64 = True, f
                if f.is_integer() and INT64_MIN <= f <= INT64_MAX and float(int(f)) == f:
                    node.is_int, node.int64 = True, int(f)
                if f.is_integer() and 0 <= f <= UINT64_MAX:
                    node.is_uint, node.uint64 = True, int(f)
        if not (node.is_int or node.is_uint or node.is_float):
            raise self.errorf(f"illegal number syntax: {go_quote(text)}")
        return node


def _split_complex(text: str) -> tuple[str, str] | None:
    """``real`` and ``±imag`` of a ``real±imagi`` constant (the sign after the real part's digits)."""
    for k in range(len(text) - 2, 0, -1):
        if text[k] in "+-" and text[k - 1] not in "eEpP":
            return text[:k], text[k:-1]
    return None
