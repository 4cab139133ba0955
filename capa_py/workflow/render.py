"""Drawing a workflow: as a list (``capa cluster create --plan``) or as a Mermaid / Graphviz graph.

The graph formats are the ones ``capa ctrlkit graph`` prints: tasks are boxes chained in order, hooks
are rounded nodes beside the task they run before or after, and the error handling step hangs off the
chain with a dashed edge.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from capa_py.workflow.hook import handler_name
from capa_py.workflow.task import HANDLE_ERROR, Task
from capa_py.workflow.workflow import Workflow

LIST_WIDTH = 110


@dataclass(frozen=True)
class PlanStep:
    name: str
    summary: str
    description: str
    before: tuple[str, ...]
    after: tuple[str, ...]


def _step(workflow: Workflow[Any], task: Task[Any]) -> PlanStep:
    return PlanStep(
        name=task.name,
        summary=task.summary,
        description=task.description,
        before=tuple(handler_name(h) for h in workflow.binder.handlers_before(task)),
        after=tuple(handler_name(h) for h in workflow.binder.handlers_after(task)),
    )


def plan(workflow: Workflow[Any]) -> list[PlanStep]:
    """Every task in order, then the error handling step."""
    return [_step(workflow, task) for task in (*workflow.tasks, HANDLE_ERROR)]


def to_list(workflow: Workflow[Any]) -> str:
    """A numbered list: each task with its docstring's first paragraph (wrapped) and the hooks bound around
    it, then the error handling step."""
    steps = plan(workflow)
    labelled = [(f"{number:>3}.", step) for number, step in enumerate(steps[:-1], start=1)]
    lines = [f"{workflow.name}:"]
    for label, step in [*labelled, ("  on error:", steps[-1])]:
        lines += textwrap.wrap(
            f"{label} {step.name} — {step.description}",
            width=LIST_WIDTH,
            subsequent_indent=" " * 7,
            break_on_hyphens=False,
        )
        lines += [f"       before: {name}" for name in step.before]
        lines += [f"       after:  {name}" for name in step.after]
    return "\n".join(lines) + "\n"


def _mermaid(text: str) -> str:
    return text.replace('"', "#quot;")


def _dot(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _nodes(workflow: Workflow[Any]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """(id, label, shape) nodes and (source, target, style) edges; shape is task, hook or error; style
    is solid (the chain), hook, or error (from the first task, standing for every task)."""
    nodes: list[tuple[str, str, str]] = []
    edges: list[tuple[str, str, str]] = []
    previous: str | None = None
    for index, step in enumerate(plan(workflow)):
        is_error = index == len(workflow.tasks)
        tid = f"t{index}"
        nodes.append((tid, step.name, "error" if is_error else "task"))
        if is_error:
            edges.append(("t0", tid, "error"))
        elif previous is not None:
            edges.append((previous, tid, "solid"))
        for side, names in (("before", step.before), ("after", step.after)):
            for number, name in enumerate(names):
                hid = f"{tid}_{side}{number}"
                nodes.append((hid, f"{side}: {name}", "hook"))
                edges.append((hid, tid, "hook") if side == "before" else (tid, hid, "hook"))
        if not is_error:
            previous = tid
    return nodes, edges


def to_mermaid(workflow: Workflow[Any]) -> str:
    nodes, edges = _nodes(workflow)
    lines = ["flowchart TD"]
    shapes = {"task": ("[", "]"), "hook": ("([", "])"), "error": ("{{", "}}")}
    for nid, label, shape in nodes:
        opening, closing = shapes[shape]
        lines.append(f'    {nid}{opening}"{_mermaid(label)}"{closing}')
    for source, target, style in edges:
        if style == "error":
            lines.append(f"    {source} -. any task or hook raises .-> {target}")
        elif style == "hook":
            lines.append(f"    {source} -.- {target}")
        else:
            lines.append(f"    {source} --> {target}")
    return "\n".join(lines) + "\n"


def to_dot(workflow: Workflow[Any]) -> str:
    nodes, edges = _nodes(workflow)
    lines = [f'digraph "{_dot(workflow.name)}" {{', "    rankdir=TB;"]
    shapes = {"task": "box", "hook": "box, style=rounded", "error": "hexagon"}
    for nid, label, shape in nodes:
        lines.append(f'    {nid} [label="{_dot(label)}", shape={shapes[shape]}];')
    for source, target, style in edges:
        if style == "error":
            lines.append(f'    {source} -> {target} [style=dashed, label="any task or hook raises"];')
        elif style == "hook":
            lines.append(f"    {source} -> {target} [style=dotted, arrowhead=none];")
        else:
            lines.append(f"    {source} -> {target};")
    lines.append("}")
    return "\n".join(lines) + "\n"
