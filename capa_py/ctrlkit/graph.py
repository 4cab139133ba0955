"""Render a composed workflow as a graph: Mermaid for docs and pull requests, DOT for Graphviz.

A workflow is a tree of actions built with the combinators, but what a reader wants to see is the flow
the RFC draws: which actions run one after another, which fork and join, where a condition decides, what
is bounded by a timeout or retried. :func:`to_mermaid` and :func:`to_dot` walk the tree (with
``children()`` and the combinator classes) into that flow graph:

* a leaf is a box labelled with its description;
* ``Sequential`` chains its actions;
* ``Join``, ``JoinOrdered`` and ``ParallelJoin`` fork into their actions and join again (the edges of
  ``JoinOrdered`` are numbered, as its order is guaranteed);
* ``If`` and ``IfElse`` are decision nodes with ``true``/``false`` edges that merge afterwards;
* ``Timeout``, ``Retry`` and ``Shared`` are labelled subgraphs (clusters) around their action;
* a ``Shared`` instance that appears twice is drawn once, with edges from both places, since it runs once
  (a Timeout or Retry around its second appearance adds no cluster: a node sits in one cluster only);
* any other action with children forks into them under a node labelled with its type.

The graph starts at a ``start`` node and ends at an ``end`` node; node ids are ``n0``, ``n1``, ... in
the order the tree is walked, so the output is stable for a given workflow.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from capa_py.ctrlkit.action import Action
from capa_py.ctrlkit.combinators import (
    Condition,
    If,
    IfElse,
    Join,
    JoinOrdered,
    ParallelJoin,
    Retry,
    Sequential,
    Shared,
    Timeout,
)

__all__ = ["to_dot", "to_mermaid"]

Shape = Literal["action", "decision", "fork", "join", "start", "end"]


@dataclass
class _Node:
    id: str
    label: str
    shape: Shape


@dataclass
class _Cluster:
    id: str
    label: str
    members: list[_Node | _Cluster] = field(default_factory=list)


@dataclass(frozen=True)
class _Edge:
    source: str
    target: str
    label: str = ""


def _condition_label(condition: Condition) -> str:
    if callable(condition):
        return str(getattr(condition, "__name__", "condition"))
    return str(bool(condition))


class _Graph:
    """The flow graph of a workflow: nodes nested in clusters, and edges."""

    def __init__(self, workflow: Action) -> None:
        self.members: list[_Node | _Cluster] = []
        self.edges: list[_Edge] = []
        self._scopes = [self.members]
        self._nodes = 0
        self._clusters = 0
        self._shared: dict[int, tuple[str, str]] = {}
        self._path: set[int] = set()
        start = self.node("start", "start")
        entry, exit_ = self.flow(workflow)
        end = self.node("end", "end")
        self.edge(start, entry)
        self.edge(exit_, end)
        # Listed by source node (then as added), the edges read top-down like the flow.
        self.edges.sort(key=lambda edge: int(edge.source[1:]))

    def node(self, label: str, shape: Shape) -> str:
        node = _Node(f"n{self._nodes}", label, shape)
        self._nodes += 1
        self._scopes[-1].append(node)
        return node.id

    def edge(self, source: str, target: str, label: str = "") -> None:
        edge = _Edge(source, target, label)
        if edge not in self.edges:  # a Shared action reached twice from the same node is one arrow
            self.edges.append(edge)

    @contextmanager
    def cluster(self, label: str) -> Iterator[None]:
        cluster = _Cluster(f"c{self._clusters}", label)
        self._clusters += 1
        self._scopes[-1].append(cluster)
        self._scopes.append(cluster.members)
        try:
            yield
        finally:
            self._scopes.pop()

    def flow(self, action: Action) -> tuple[str, str]:
        """Add ``action``'s flow; return the ids of its entry and exit nodes."""
        if isinstance(action, Shared) and id(action) in self._shared:
            return self._shared[id(action)]
        if id(action) in self._path:
            raise ValueError(f"the workflow contains a cycle through {action!r}")
        self._path.add(id(action))
        try:
            ends = self._flow(action)
        finally:
            self._path.discard(id(action))
        if isinstance(action, Shared):
            self._shared[id(action)] = ends
        return ends

    def _flow(self, action: Action) -> tuple[str, str]:
        children = list(action.children())
        if not children:
            leaf = self.node(action.description or type(action).__name__, "action")
            return leaf, leaf
        if isinstance(action, Sequential):
            return self._chain(children)
        if isinstance(action, Join | JoinOrdered | ParallelJoin):
            return self._fork(type(action).__name__, children, numbered=isinstance(action, JoinOrdered))
        if isinstance(action, If):
            return self._decide(action.condition, action.action, None)
        if isinstance(action, IfElse):
            return self._decide(action.condition, action.then, action.otherwise)
        if isinstance(action, Timeout):
            return self._wrap(f"Timeout: {action.seconds:g}s", action.action)
        if isinstance(action, Retry):
            return self._wrap(f"Retry: {action.attempts} attempts, {action.interval:g}s apart", action.action)
        if isinstance(action, Shared):
            return self._wrap("Shared: runs once", action.action)
        return self._fork(type(action).__name__, children, numbered=False)

    def _chain(self, actions: Sequence[Action]) -> tuple[str, str]:
        entry, exit_ = self.flow(actions[0])
        for action in actions[1:]:
            next_entry, next_exit = self.flow(action)
            self.edge(exit_, next_entry)
            exit_ = next_exit
        return entry, exit_

    def _fork(self, name: str, actions: Sequence[Action], numbered: bool) -> tuple[str, str]:
        fork = self.node(name, "fork")
        ends = [self.flow(action) for action in actions]
        join = self.node("join", "join")
        for position, (entry, exit_) in enumerate(ends, start=1):
            self.edge(fork, entry, str(position) if numbered else "")
            self.edge(exit_, join)
        return fork, join

    def _decide(self, condition: Condition, then: Action, otherwise: Action | None) -> tuple[str, str]:
        decision = self.node(f"{_condition_label(condition)}?", "decision")
        then_entry, then_exit = self.flow(then)
        other = self.flow(otherwise) if otherwise is not None else None
        merge = self.node("end if", "join")
        self.edge(decision, then_entry, "true")
        self.edge(then_exit, merge)
        if other is None:
            self.edge(decision, merge, "false")
        else:
            self.edge(decision, other[0], "false")
            self.edge(other[1], merge)
        return decision, merge

    def _wrap(self, label: str, action: Action) -> tuple[str, str]:
        with self.cluster(label):
            return self.flow(action)


