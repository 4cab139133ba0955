"""The controllers' workflows render as ctrlkit graphs, in the order the reconcile runs them."""

from __future__ import annotations

from capa_py.ctrlkit.graph import to_dot, to_mermaid
from controllers.graphs import awscluster_create, awscluster_delete, awsmachine_create


def test_awscluster_create_graph_follows_the_dependency_order() -> None:
    text = to_mermaid(awscluster_create())
    order = [
        "ReconcileVpc",
        "ReconcileSubnets",
        "ReconcileInternetGateway",
        "ReconcileNatGateways",
        "ReconcileRouteTables",
        "ReconcileSecurityGroups",
        "ReconcileLoadBalancer",
        "MarkReady",
    ]
    positions = [text.index(f'"{step}"') for step in order]
    assert positions == sorted(positions), text


def test_awscluster_delete_graph_runs_in_reverse_and_ends_with_the_vpc() -> None:
    text = to_dot(awscluster_delete())
    assert text.index('"DeleteLoadBalancer"') < text.index('"DeleteNatGateways"') < text.index('"DeleteVpc"')
    assert text.index('"DeleteVpc"') < text.index('"SweepStrayResources"')


def test_awsmachine_graph_registers_after_the_instance() -> None:
    text = to_mermaid(awsmachine_create())
    assert (
        text.index('"ReconcileInstance"')
        < text.index('"RegisterWithLoadBalancer"')
        < text.index('"MarkReady"')
    )
