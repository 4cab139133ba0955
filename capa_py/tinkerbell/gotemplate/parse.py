"""Parsing a Go template into trees, with Go's ``text/template/parse`` grammar and error messages.

``parse`` returns every tree the text defines (the main one under its name, plus ``define``/``block``
templates). Functions are checked at parse time, as Go does: an unknown function is a parse error.
"""

from __future__ import annotations

from collections.abc import Collection

from capa_py.tinkerbell.gotemplate.errors import TemplateError
from capa_py.tinkerbell.gotemplate.lex import Item, T, go_quote, lex
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
    ActionNode,
    BoolNode,
    BranchNode,
    BreakNode,
    ChainNode,
    CommandNode,
    CommentNode,
    ContinueNode,
    DotNode,
    ElseNode,
    EndNode,
    FieldNode,
    IdentifierNode,
    ListNode,
    NilNode,
    Node,
    NumberNode,
    Operand,
    PipeNode,
    StringNode,
    TemplateNode,
    TextNode,
    Tree,
    VariableNode,
    is_empty_tree,
)

MAX_STACK_DEPTH = 10000
_OPERAND_START = frozenset(
    {
        T.BOOL,
        T.CHAR_CONSTANT,
        T.COMPLEX,
        T.DOT,
        T.FIELD,
        T.IDENTIFIER,
        T.NUMBER,
        T.NIL,
        T.RAW_STRING,
        T.STRING,
        T.VARIABLE,
        T.LEFT_PAREN,
    }
)


class _Stream:
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


