"""The parse tree of a Go template. Each node prints itself as Go's ``parse`` package does (error messages
quote nodes: ``executing "action" at <index .l 5>``), and carries its position for error locations."""

from __future__ import annotations

from dataclasses import dataclass, field

from capa_py.tinkerbell.gotemplate.lex import go_quote


@dataclass(eq=False)
class Tree:
    """One named template; ``text`` is the whole source it was parsed from, for error locations."""

    name: str
    parse_name: str
    text: str
    root: ListNode

    def location(self, pos: int) -> str:
        """``name:line:col`` with Go's byte-based column (0-based on every line, as Go prints it)."""
        before = self.text[:pos]
        line = 1 + before.count("\n")
        last_newline = before.rfind("\n")
        col_text = before if last_newline < 0 else before[last_newline + 1 :]
        return f"{self.parse_name}:{line}:{len(col_text.encode('utf-8', 'surrogateescape'))}"


@dataclass(eq=False)
class ListNode:
    pos: int
    nodes: list[Node] = field(default_factory=list)

    def __str__(self) -> str:
        return "".join(str(n) for n in self.nodes)


@dataclass(eq=False)
class TextNode:
    pos: int
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(eq=False)
class CommentNode:
    pos: int
    text: str

    def __str__(self) -> str:
        return "{{" + self.text + "}}"


@dataclass(eq=False)
class VariableNode:
    pos: int
    ident: list[str]

    def __str__(self) -> str:
        return ".".join(self.ident)


@dataclass(eq=False)
class DotNode:
    pos: int

    def __str__(self) -> str:
        return "."


@dataclass(eq=False)
class NilNode:
    pos: int

    def __str__(self) -> str:
        return "nil"


@dataclass(eq=False)
class FieldNode:
    pos: int
    ident: list[str]

    def __str__(self) -> str:
        return "".join("." + i for i in self.ident)


@dataclass(eq=False)
class IdentifierNode:
    pos: int
    ident: str

    def __str__(self) -> str:
        return self.ident


@dataclass(eq=False)
class BoolNode:
    pos: int
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass(eq=False)
class NumberNode:
    """A numeric constant with every reading Go's parser finds valid (``1.0`` is also an integer)."""

    pos: int
    text: str
    is_int: bool = False
    is_uint: bool = False
    is_float: bool = False
    is_complex: bool = False
    int64: int = 0
    uint64: int = 0
    float64: float = 0.0
    complex128: complex = 0j

    def __str__(self) -> str:
        return self.text

    def simplify_complex(self) -> None:
        """A complex constant with no imaginary part is also a float (and maybe an integer)."""
        self.is_float = self.complex128.imag == 0
        if self.is_float:
            self.float64 = self.complex128.real
            self.is_int = self.float64.is_integer() and -(2**63) <= self.float64 < 2**63
            if self.is_int:
                self.int64 = int(self.float64)
            self.is_uint = self.float64.is_integer() and 0 <= self.float64 < 2**64
            if self.is_uint:
                self.uint64 = int(self.float64)


@dataclass(eq=False)
class StringNode:
    pos: int
    quoted: str
    text: str

    def __str__(self) -> str:
        return self.quoted


@dataclass(eq=False)
class ChainNode:
    pos: int
    node: Operand
    field: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = f"({self.node})" if isinstance(self.node, PipeNode) else str(self.node)
        return head + "".join("." + f for f in self.field)


@dataclass(eq=False)
class CommandNode:
    pos: int
    args: list[Operand] = field(default_factory=list)

    def __str__(self) -> str:
        return " ".join(f"({a})" if isinstance(a, PipeNode) else str(a) for a in self.args)


@dataclass(eq=False)
class PipeNode:
    pos: int
    line: int
    decl: list[VariableNode] = field(default_factory=list)
    is_assign: bool = False
    cmds: list[CommandNode] = field(default_factory=list)

    def __str__(self) -> str:
        head = ""
        if self.decl:
            head = ", ".join(str(v) for v in self.decl) + (" = " if self.is_assign else " := ")
        return head + " | ".join(str(c) for c in self.cmds)


@dataclass(eq=False)
class ActionNode:
    pos: int
    line: int
    pipe: PipeNode

    def __str__(self) -> str:
        return "{{" + str(self.pipe) + "}}"


@dataclass(eq=False)
class BranchNode:
    """``if``, ``range`` and ``with``."""

    keyword: str
    pos: int
    line: int
    pipe: PipeNode
    list: ListNode
    else_list: ListNode | None

    def __str__(self) -> str:
        text = "{{" + self.keyword + " " + str(self.pipe) + "}}" + str(self.list)
        if self.else_list is not None:
            text += "{{else}}" + str(self.else_list)
        return text + "{{end}}"


@dataclass(eq=False)
class TemplateNode:
    pos: int
    line: int
    name: str
    pipe: PipeNode | None

    def __str__(self) -> str:
        pipe = "" if self.pipe is None else " " + str(self.pipe)
        return "{{template " + go_quote(self.name) + pipe + "}}"


@dataclass(eq=False)
class BreakNode:
    pos: int
    line: int

    def __str__(self) -> str:
        return "{{break}}"


@dataclass(eq=False)
class ContinueNode:
    pos: int
    line: int

    def __str__(self) -> str:
        return "{{continue}}"


@dataclass(eq=False)
class EndNode:
    pos: int

    def __str__(self) -> str:
        return "{{end}}"


@dataclass(eq=False)
class ElseNode:
    pos: int
    line: int

    def __str__(self) -> str:
        return "{{else}}"


Operand = (
    BoolNode
    | ChainNode
    | DotNode
    | FieldNode
    | IdentifierNode
    | NilNode
    | NumberNode
    | PipeNode
    | StringNode
    | VariableNode
)
Node = ActionNode | BranchNode | BreakNode | CommentNode | ContinueNode | ListNode | TemplateNode | TextNode


def is_empty_tree(node: Node | ElseNode | EndNode | None) -> bool:
    """Go's ``parse.IsEmptyTree``: only whitespace text and comments."""
    if node is None or isinstance(node, CommentNode):
        return True
    if isinstance(node, ListNode):
        return all(is_empty_tree(n) for n in node.nodes)
    if isinstance(node, TextNode):
        return not node.text.strip(" \t\n\r\v\f\x85\xa0")
    return False
