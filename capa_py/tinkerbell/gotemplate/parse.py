"""Parsing a Go template into trees, with Go's ``text/template/parse`` grammar and error messages.

``parse`` returns every tree the text defines (the main one under its name, plus ``define``/``block``
templates). Functions are checked at parse time, as Go does: an unknown function is a parse error.

Operands (commands, terms, numbers) and the parser's errors are
:mod:`~capa_py.tinkerbell.gotemplate.operands`.
"""

from __future__ import annotations

from collections.abc import Collection

from capa_py.tinkerbell.gotemplate.lex import Item, T, go_quote, lex
from capa_py.tinkerbell.gotemplate.nodes import (
    ActionNode,
    BoolNode,
    BranchNode,
    BreakNode,
    CommentNode,
    ContinueNode,
    DotNode,
    ElseNode,
    EndNode,
    ListNode,
    NilNode,
    Node,
    NumberNode,
    PipeNode,
    StringNode,
    TemplateNode,
    TextNode,
    Tree,
    VariableNode,
    is_empty_tree,
)
from capa_py.tinkerbell.gotemplate.operands import MAX_STACK_DEPTH, ItemStream, OperandParser

__all__ = ["MAX_STACK_DEPTH", "parse"]

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


class _TreeParser(OperandParser):
    """Trees: text, actions, branches, ``define``, ``block`` and ``template``, and pipelines."""

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


def parse(name: str, text: str, funcs: Collection[str]) -> dict[str, Tree]:
    """Every template ``text`` defines, the main one under ``name``; raises TemplateError as Go does."""
    trees: dict[str, Tree] = {}
    parser = _TreeParser(name, name, text, ItemStream(lex(text)), funcs, trees)
    parser.parse_top()
    return trees
