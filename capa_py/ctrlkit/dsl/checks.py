"""The meaning of a parsed CtrlKit DSL document: aliases use bound group/versions, decls and states use
aliases, actions take declared states, and no name is declared twice."""

from __future__ import annotations

from collections.abc import Iterable

from capa_py.ctrlkit.dsl.tree import Document, DSLError, Node


def _choices(names: Iterable[str]) -> str:
    listed = sorted(set(names))
    return ", ".join(listed) if listed else "none is declared"


def _problems(document: Document) -> list[DSLError]:
    problems: list[DSLError] = []

    def report(node: Node, message: str) -> None:
        problems.append(DSLError(document.filename, node.line, node.col, message))

    def once(seen: dict[str, Node], key: str, node: Node, what: str) -> bool:
        """Record ``node`` under ``key``; report it when ``key`` was declared before."""
        if key in seen:
            report(
                node,
                f"expected each {what} declared once, found '{key}' again (first at {seen[key].position})",
            )
            return False
        seen[key] = node
        return True

    binds: dict[str, Node] = {}
    for bind in document.binds:
        once(binds, bind.group_version, bind, "group/version")

    aliases: dict[str, Node] = {}
    for alias in document.aliases:
        if once(aliases, alias.name, alias, "alias") and alias.group_version not in binds:
            report(
                alias,
                f"expected alias '{alias.name}' to use a bound group/version ({_choices(binds)}), "
                f"found '{alias.group_version}'",
            )

    decls: dict[str, Node] = {}
    for decl in document.decls:
        once(decls, decl.name, decl, "decl")
        if decl.target.name not in aliases:
            report(
                decl.target,
                f"expected the kind of decl '{decl.name}' to be an alias ({_choices(aliases)}), "
                f"found '{decl.target.name}'",
            )
        states: dict[str, Node] = {}
        for state in decl.states:
            once(states, state.name, state, f"state of decl '{decl.name}'")
            if state.kind.name not in aliases:
                report(
                    state.kind,
                    f"expected the kind of state '{state.name}' to be an alias ({_choices(aliases)}), "
                    f"found '{state.kind.name}'",
                )
        actions: dict[str, Node] = {}
        for action in decl.actions:
            once(actions, action.name, action, f"action of decl '{decl.name}'")
            taken: dict[str, Node] = {}
            for ref in action.states:
                if ref.name not in states:
                    report(
                        ref,
                        f"expected action '{action.name}' to take states that decl '{decl.name}' declares "
                        f"({_choices(states)}), found '{ref.name}'",
                    )
                else:
                    once(taken, ref.name, ref, f"state argument of action '{action.name}'")
    return problems


def validate(document: Document) -> Document:
    """Check the meaning of a parsed document; raise the first :class:`DSLError` (the rest in ``others``)."""
    problems = sorted(_problems(document), key=lambda e: (e.line, e.col))
    if problems:
        first = problems[0]
        first.others = tuple(problems[1:])
        raise first
    return document
