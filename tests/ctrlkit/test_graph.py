"""Workflow graphs: the flow a composed Action draws in Mermaid and DOT, and the ``graph`` command."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from capa_app.cli.ctrlkit_cmd import app
from capa_py.ctrlkit import (
    Action,
    Context,
    If,
    IfElse,
    Join,
    JoinOrdered,
    ParallelJoin,
    Result,
    Retry,
    Sequential,
    Shared,
    Timeout,
    wrap_action,
)
from capa_py.ctrlkit.graph import to_dot, to_mermaid

_MERMAID_NODE = re.compile(r'^\s+(n\d+)\W+"(.*)"\W+$')
_MERMAID_EDGE = re.compile(r"^\s+(n\d+) -->(?:\|(.*)\|)? (n\d+)$")
_DOT_NODE = re.compile(r'^\s+(n\d+) \[label="(.*)", shape=(\w+)\];$')
_DOT_EDGE = re.compile(r'^\s+(n\d+) -> (n\d+)(?: \[label="(.*)"\])?;$')

Edge = tuple[str, str, str]  # (source label, target label, edge label)


def leaf(description: str) -> Action:
    return wrap_action(description, lambda ctx: None)


def not_suspended(ctx: Context) -> bool:
    return True


def mermaid_graph(text: str) -> tuple[dict[str, str], list[Edge]]:
    """Node labels by id, and the edges by label, of a Mermaid flowchart."""
    nodes = {m.group(1): m.group(2) for line in text.splitlines() if (m := _MERMAID_NODE.match(line))}
    edges = [
        (nodes[m.group(1)], nodes[m.group(3)], m.group(2) or "")
        for line in text.splitlines()
        if (m := _MERMAID_EDGE.match(line))
    ]
    return nodes, edges


def dot_graph(text: str) -> tuple[dict[str, str], list[Edge]]:
    """Node labels by id, and the edges by label, of a DOT digraph."""
    nodes = {m.group(1): m.group(2) for line in text.splitlines() if (m := _DOT_NODE.match(line))}
    edges = [
        (nodes[m.group(1)], nodes[m.group(2)], m.group(3) or "")
        for line in text.splitlines()
        if (m := _DOT_EDGE.match(line))
    ]
    return nodes, edges


def seed_workflow() -> Action:
    """The RFC's CronJob workflow, with leaves standing in for the generated actions."""
    return Join(
        leaf("ListActiveJobsAndUpdateStatus"),
        leaf("CleanUpOldJobsExceedsHistoryLimits"),
        If(not_suspended, leaf("RunNextScheduledJob")),
    )


SEED_EDGES: list[Edge] = [
    ("start", "Join", ""),
    ("Join", "ListActiveJobsAndUpdateStatus", ""),
    ("Join", "CleanUpOldJobsExceedsHistoryLimits", ""),
    ("Join", "not_suspended?", ""),
    ("ListActiveJobsAndUpdateStatus", "join", ""),
    ("CleanUpOldJobsExceedsHistoryLimits", "join", ""),
    ("not_suspended?", "RunNextScheduledJob", "true"),
    ("not_suspended?", "end if", "false"),
    ("RunNextScheduledJob", "end if", ""),
    ("end if", "join", ""),
    ("join", "end", ""),
]


# -- the seed workflow in both formats -------------------------------------------------------------------


def test_mermaid_draws_the_seed_workflow_as_fork_join_with_a_decision() -> None:
    text = to_mermaid(seed_workflow())

    nodes, edges = mermaid_graph(text)
    assert text.startswith("flowchart TD\n")
    assert sorted(nodes.values()) == sorted(
        [
            "start",
            "Join",
            "ListActiveJobsAndUpdateStatus",
            "CleanUpOldJobsExceedsHistoryLimits",
            "not_suspended?",
            "RunNextScheduledJob",
            "end if",
            "join",
            "end",
        ]
    )
    assert sorted(edges) == sorted(SEED_EDGES)


