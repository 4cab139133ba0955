"""Executing parsed templates with Go's ``text/template`` semantics and ``missingkey=error``.

The executor follows Go's evaluation order step by step, because the order decides which error a template
reports and at which node: Go reports the node it was evaluating (``at <index .l 5>``), and a pipeline's
value is unwrapped from its interface after every command.

Walking a template's actions, branches, loops and nested templates is here; evaluating pipelines is
:mod:`~capa_py.tinkerbell.gotemplate.evaluate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from capa_py.tinkerbell.gotemplate.evaluate import FUNCS, Evaluator
from capa_py.tinkerbell.gotemplate.funcs import is_true
from capa_py.tinkerbell.gotemplate.lex import go_quote
from capa_py.tinkerbell.gotemplate.literals import INT64_MAX, INT64_MIN
from capa_py.tinkerbell.gotemplate.nodes import (
    ActionNode,
    BranchNode,
    BreakNode,
    CommentNode,
    ContinueNode,
    ListNode,
    Node,
    TemplateNode,
    TextNode,
    Tree,
)
from capa_py.tinkerbell.gotemplate.printing import sprint
from capa_py.tinkerbell.gotemplate.values import (
    NO_VALUE,
    Boxed,
    GoInt,
    GoSlice,
    as_interface,
    is_int,
    unbox,
)

__all__ = ["FUNCS", "MAX_EXEC_DEPTH", "execute", "template_data"]

MAX_EXEC_DEPTH = 100000


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _State(Evaluator):
    """One template's execution: walking its nodes and writing its output."""

    # -- walking ----------------------------------------------------------------------------------
    def walk(self, dot: Any, node: Node) -> None:
        self.at(node)
        if isinstance(node, ActionNode):
            value = self.eval_pipeline(dot, node.pipe)
            if not node.pipe.decl:
                self.print_value(node, value)
        elif isinstance(node, BreakNode):
            raise _Break
        elif isinstance(node, ContinueNode):
            raise _Continue
        elif isinstance(node, CommentNode):
            pass
        elif isinstance(node, BranchNode):
            if node.keyword == "range":
                self.walk_range(dot, node)
            else:
                self.walk_if_or_with(dot, node)
        elif isinstance(node, ListNode):
            for child in node.nodes:
                self.walk(dot, child)
        elif isinstance(node, TemplateNode):
            self.walk_template(dot, node)
        elif isinstance(node, TextNode):
            self.out.append(node.text)

    def print_value(self, node: ActionNode, value: Any) -> None:
        self.at(node)
        self.out.append("<no value>" if value is NO_VALUE else sprint([as_interface(value)]))

    def walk_if_or_with(self, dot: Any, node: BranchNode) -> None:
        mark = self.mark()
        try:
            value = self.eval_pipeline(dot, node.pipe)
            if is_true(unbox(value)):
                self.walk(value if node.keyword == "with" else dot, node.list)
            elif node.else_list is not None:
                self.walk(dot, node.else_list)
        finally:
            self.pop(mark)

    def walk_range(self, dot: Any, node: BranchNode) -> None:
        self.at(node)
        pipe = node.pipe
        try:
            value = unbox(self.eval_pipeline(dot, pipe))
            mark = self.mark()

            def one_iteration(index: Any, elem: Any) -> None:
                if pipe.decl:
                    if pipe.is_assign:
                        self.set_var(pipe.decl[0].ident[0], index if len(pipe.decl) > 1 else elem)
                    else:
                        self.set_top_var(1, elem)
                if len(pipe.decl) > 1:
                    if pipe.is_assign:
                        self.set_var(pipe.decl[1].ident[0], elem)
                    else:
                        self.set_top_var(2, index)
                try:
                    self.walk(elem, node.list)
                except _Continue:
                    pass
                finally:
                    self.pop(mark)

            ran = False
            if is_int(value):
                if len(pipe.decl) > 1:
                    self.errorf(f"can't use {sprint([value])} to iterate over more than one variable")
                kind = type(value)
                for i in range(max(int(value), 0)):
                    ran = True
                    one_iteration(NO_VALUE, kind(i))
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    ran = True
                    one_iteration(GoInt(i), Boxed(item))
            elif isinstance(value, dict):
                for key in sorted(value, key=lambda k: k.encode("utf-8", "surrogateescape")):
                    ran = True
                    one_iteration(key, Boxed(value[key]))
            elif value is not NO_VALUE:
                self.errorf(f"range can't iterate over {sprint([value])}")
            if not ran and node.else_list is not None:
                self.walk(dot, node.else_list)
        except _Break:
            pass

    def walk_template(self, dot: Any, node: TemplateNode) -> None:
        self.at(node)
        tree = self.trees.get(node.name)
        if tree is None:
            self.errorf(f"template {go_quote(node.name)} not defined")
        if self.depth == MAX_EXEC_DEPTH:
            self.errorf(f"exceeded maximum template depth ({MAX_EXEC_DEPTH})")
        dot = self.eval_pipeline(dot, node.pipe)
        state = _State(self.trees, tree, self.out, dot, self.depth + 1)
        try:
            state.walk(dot, tree.root)
        except RecursionError:
            # Go allows 100000 nested templates; Python's stack ends sooner, so report Go's error early
            self.errorf(f"exceeded maximum template depth ({MAX_EXEC_DEPTH})")


def template_data(value: Any, path: str = "data") -> Any:
    """JSON-like data as Go sees it after Kubernetes decodes it: whole numbers outside int64 become
    float64; anything JSON cannot hold is refused (TypeError naming where it is)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if INT64_MIN <= value <= INT64_MAX else float(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise TypeError(f"{path}: {value} cannot be represented in JSON")
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: map keys must be strings, not {type(key).__name__}")
            out[key] = template_data(item, f"{path}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return GoSlice.decoded([template_data(item, f"{path}[{i}]") for i, item in enumerate(value)])
    raise TypeError(f"{path}: {type(value).__name__} is not JSON data")


def execute(trees: Mapping[str, Tree], name: str, data: Mapping[str, Any]) -> str:
    """Run template ``name`` over ``data`` and return its output."""
    tree = trees[name]
    root = template_data(data)
    out: list[str] = []
    state = _State(trees, tree, out, root, 0)
    try:
        state.walk(root, tree.root)
    except RecursionError:
        state.errorf(f"exceeded maximum template depth ({MAX_EXEC_DEPTH})")
    return "".join(out)
