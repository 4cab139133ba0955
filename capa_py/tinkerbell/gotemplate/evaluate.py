"""Evaluating a template's pipelines with Go's ``text/template`` semantics: commands, fields, variables,
function calls (``and`` and ``or`` short-circuit) and the conversion of each argument to its parameter's
type, in Go's order, and the execution errors naming the node being evaluated.
"""

from __future__ import annotations

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
from capa_py.tinkerbell.gotemplate.nodes import (
    BoolNode,
    ChainNode,
    CommandNode,
    DotNode,
    FieldNode,
    IdentifierNode,
    NilNode,
    Node,
    NumberNode,
    Operand,
    PipeNode,
    StringNode,
    Tree,
    VariableNode,
)
from capa_py.tinkerbell.gotemplate.values import (
    MISSING,
    NO_VALUE,
    Boxed,
    GoInt,
    as_interface,
    concrete_type_name,
    type_name,
    unbox,
)

FUNCS: dict[str, Func] = {**BUILTINS, **TINKERBELL_FUNCS}

AnyNode = Node | Operand | CommandNode


class Evaluator:
    """The state of one template's execution that evaluation reads and writes: its variables and the node
    being evaluated (which errors name)."""

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