# -- Mermaid ---------------------------------------------------------------------------------------------

_MERMAID_SHAPES: dict[Shape, tuple[str, str]] = {
    "action": ("[", "]"),
    "decision": ("{", "}"),
    "fork": ("[[", "]]"),
    "join": ("((", "))"),
    "start": ("((", "))"),
    "end": ("(((", ")))"),
}


def _mermaid_text(text: str) -> str:
    """Text safe inside a quoted Mermaid label: entity codes for the characters Mermaid interprets."""
    text = " ".join(text.split()).replace("#", "#35;")  # first: the other codes start with '#'
    for char, code in (('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("`", "#96;"), ("|", "#124;")):
        text = text.replace(char, code)
    return text


def _mermaid_members(members: Sequence[_Node | _Cluster], indent: str) -> list[str]:
    lines: list[str] = []
    for member in members:
        if isinstance(member, _Node):
            opening, closing = _MERMAID_SHAPES[member.shape]
            lines.append(f'{indent}{member.id}{opening}"{_mermaid_text(member.label)}"{closing}')
        elif member.members:
            lines.append(f'{indent}subgraph {member.id}["{_mermaid_text(member.label)}"]')
            lines.extend(_mermaid_members(member.members, indent + "    "))
            lines.append(f"{indent}end")
    return lines


def to_mermaid(action: Action, direction: Literal["TD", "LR"] = "TD") -> str:
    """A Mermaid flowchart of the workflow (see the module docstring for how it is drawn)."""
    graph = _Graph(action)
    lines = [f"flowchart {direction}", *_mermaid_members(graph.members, "    ")]
    for edge in graph.edges:
        arrow = f"-->|{_mermaid_text(edge.label)}|" if edge.label else "-->"
        lines.append(f"    {edge.source} {arrow} {edge.target}")
    return "\n".join(lines) + "\n"


# -- DOT -------------------------------------------------------------------------------------------------

_DOT_SHAPES: dict[Shape, str] = {
    "action": "box",
    "decision": "diamond",
    "fork": "invtrapezium",
    "join": "circle",
    "start": "circle",
    "end": "doublecircle",
}


def _dot_text(text: str) -> str:
    """A double-quoted DOT string."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "").replace("\n", "\\n")
    return f'"{escaped}"'


def _dot_members(members: Sequence[_Node | _Cluster], indent: str) -> list[str]:
    lines: list[str] = []
    for member in members:
        if isinstance(member, _Node):
            lines.append(
                f"{indent}{member.id} [label={_dot_text(member.label)}, shape={_DOT_SHAPES[member.shape]}];"
            )
        elif member.members:
            lines.append(f"{indent}subgraph cluster_{member.id} {{")
            lines.append(f"{indent}    label={_dot_text(member.label)};")
            lines.append(f"{indent}    style=dashed;")
            lines.extend(_dot_members(member.members, indent + "    "))
            lines.append(f"{indent}}}")
    return lines


def to_dot(action: Action, name: str = "workflow") -> str:
    """A Graphviz digraph of the workflow (see the module docstring for how it is drawn)."""
    graph = _Graph(action)
    lines = [f"digraph {_dot_text(name)} {{", "    rankdir=TB;", *_dot_members(graph.members, "    ")]
    for edge in graph.edges:
        attributes = f" [label={_dot_text(edge.label)}]" if edge.label else ""
        lines.append(f"    {edge.source} -> {edge.target}{attributes};")
    lines.append("}")
    return "\n".join(lines) + "\n"
