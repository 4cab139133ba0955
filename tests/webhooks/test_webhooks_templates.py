"""The validating webhooks for the template kinds, over real HTTPS: the templated spec judged as the kind it
stamps out, instance-only fields refused on create, and an update that changes the spec denied naming each
changed field (the template object's own labels stay free)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.aws_templates import AWSClusterTemplate, AWSMachineTemplate
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell_capi import TinkerbellMachineTemplate
from capa_py.webhooks import RunningWebhook, validate_path
from tests.api.test_api_templates import cluster_template, machine_template, tinkerbell_template
from tests.webhooks.test_webhooks_tinkerbell import answer, causes, review


def test_the_paths_are_capas() -> None:
    assert (
        validate_path(AWSMachineTemplate)
        == "/validate-infrastructure-cluster-x-k8s-io-v1beta2-awsmachinetemplate"
    )
    assert (
        validate_path(AWSClusterTemplate)
        == "/validate-infrastructure-cluster-x-k8s-io-v1beta2-awsclustertemplate"
    )


@pytest.mark.parametrize(
    ("model", "doc"),
    [
        (AWSMachineTemplate, machine_template()),
        (AWSClusterTemplate, cluster_template()),
        (TinkerbellMachineTemplate, tinkerbell_template({})),
    ],
    ids=["awsmachinetemplate", "awsclustertemplate", "tinkerbellmachinetemplate"],
)
def test_a_valid_template_is_allowed_and_so_is_a_relabelling(
    webhook: RunningWebhook, cert_dir: Path, model: type[KubeObject], doc: dict[str, Any]
) -> None:
    created = review("CREATE", doc)
    assert answer(webhook.port, model, created, cert_dir) == {
        "uid": created["request"]["uid"],
        "allowed": True,
    }
    relabelled = copy.deepcopy(doc)
    relabelled["metadata"]["labels"] = {"cluster.x-k8s.io/cluster-name": "demo"}
    updated = review("UPDATE", relabelled, doc)
    assert answer(webhook.port, model, updated, cert_dir)["allowed"] is True


def test_a_machine_template_an_awsmachine_would_refuse_is_denied_naming_the_templated_fields(
    webhook: RunningWebhook, cert_dir: Path
) -> None:
    doc = machine_template(
        {
            "instanceType": "t9.gigantic",
            "providerID": "aws:///us-east-1a/i-0123",
            "ami": {"id": "ami-785db401"},
        }
    )
    assert causes(answer(webhook.port, AWSMachineTemplate, review("CREATE", doc), cert_dir)) == [
        ("spec.template.spec.providerID", "cannot be set in templates"),
        (
            "spec.template.spec.instanceType",
            "not an EC2 instance type: 't9.gigantic' (expected one in botocore's EC2 model, e.g. t3.medium)",
        ),
    ]


def test_a_spec_change_is_denied_naming_each_changed_field(webhook: RunningWebhook, cert_dir: Path) -> None:
    old = machine_template()
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["instanceType"] = "t3.large"
    new["spec"]["template"]["metadata"]["labels"]["tier"] = "edge"
    found = causes(answer(webhook.port, AWSMachineTemplate, review("UPDATE", new, old), cert_dir))
    assert found == [
        (
            "spec.template.metadata.labels.tier",
            "immutable: AWSMachineTemplate.spec cannot change after create (was worker, now edge)",
        ),
        (
            "spec.template.spec.instanceType",
            "immutable: AWSMachineTemplate.spec cannot change after create (was t3.medium, now t3.large)",
        ),
    ]


def test_a_tinkerbell_machine_template_spec_change_is_denied(webhook: RunningWebhook, cert_dir: Path) -> None:
    old = tinkerbell_template({})
    new = tinkerbell_template(
        {"hardwareAffinity": {"required": [{"labelSelector": {"matchLabels": {"a": "b"}}}]}}
    )
    found = causes(answer(webhook.port, TinkerbellMachineTemplate, review("UPDATE", new, old), cert_dir))
    assert [field for field, _ in found] == ["spec.template.spec.hardwareAffinity"]
