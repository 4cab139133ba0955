"""The validating webhook answers for the bare-metal provider's kinds as for the others: over real HTTPS,
a valid object allowed, an invalid one denied with a 422 whose causes name each field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine, TinkerbellMachineTemplate
from capa_py.webhooks import RunningWebhook, validate_path
from tests.webhooks.test_webhooks_tinkerbell import answer, causes, review

API = "infrastructure.cluster.x-k8s.io/v1beta1"


def _doc(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": "x", "namespace": "default"}, "spec": spec}


AFFINITY = {
    "required": [
        {"labelSelector": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}}
    ],
    "preferred": [{"weight": 10, "hardwareAffinityTerm": {"labelSelector": {"matchLabels": {"gpu": "yes"}}}}],
}


def test_the_paths_follow_controller_runtimes_convention() -> None:
    assert (
        validate_path(TinkerbellMachine)
        == "/validate-infrastructure-cluster-x-k8s-io-v1beta1-tinkerbellmachine"
    )


@pytest.mark.parametrize(
    ("model", "doc"),
    [
        (
            TinkerbellCluster,
            _doc("TinkerbellCluster", {"controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443}}),
        ),
        (TinkerbellMachine, _doc("TinkerbellMachine", {"hardwareAffinity": AFFINITY})),
        (
            TinkerbellMachineTemplate,
            _doc("TinkerbellMachineTemplate", {"template": {"spec": {"hardwareAffinity": AFFINITY}}}),
        ),
    ],
)
def test_a_valid_object_is_allowed(
    webhook: RunningWebhook, cert_dir: Path, model: Any, doc: dict[str, Any]
) -> None:
    body = review("CREATE", doc)
    assert answer(webhook.port, model, body, cert_dir) == {"uid": body["request"]["uid"], "allowed": True}


def test_an_invalid_machine_is_denied_naming_each_field(webhook: RunningWebhook, cert_dir: Path) -> None:
    doc = _doc(
        "TinkerbellMachine",
        {
            "hardwareAffinity": {
                "required": [{"labelSelector": {"matchExpressions": [{"key": "rack", "operator": "Gt"}]}}],
                "preferred": [{"weight": 0, "hardwareAffinityTerm": {"labelSelector": {}}}],
            },
            "templateOverride": "actions: []\n",
        },
    )
    assert causes(answer(webhook.port, TinkerbellMachine, review("CREATE", doc), cert_dir)) == [
        (
            "spec.hardwareAffinity.required[0].labelSelector.matchExpressions[0].operator",
            "'Gt' is not a valid operator (one of In, NotIn, Exists, DoesNotExist)",
        ),
        ("spec.hardwareAffinity.preferred[0].weight", "0 is not in 1-100"),
        ("spec.templateOverride", "actions: at least one action is required"),
    ]


def test_an_endpoint_without_host_or_port_is_denied(webhook: RunningWebhook, cert_dir: Path) -> None:
    doc = _doc("TinkerbellCluster", {"controlPlaneEndpoint": {"host": " ", "port": 0}})
    assert causes(answer(webhook.port, TinkerbellCluster, review("CREATE", doc), cert_dir)) == [
        ("spec.controlPlaneEndpoint.host", "required"),
        ("spec.controlPlaneEndpoint.port", "0 is not a port (1-65535)"),
    ]
