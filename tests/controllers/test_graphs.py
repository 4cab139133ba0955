"""The controllers' workflows render as ctrlkit graphs, in the order the reconcile runs them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capa_app.cli.ctrlkit_cmd import app
from capa_py.ctrlkit.graph import to_dot, to_mermaid
from controllers import awscluster, awsmachine
from controllers.graphs import awscluster_create, awscluster_delete, awsmachine_create, awsmachine_delete


def _flow(text: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """The Mermaid flowchart's node labels by id, and each node's successors."""
    labels = dict(re.findall(r'^\s*(n\d+)\W+"([^"]+)"', text, re.MULTILINE))
    successors: dict[str, set[str]] = {}
    for source, target in re.findall(r"^\s*(n\d+) -->(?:\|[^|]*\|)? (n\d+)$", text, re.MULTILINE):
        successors.setdefault(source, set()).add(target)
    return labels, successors


def _reaches(text: str, first: str, then: str) -> bool:
    """Whether the step labelled ``then`` comes after ``first`` on some path of the graph."""
    labels, successors = _flow(text)
    ids = {label: node for node, label in labels.items()}
    seen, todo = set(), [ids[first]]
    while todo:
        node = todo.pop()
        for nxt in successors.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return ids[then] in seen


def test_awscluster_create_graph_chains_only_what_depends_on_each_other() -> None:
    text = to_mermaid(awscluster_create())
    chains = [
        ("ReconcileVpc", "ReconcileSubnets"),
        ("ReconcileSubnets", "ReconcileSecurityGroups"),
        ("ReconcileSubnets", "ReconcileInternetGateway"),
        ("ReconcileInternetGateway", "ReconcilePublicRouteTable"),
        ("ReconcileInternetGateway", "ReconcileNatGateways"),
        ("ReconcileInternetGateway", "ReconcileLoadBalancer"),
        ("ReconcileNatGateways", "WaitForNatGateways"),
        ("WaitForNatGateways", "ReconcilePrivateRouteTables"),
        ("ReconcileLoadBalancer", "WaitForLoadBalancer"),
        ("ReconcilePrivateRouteTables", "MarkReady"),
        ("WaitForLoadBalancer", "MarkReady"),
        ("ReconcileSecurityGroups", "MarkReady"),
        ("ReconcilePublicRouteTable", "MarkReady"),
    ]
    for first, then in chains:
        assert _reaches(text, first, then), f"{then} does not come after {first}:\n{text}"
    # A wait holds back only what depends on it: these run side by side, in either order.
    independent = [
        ("WaitForNatGateways", "ReconcileSecurityGroups"),
        ("WaitForNatGateways", "ReconcileLoadBalancer"),
        ("WaitForNatGateways", "WaitForLoadBalancer"),
        ("WaitForLoadBalancer", "ReconcilePrivateRouteTables"),
        ("WaitForLoadBalancer", "ReconcileSecurityGroups"),
        ("ReconcilePublicRouteTable", "WaitForNatGateways"),
    ]
    for one, other in independent:
        assert not _reaches(text, one, other), f"{other} waits for {one}:\n{text}"
        assert not _reaches(text, other, one), f"{one} waits for {other}:\n{text}"


def test_awscluster_delete_graph_runs_in_reverse_and_ends_with_the_vpc() -> None:
    text = to_dot(awscluster_delete())
    assert text.index('"DeleteLoadBalancer"') < text.index('"DeleteNatGateways"') < text.index('"DeleteVpc"')
    assert text.index('"DeleteVpc"') < text.index('"SweepStrayResources"')


def test_awsmachine_graph_registers_after_the_instance() -> None:
    text = to_mermaid(awsmachine_create())
    assert (
        text.index('"StoreBootstrapData"')
        < text.index('"ReconcileInstance"')
        < text.index('"RegisterWithLoadBalancer"')
        < text.index('"MarkReady"')
        < text.index('"DeleteBootstrapData"')
    ), "the data is stored before the launch, and deleted once the instance runs"


GRAPHS = Path(__file__).parent / "graphs"


@pytest.mark.parametrize(
    "name", ["awscluster_create", "awscluster_delete", "awsmachine_create", "awsmachine_delete"]
)
@pytest.mark.parametrize(("output_format", "suffix"), [("mermaid", "mmd"), ("dot", "dot")])
def test_capa_ctrlkit_graph_draws_each_workflow_as_pinned(name: str, output_format: str, suffix: str) -> None:
    """The node names and edges of each controller workflow, as ``capa ctrlkit graph`` prints them, are
    pinned (the files were printed before the AWS work moved into services): a step renamed, moved or
    joined differently shows up here."""
    result = CliRunner().invoke(app, ["graph", f"controllers.graphs:{name}", "--format", output_format])
    assert result.exit_code == 0, result.output
    assert result.output == (GRAPHS / f"{name}.{suffix}").read_text()


def test_the_graphs_drawn_are_the_workflows_the_controllers_run() -> None:
    assert awscluster_create() is awscluster.CREATE
    assert awscluster_delete() is awscluster.DELETE
    assert awsmachine_create() is awsmachine.CREATE
    assert awsmachine_delete() is awsmachine.DELETE
