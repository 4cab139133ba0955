"""Which free Hardware a TinkerbellMachine takes: label selectors with Kubernetes' semantics, required
terms OR-ed (as the Tinkerbell provider for Cluster API does), preferred weights summed, name as the
tie-break, claimed Hardware never offered. The create and delete graphs as ``capa ctrlkit graph`` draws
them."""

from __future__ import annotations

import re

import pytest

from capa_py.api.meta import ObjectMeta
from capa_py.api.tinkerbell import Hardware
from capa_py.api.tinkerbell_capi import (
    HARDWARE_OWNER_NAME_LABEL,
    HardwareAffinity,
    HardwareAffinityTerm,
    LabelSelector,
    LabelSelectorRequirement,
    WeightedHardwareAffinityTerm,
)
from capa_py.ctrlkit.graph import to_mermaid
from controllers.tinkerbell_capi import machine_create_graph, machine_delete_graph, rank


def _hw(name: str, **labels: str) -> Hardware:
    return Hardware(metadata=ObjectMeta(name=name, namespace="default", labels=labels))


def _expr(key: str, operator: str, *values: str) -> LabelSelector:
    return LabelSelector(
        match_expressions=[LabelSelectorRequirement(key=key, operator=operator, values=list(values))]
    )


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (LabelSelector(), {}, True),
        (LabelSelector(match_labels={"rack": "a"}), {"rack": "a", "x": "y"}, True),
        (LabelSelector(match_labels={"rack": "a"}), {"rack": "b"}, False),
        (_expr("rack", "In", "a", "b"), {"rack": "b"}, True),
        (_expr("rack", "In", "a", "b"), {}, False),
        (_expr("rack", "NotIn", "a"), {"rack": "b"}, True),
        (_expr("rack", "NotIn", "a"), {}, True),
        (_expr("rack", "NotIn", "a"), {"rack": "a"}, False),
        (_expr("gpu", "Exists"), {"gpu": ""}, True),
        (_expr("gpu", "Exists"), {}, False),
        (_expr("gpu", "DoesNotExist"), {}, True),
        (_expr("gpu", "DoesNotExist"), {"gpu": "1"}, False),
        (
            LabelSelector(
                match_labels={"rack": "a"},
                match_expressions=[LabelSelectorRequirement(key="gpu", operator="Exists")],
            ),
            {"rack": "a"},
            False,
        ),
    ],
)
def test_label_selectors_match_as_kubernetes_does(
    selector: LabelSelector, labels: dict[str, str], matches: bool
) -> None:
    assert selector.matches(labels) is matches


def test_required_terms_are_alternatives_and_claimed_hardware_is_never_offered() -> None:
    affinity = HardwareAffinity(
        required=[
            HardwareAffinityTerm(label_selector=LabelSelector(match_labels={"rack": "a"})),
            HardwareAffinityTerm(label_selector=LabelSelector(match_labels={"rack": "b"})),
        ]
    )
    found = rank(
        [
            _hw("c-1", rack="c"),
            _hw("b-1", rack="b"),
            _hw("a-1", rack="a", **{HARDWARE_OWNER_NAME_LABEL: "other"}),
            _hw("a-2", rack="a"),
        ],
        affinity,
    )
    assert [h.name for h in found] == ["a-2", "b-1"]


def test_preferred_weights_are_summed_and_ties_go_by_name() -> None:
    def weighted(weight: int, **labels: str) -> WeightedHardwareAffinityTerm:
        return WeightedHardwareAffinityTerm(
            weight=weight,
            hardware_affinity_term=HardwareAffinityTerm(label_selector=LabelSelector(match_labels=labels)),
        )

    affinity = HardwareAffinity(
        preferred=[weighted(40, disk="nvme"), weighted(25, gpu="yes"), weighted(25, fast="yes")]
    )
    found = rank(
        [
            _hw("plain"),
            _hw("nvme", disk="nvme"),
            _hw("z-both", gpu="yes", fast="yes"),
            _hw("a-both", gpu="yes", fast="yes"),
        ],
        affinity,
    )
    assert [h.name for h in found] == ["a-both", "z-both", "nvme", "plain"]


def _steps(text: str) -> list[str]:
    return re.findall(r'\["(\w+)"\]', text)


def test_the_graphs_name_every_step_in_order() -> None:
    assert _steps(to_mermaid(machine_create_graph())) == [
        "ClaimHardware",
        "RecordHardware",
        "WriteUserData",
        "EnsureTemplate",
        "EnsureWorkflow",
        "WaitForWorkflow",
        "MarkReady",
    ]
    assert _steps(to_mermaid(machine_delete_graph())) == [
        "DeleteWorkflow",
        "DeleteTemplate",
        "ReleaseHardware",
    ]
