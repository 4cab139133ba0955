"""Executing parsed templates with Go's ``text/template`` semantics and ``missingkey=error``.

The executor follows Go's evaluation order step by step, because the order decides which error a template
reports and at which node: Go reports the node it was evaluating (``at <index .l 5>``), and a pipeline's
value is unwrapped from its interface after every command.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

from capa_py.tinkerbell.gotemplate.errors import TemplateError
from capa_py.tinkerbell.gotemplate.funcs import (
    BUILTINS,
    TINKERBELL_FUNCS,
    Func,
    FuncError,
    ParamType,
    is_true,
)
from capa_py.tinkerbell.gotemplate.lex import go_quote
from capa_py.tinkerbell.gotemplate.literals import INT64_MAX, INT64_MIN
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
)
from capa_py.tinkerbell.gotemplate.printing import sprint
from capa_py.tinkerbell.gotemplate.values import (
    MISSING,
    NO_VALUE,
    Boxed,
    GoInt,
    GoSlice,
    as_interface,
    concrete_type_name,
    is_int,
    type_name,
    unbox,
)

MAX_EXEC_DEPTH = 100000
FUNCS: dict[str, Func] = {**BUILTINS, **TINKERBELL_FUNCS}

AnyNode = Node | Operand | CommandNode


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _State:
    def __init__(self, trees: Mapping[str, Tree], tree: Tree, out: list[str], dot: Any, depth: int) -> None:
        self.trees = trees
        self.tree = tree
        self.out = out
        self.vars: list[list[Any]] = [["$", dot]]
        self.depth = depth
        self.node: AnyNode | None = None

    # -- errors -----------------------------------------------------------------------------------
    def at(self, node: AnyNode) -> None:
        self.node = node

    def errorf(self, message: str) -> NoReturn:
        raise self.error(message)

    def error(self, message: str) -> TemplateError:
        """Go's execution error: the template, the node being evaluated and where it is."""
        name = go_quote(self.tree.name)
        if self.node is None:
            return TemplateError(f"template: {self.tree.name}: {message}", name=self.tree.name)
        location = self.tree.location(self.node.pos)
        _, line, column = location.rsplit(":", 2)
        return TemplateError(
            f"template: {location}: executing {name} at <{self.node}>: {message}",
            name=self.tree.name,
            line=int(line),
            column=int(column),
        )

    # -- variables --------------------------------------------------------------------------------
    def push(self, name: str, value: Any) -> None:
        self.vars.append([name, value])

    def mark(self) -> int:
        return len(self.vars)

    def pop(self, mark: int) -> None:
        del self.vars[mark:]

    def set_var(self, name: str, value: Any) -> None:
        for entry in reversed(self.vars):
            if entry[0] == name:
                entry[1] = value
                return
        self.errorf(f"undefined variable: {name}")

    def set_top_var(self, n: int, value: Any) -> None:
        self.vars[len(self.vars) - n][1] = value

    def var_value(self, name: str) -> Any:
        for entry in reversed(self.vars):
            if entry[0] == name:
                return entry[1]
        raise self.error(f"undefined variable: {name}")

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

    # -- pipelines and commands -------------------------------------------------------------------
    def eval_pipeline(self, dot: Any, pipe: PipeNode | None) -> Any:
        if pipe is None:
            return NO_VALUE
        self.at(pipe)
        value: Any = MISSING
        for cmd in pipe.cmds:
            value = self.eval_command(dot, cmd, value)
            if isinstance(value, Boxed):
                value = unbox(value)
        for var in pipe.decl:
            if pipe.is_assign:
                self.set_var(var.ident[0], value)
            else:
                self.push(var.ident[0], value)
        return value

    def not_a_function(self, args: list[Operand], final: Any) -> None:
        if len(args) > 1 or final is not MISSING:
            self.errorf(f"can't give argument to non-function {args[0]}")

    def eval_command(self, dot: Any, cmd: CommandNode, final: Any) -> Any:
        first = cmd.args[0]
        if isinstance(first, FieldNode):
            return self.eval_field_node(dot, first, cmd.args, final)
        if isinstance(first, ChainNode):
            return self.eval_chain_node(dot, first, cmd.args, final)
        if isinstance(first, IdentifierNode):
            return self.eval_function(dot, first, cmd, cmd.args, final)
        if isinstance(first, PipeNode):
            self.not_a_function(cmd.args, final)
            return self.eval_pipeline(dot, first)
        if isinstance(first, VariableNode):
            return self.eval_variable_node(dot, first, cmd.args, final)
        self.at(first)
        self.not_a_function(cmd.args, final)
        if isinstance(first, BoolNode):
            return first.value
        if isinstance(first, DotNode):
            return dot
        if isinstance(first, NilNode):
            self.errorf("nil is not a command")
        if isinstance(first, NumberNode):
            return self.ideal_constant(first)
        return first.text

    def ideal_constant(self, node: NumberNode) -> Any:
        self.at(node)
        text = node.text
        is_hex_int = len(text) > 2 and text[0] == "0" and text[1] in "xX" and not any(c in text for c in "pP")
        is_rune = text.startswith("'")
        if node.is_complex:
            return node.complex128
        if node.is_float and not is_hex_int and not is_rune and any(c in text for c in ".eEpP"):
            return node.float64
        if node.is_int:
            return GoInt(node.int64)
        if node.is_uint:
            self.errorf(f"{text} overflows int")
        return NO_VALUE

    def eval_field_node(self, dot: Any, field: FieldNode, args: list[Operand] | None, final: Any) -> Any:
        self.at(field)
        return self.eval_field_chain(dot, dot, field, field.ident, args, final)

    def eval_chain_node(self, dot: Any, chain: ChainNode, args: list[Operand] | None, final: Any) -> Any:
        self.at(chain)
        if isinstance(chain.node, NilNode):
            self.errorf(f"indirection through explicit nil in {chain}")
        receiver = self.eval_arg(dot, None, chain.node)
        return self.eval_field_chain(dot, receiver, chain, chain.field, args, final)

    def eval_variable_node(self, dot: Any, var: VariableNode, args: list[Operand] | None, final: Any) -> Any:
        self.at(var)
        value = self.var_value(var.ident[0])
        if len(var.ident) == 1:
            self.not_a_function(args or [var], final)
            return value
        return self.eval_field_chain(dot, value, var, var.ident[1:], args, final)

    def eval_field_chain(
        self, dot: Any, receiver: Any, node: Operand, ident: list[str], args: list[Operand] | None, final: Any
    ) -> Any:
        for name in ident[:-1]:
            receiver = self.eval_field(name, None, MISSING, receiver)
        return self.eval_field(ident[-1], args, final, receiver)

    def eval_field(self, name: str, args: list[Operand] | None, final: Any, receiver: Any) -> Any:
        if receiver is NO_VALUE:
            self.errorf(f"nil data; no entry for key {go_quote(name)}")
        typ = type_name(receiver)
        if isinstance(receiver, Boxed):
            if receiver.value is None:
                self.errorf(f"nil pointer evaluating {typ}.{name}")
            receiver = receiver.value
        has_args = (args is not None and len(args) > 1) or final is not MISSING
        if isinstance(receiver, dict):
            if has_args:
                self.errorf(f"{name} is not a method but has arguments")
            if name not in receiver:
                self.errorf(f"map has no entry for key {go_quote(name)}")
            return Boxed(receiver[name])
        raise self.error(f"can't evaluate field {name} in type {typ}")

    def eval_function(
        self, dot: Any, node: IdentifierNode, cmd: AnyNode, args: list[Operand] | None, final: Any
    ) -> Any:
        self.at(node)
        fn = FUNCS.get(node.ident)
        if fn is None:
            self.errorf(f"{go_quote(node.ident)} is not a defined function")
        return self.eval_call(dot, fn, cmd, node.ident, args, final)

    def eval_call(
        self, dot: Any, fn: Func, node: AnyNode, name: str, all_args: list[Operand] | None, final: Any
    ) -> Any:
        args = all_args[1:] if all_args is not None else []
        num_params = len(fn.params)
        num_in = len(args) + (final is not MISSING)
        num_fixed = len(args)
        if fn.variadic:
            num_fixed = num_params - 1
            if num_in < num_fixed:
                self.errorf(
                    f"wrong number of args for {name}: want at least {num_params - 1} got {len(args)}"
                )
        elif num_in != num_params:
            self.errorf(f"wrong number of args for {name}: want {num_params} got {num_in}")

        if fn.builtin and name in ("and", "or"):
            value: Any = NO_VALUE
            for arg in args:
                value = self.eval_arg(dot, ParamType.VALUE, arg)
                if is_true(unbox(value)) == (name == "or"):
                    return value
            if final is not MISSING:
                value = self.validate_type(final, ParamType.VALUE)
            return value

        argv: list[Any] = []
        i = 0
        while i < num_fixed and i < len(args):
            argv.append(self.eval_arg(dot, fn.params[i], args[i]))
            i += 1
        if fn.variadic:
            while i < len(args):
                argv.append(self.eval_arg(dot, fn.params[-1], args[i]))
                i += 1
        if final is not MISSING:
            typ = fn.params[-1]
            if fn.variadic and num_in - 1 < num_fixed:
                typ = fn.params[num_in - 1]
            argv.append(self.validate_type(final, typ))
        if fn.variadic:
            types = list(fn.params[:-1]) + [fn.params[-1]] * (len(argv) - num_params + 1)
        else:
            types = list(fn.params)
        call_args = [as_interface(v) if t is ParamType.ANY else v for v, t in zip(argv, types, strict=False)]
        if fn.builtin and name == "call":
            callee = str(args[0]) if args else _value_string(final)
            call_args = [callee, *call_args]
        try:
            return fn.impl(*call_args)
        except FuncError as exc:
            self.at(node)
            self.errorf(f"error calling {name}: {exc}")

    # -- arguments --------------------------------------------------------------------------------
    def eval_arg(self, dot: Any, typ: ParamType | None, node: Operand) -> Any:
        self.at(node)
        if isinstance(node, DotNode):
            return self.validate_type(dot, typ)
        if isinstance(node, NilNode):
            if typ is ParamType.ANY:
                return None
            if typ is ParamType.VALUE:
                return NO_VALUE
            self.errorf(f"cannot assign nil to {typ.value if typ else '<nil>'}")
        if isinstance(node, FieldNode):
            return self.validate_type(self.eval_field_node(dot, node, [node], MISSING), typ)
        if isinstance(node, VariableNode):
            return self.validate_type(self.eval_variable_node(dot, node, None, MISSING), typ)
        if isinstance(node, PipeNode):
            return self.validate_type(self.eval_pipeline(dot, node), typ)
        if isinstance(node, IdentifierNode):
            return self.validate_type(self.eval_function(dot, node, node, None, MISSING), typ)
        if isinstance(node, ChainNode):
            return self.validate_type(self.eval_chain_node(dot, node, None, MISSING), typ)
        if typ is ParamType.INT:
            if isinstance(node, NumberNode) and node.is_int:
                return GoInt(node.int64)
            self.errorf(f"expected integer; found {node}")
        if typ is ParamType.STRING:
            if isinstance(node, StringNode):
                return node.text
            self.errorf(f"expected string; found {node}")
        return self.eval_empty_interface(dot, node)

    def eval_empty_interface(self, dot: Any, node: Operand) -> Any:
        self.at(node)
        if isinstance(node, BoolNode):
            return node.value
        if isinstance(node, NumberNode):
            return self.ideal_constant(node)
        if isinstance(node, StringNode):
            return node.text
        raise self.error(f"can't handle assignment of {node} to empty interface argument")

    def validate_type(self, value: Any, typ: ParamType | None) -> Any:
        if value is NO_VALUE:
            if typ is None or typ is ParamType.VALUE:
                return NO_VALUE
            if typ is ParamType.ANY:
                return None
            self.errorf(f"invalid value; expected {typ.value}")
        if typ is None or typ is ParamType.VALUE or typ is ParamType.ANY:
            return value
        inner = value
        if isinstance(value, Boxed):
            if value.value is None:
                self.errorf(f"wrong type for value; expected {typ.value}; got interface {{}}")
            inner = value.value
        if typ is ParamType.STRING and isinstance(inner, str):
            return inner
        if typ is ParamType.INT and isinstance(inner, GoInt):
            return inner
        raise self.error(f"wrong type for value; expected {typ.value}; got {concrete_type_name(inner)}")


def _value_string(value: Any) -> str:
    """``reflect.Value.String()``: a string's text, else ``<T Value>``."""
    if value is NO_VALUE:
        return "<invalid Value>"
    if isinstance(value, str):
        return value
    return f"<{type_name(value)} Value>"


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