def test_mermaid_gives_decisions_a_diamond_and_forks_their_own_shape() -> None:
    text = to_mermaid(seed_workflow())

    assert re.search(r'^\s+n\d+\{"not_suspended\?"\}$', text, re.MULTILINE)
    assert re.search(r'^\s+n\d+\[\["Join"\]\]$', text, re.MULTILINE)
    assert re.search(r'^\s+n\d+\["RunNextScheduledJob"\]$', text, re.MULTILINE)


def test_dot_draws_the_same_graph_as_mermaid() -> None:
    text = to_dot(seed_workflow())

    nodes, edges = dot_graph(text)
    assert text.startswith('digraph "workflow" {\n')
    assert text.endswith("}\n")
    assert len(nodes) == 9
    assert sorted(edges) == sorted(SEED_EDGES)
    assert re.search(r'label="not_suspended\?", shape=diamond', text)


def test_output_is_stable_for_the_same_workflow() -> None:
    workflow = seed_workflow()

    assert to_mermaid(workflow) == to_mermaid(workflow)
    assert to_dot(workflow) == to_dot(seed_workflow())


# -- each combinator -------------------------------------------------------------------------------------


def test_sequential_chains_its_actions_in_order() -> None:
    _, edges = mermaid_graph(to_mermaid(Sequential(leaf("a"), leaf("b"), leaf("c"))))

    assert edges == [("start", "a", ""), ("a", "b", ""), ("b", "c", ""), ("c", "end", "")]


def test_join_ordered_numbers_its_branches_and_parallel_join_names_its_fork() -> None:
    _, ordered = mermaid_graph(to_mermaid(JoinOrdered(leaf("a"), leaf("b"))))
    nodes, _ = mermaid_graph(to_mermaid(ParallelJoin(leaf("a"), leaf("b"))))

    assert ("JoinOrdered", "a", "1") in ordered
    assert ("JoinOrdered", "b", "2") in ordered
    assert "ParallelJoin" in nodes.values()


def test_if_else_sends_true_and_false_to_their_branches_which_merge() -> None:
    _, edges = dot_graph(to_dot(IfElse(True, leaf("then"), leaf("otherwise"))))

    assert sorted(edges) == sorted(
        [
            ("start", "True?", ""),
            ("True?", "then", "true"),
            ("True?", "otherwise", "false"),
            ("then", "end if", ""),
            ("otherwise", "end if", ""),
            ("end if", "end", ""),
        ]
    )


def test_timeout_and_retry_are_labelled_subgraphs_around_their_action() -> None:
    workflow = Sequential(Timeout(5, leaf("slow")), Retry(leaf("flaky"), attempts=3, interval=2))

    mermaid = to_mermaid(workflow)
    dot = to_dot(workflow)

    assert re.search(r'subgraph c0\["Timeout: 5s"\]\n\s+n\d+\["slow"\]\n\s+end\n', mermaid)
    assert re.search(r'subgraph c1\["Retry: 3 attempts, 2s apart"\]\n\s+n\d+\["flaky"\]\n\s+end\n', mermaid)
    assert re.search(
        r'subgraph cluster_c0 \{\n\s+label="Timeout: 5s";\n\s+style=dashed;\n\s+n\d+ \[label="slow"', dot
    )
    assert 'label="Retry: 3 attempts, 2s apart";' in dot


def test_shared_action_appearing_twice_is_one_node_with_edges_from_both_places() -> None:
    fetch = Shared(leaf("Fetch"))
    workflow = Join(Sequential(fetch, leaf("a")), Sequential(fetch, leaf("b")))

    nodes, edges = mermaid_graph(to_mermaid(workflow))

    assert list(nodes.values()).count("Fetch") == 1
    assert ("Fetch", "a", "") in edges
    assert ("Fetch", "b", "") in edges
    assert edges.count(("Join", "Fetch", "")) == 1


def test_distinct_shared_instances_and_repeated_plain_actions_are_separate_nodes() -> None:
    repeated = leaf("Sync")
    workflow = Sequential(Shared(leaf("Fetch")), Shared(leaf("Fetch")), repeated, repeated)

    nodes, _ = mermaid_graph(to_mermaid(workflow))

    assert list(nodes.values()).count("Fetch") == 2
    assert list(nodes.values()).count("Sync") == 2