class _TreeParser:
    def __init__(
        self,
        name: str,
        parse_name: str,
        text: str,
        stream: _Stream,
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

    # -- trees ----------------------------------------------------------------------------------
    def add(self, root: ListNode) -> None:
        existing = self.trees.get(self.name)
        if existing is None or is_empty_tree(existing.root):
            self.trees[self.name] = Tree(self.name, self.parse_name, self.text, root)
            return
        if not is_empty_tree(root):
            raise self.errorf(f"template: multiple definition of template {go_quote(self.name)}")

    def parse_top(self) -> None:
        root = ListNode(self.s.peek().pos)
        while self.s.peek().typ is not T.EOF:
            if self.s.peek().typ is T.LEFT_DELIM:
                start = self.s.index
                self.s.next()
                if self.s.next_non_space().typ is T.DEFINE:
                    sub = self.sub_parser("definition")
                    sub.parse_definition()
                    continue
                self.s.index = start
            node = self.text_or_action()
            if isinstance(node, (EndNode, ElseNode)):
                raise self.errorf(f"unexpected {node}")
            root.nodes.append(node)
        self.add(root)

    def sub_parser(self, name: str) -> _TreeParser:
        return _TreeParser(name, self.parse_name, self.text, self.s, self.funcs, self.trees)

    def parse_definition(self) -> None:
        context = "define clause"
        item = self.s.next_non_space()
        if item.typ not in (T.STRING, T.RAW_STRING):
            raise self.unexpected(item, context)
        self.name = self.unquote(item.val)
        self.expect(T.RIGHT_DELIM, context)
        root, end = self.item_list()
        if not isinstance(end, EndNode):
            raise self.errorf(f"unexpected {end} in {context}")
        self.add(root)

    def unquote(self, quoted: str) -> str:
        try:
            return unquote(quoted)
        except SyntaxErr as exc:
            raise self.errorf(str(exc)) from None

    def item_list(self) -> tuple[ListNode, Node | EndNode | ElseNode]:
        nodes = ListNode(self.s.peek_non_space().pos)
        while self.s.peek_non_space().typ is not T.EOF:
            node = self.text_or_action()
            if isinstance(node, (EndNode, ElseNode)):
                return nodes, node
            nodes.nodes.append(node)
        raise self.errorf("unexpected EOF")

    def text_or_action(self) -> Node | EndNode | ElseNode:
        item = self.s.next_non_space()
        if item.typ is T.TEXT:
            return TextNode(item.pos, item.val)
        if item.typ is T.LEFT_DELIM:
            self.action_line = item.line
            try:
                return self.action()
            finally:
                self.action_line = 0
        if item.typ is T.COMMENT:
            return CommentNode(item.pos, item.val)
        raise self.unexpected(item, "input")

    def action(self) -> Node | EndNode | ElseNode:
        item = self.s.next_non_space()
        typ = item.typ
        if typ is T.BLOCK:
            return self.block_control()
        if typ is T.BREAK:
            return self.break_or_continue(item, "break")
        if typ is T.CONTINUE:
            return self.break_or_continue(item, "continue")
        if typ is T.ELSE:
            return self.else_control()
        if typ is T.END:
            return EndNode(self.expect(T.RIGHT_DELIM, "end").pos)
        if typ in (T.IF, T.RANGE, T.WITH):
            return self.branch(item.val)
        if typ is T.TEMPLATE:
            return self.template_control()
        self.s.backup()
        first = self.s.peek()
        return ActionNode(first.pos, first.line, self.pipeline("command", T.RIGHT_DELIM))

    def break_or_continue(self, item: Item, word: str) -> Node:
        after = self.s.next_non_space()
        if after.typ is not T.RIGHT_DELIM:
            raise self.unexpected(after, "{{" + word + "}}")
        if self.range_depth == 0:
            raise self.errorf("{{" + word + "}} outside {{range}}")
        return BreakNode(item.pos, item.line) if word == "break" else ContinueNode(item.pos, item.line)

    def pipeline(self, context: str, end: T) -> PipeNode:
        first = self.s.peek_non_space()
        pipe = PipeNode(first.pos, first.line)
        while True:  # declarations
            v = self.s.peek_non_space()
            if v.typ is not T.VARIABLE:
                break
            start = self.s.index  # at v (spaces before it are consumed, as in Go)
            self.s.next()
            after_variable = self.s.peek()
            nxt = self.s.peek_non_space()
            if nxt.typ in (T.ASSIGN, T.DECLARE):
                pipe.is_assign = nxt.typ is T.ASSIGN
                self.s.next_non_space()
                pipe.decl.append(VariableNode(v.pos, v.val.split(".")))
                self.vars.append(v.val)
                break
            if nxt.typ is T.CHAR and nxt.val == ",":
                self.s.next_non_space()
                pipe.decl.append(VariableNode(v.pos, v.val.split(".")))
                self.vars.append(v.val)
                if context == "range" and len(pipe.decl) < 2:
                    if self.s.peek_non_space().typ in (T.VARIABLE, T.RIGHT_DELIM, T.RIGHT_PAREN):
                        continue
                    raise self.errorf("range can only initialize variables")
                raise self.errorf(f"too many declarations in {context}")
            if after_variable.typ is T.SPACE:
                self.s.index = start
            else:
                self.s.index = start
            break
        while True:
            item = self.s.next_non_space()
            if item.typ is end:
                self.check_pipeline(pipe, context)
                return pipe
            if item.typ in _OPERAND_START:
                self.s.backup()
                pipe.cmds.append(self.command())
            else:
                raise self.unexpected(item, context)

    def check_pipeline(self, pipe: PipeNode, context: str) -> None:
        if not pipe.cmds:
            raise self.errorf(f"missing value for {context}")
        for i, cmd in enumerate(pipe.cmds[1:]):
            if isinstance(cmd.args[0], (BoolNode, DotNode, NilNode, NumberNode, StringNode)):
                raise self.errorf(f"non executable command in pipeline stage {i + 2}")

    def branch(self, keyword: str) -> BranchNode:
        saved_vars = len(self.vars)
        try:
            pipe = self.pipeline(keyword, T.RIGHT_DELIM)
            if keyword == "range":
                self.range_depth += 1
            body, nxt = self.item_list()
            if keyword == "range":
                self.range_depth -= 1
            else_list: ListNode | None = None
            if isinstance(nxt, ElseNode):
                follow = self.s.peek()
                if keyword in ("if", "with") and follow.typ is (T.IF if keyword == "if" else T.WITH):
                    self.s.next()
                    else_list = ListNode(nxt.pos, [self.branch(keyword)])
                else:
                    else_list, nxt = self.item_list()
                    if not isinstance(nxt, EndNode):
                        raise self.errorf(f"expected end; found {nxt}")
            return BranchNode(keyword, pipe.pos, pipe.line, pipe, body, else_list)
        finally:
            del self.vars[saved_vars:]

    def else_control(self) -> ElseNode:
        peek = self.s.peek_non_space()
        if peek.typ in (T.IF, T.WITH):
            return ElseNode(peek.pos, peek.line)
        item = self.expect(T.RIGHT_DELIM, "else")
        return ElseNode(item.pos, item.line)

    def template_name(self, item: Item, context: str) -> str:
        if item.typ in (T.STRING, T.RAW_STRING):
            return self.unquote(item.val)
        raise self.unexpected(item, context)

    def block_control(self) -> TemplateNode:
        context = "block clause"
        item = self.s.next_non_space()
        name = self.template_name(item, context)
        pipe = self.pipeline(context, T.RIGHT_DELIM)
        sub = self.sub_parser(name)
        root, end = sub.item_list()
        if not isinstance(end, EndNode):
            raise self.errorf(f"unexpected {end} in {context}")
        sub.add(root)
        return TemplateNode(item.pos, item.line, name, pipe)

    def template_control(self) -> TemplateNode:
        context = "template clause"
        item = self.s.next_non_space()
        name = self.template_name(item, context)
        pipe: PipeNode | None = None
        if self.s.next_non_space().typ is not T.RIGHT_DELIM:
            self.s.backup()
            pipe = self.pipeline(context, T.RIGHT_DELIM)
        return TemplateNode(item.pos, item.line, name, pipe)

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


def parse(name: str, text: str, funcs: Collection[str]) -> dict[str, Tree]:
    """Every template ``text`` defines, the main one under ``name``; raises TemplateError as Go does."""
    trees: dict[str, Tree] = {}
    parser = _TreeParser(name, name, text, _Stream(lex(text)), funcs, trees)
    parser.parse_top()
    return trees