class Fanout(Action):
    """A composite the renderer does not know: drawn as a fork named after its type."""

    description = "Fanout"

    def __init__(self, *actions: Action) -> None:
        self.actions = actions

    def children(self) -> Sequence[Action]:
        return self.actions

    def act(self, ctx: Context, states: Mapping[str, Any]) -> Result | None:
        return None


def test_unknown_composite_forks_into_its_children_under_its_type_name() -> None:
    _, edges = mermaid_graph(to_mermaid(Fanout(leaf("a"), leaf("b"))))

    assert ("Fanout", "a", "") in edges
    assert ("Fanout", "b", "") in edges


def test_empty_group_is_a_single_node_labelled_by_its_description() -> None:
    nodes, edges = mermaid_graph(to_mermaid(Join()))

    assert sorted(nodes.values()) == ["Join()", "end", "start"]
    assert edges == [("start", "Join()", ""), ("Join()", "end", "")]


def test_a_cyclic_workflow_is_refused() -> None:
    loop = Sequential(leaf("a"))
    loop.actions = (loop,)

    with pytest.raises(ValueError, match="cycle"):
        to_mermaid(loop)


# -- escaping --------------------------------------------------------------------------------------------


def test_mermaid_labels_escape_quotes_angle_brackets_and_hashes() -> None:
    text = to_mermaid(leaf('say "hi" <now> #1 `x` a|b'))

    assert '["say #quot;hi#quot; #lt;now#gt; #35;1 #96;x#96; a#124;b"]' in text


def test_dot_labels_escape_quotes_backslashes_and_newlines() -> None:
    text = to_dot(leaf('path "C:\\tmp"\nnext'))

    assert r'[label="path \"C:\\tmp\"\nnext", shape=box];' in text


# -- the graph command -----------------------------------------------------------------------------------


@pytest.fixture
def workflow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module in the working directory with a workflow, a factory and a non-workflow attribute."""
    name = f"ctrlkit_graph_target_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """\
            from capa_py.ctrlkit import If, Join, wrap_action

            def not_suspended(ctx):
                return True

            def build():
                return Join(
                    wrap_action("ListActiveJobsAndUpdateStatus", lambda ctx: None),
                    wrap_action("CleanUpOldJobsExceedsHistoryLimits", lambda ctx: None),
                    If(not_suspended, wrap_action("RunNextScheduledJob", lambda ctx: None)),
                )

            workflow = build()
            settings = {"suspend": False}

            def needs_arguments(store):
                return None
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def test_graph_command_prints_mermaid_of_a_workflow_attribute(workflow_module: str) -> None:
    result = CliRunner().invoke(app, ["graph", f"{workflow_module}:workflow"])

    assert result.exit_code == 0, result.output
    _, edges = mermaid_graph(result.stdout)
    assert sorted(edges) == sorted(SEED_EDGES)


def test_graph_command_calls_a_factory_and_prints_dot(workflow_module: str) -> None:
    result = CliRunner().invoke(app, ["graph", f"{workflow_module}:build", "--format", "dot"])

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith('digraph "workflow" {')
    _, edges = dot_graph(result.stdout)
    assert sorted(edges) == sorted(SEED_EDGES)


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        ("missing", "has no attribute 'missing'"),
        ("settings", "to be an Action or a function of no arguments returning one, found dict"),
        ("needs_arguments", "() failed: TypeError"),
    ],
)
def test_graph_command_rejects_a_target_that_is_not_a_workflow(
    workflow_module: str, attribute: str, message: str
) -> None:
    result = CliRunner().invoke(app, ["graph", f"{workflow_module}:{attribute}"])

    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert message in result.stderr


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_such_module_for_ctrlkit:workflow", "cannot import module 'no_such_module_for_ctrlkit'"),
        ("workflow", "expected TARGET as 'module:attribute'"),
    ],
)
def test_graph_command_rejects_a_target_that_cannot_be_imported(target: str, message: str) -> None:
    result = CliRunner().invoke(app, ["graph", target])

    assert result.exit_code == 2
    assert message in result.stderr
