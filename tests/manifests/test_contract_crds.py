"""The infrastructure CRDs name both Cluster API contracts and their schemas carry both contracts' status
fields, so the API server neither prunes nor lets through a malformed v1beta2 condition."""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.contract import REASON_PATTERN
from capa_py.api.meta import KubeObject
from capa_py.api.tinkerbell_capi import TinkerbellCluster, TinkerbellMachine, TinkerbellMachineTemplate
from capa_py.manifests.crds import crd_for

INFRASTRUCTURE = [AWSCluster, AWSMachine, TinkerbellCluster, TinkerbellMachine]


def _status_schema(model: type[KubeObject]) -> dict[str, Any]:
    schema = crd_for(model)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    status: dict[str, Any] = schema["properties"]["status"]
    return status


@pytest.mark.parametrize("model", [*INFRASTRUCTURE, TinkerbellMachineTemplate], ids=lambda m: m.KIND)
def test_infrastructure_crds_name_both_contracts_at_the_version_served(model: type[KubeObject]) -> None:
    crd = crd_for(model)
    served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
    labels = crd["metadata"]["labels"]
    assert labels["cluster.x-k8s.io/v1beta1"] == labels["cluster.x-k8s.io/v1beta2"]
    assert labels["cluster.x-k8s.io/v1beta2"].split("_") == served


@pytest.mark.parametrize("model", INFRASTRUCTURE, ids=lambda m: m.KIND)
def test_infrastructure_schemas_carry_both_contracts_status(model: type[KubeObject]) -> None:
    properties = _status_schema(model)["properties"]
    assert properties["ready"]["type"] == "boolean"
    assert list(properties["initialization"]["properties"]) == ["provisioned"]
    assert properties["initialization"]["properties"]["provisioned"]["type"] == "boolean"
    assert "severity" in properties["conditions"]["items"]["properties"]
    condition = properties["v1beta2"]["properties"]["conditions"]["items"]
    assert condition["required"] == ["lastTransitionTime", "message", "reason", "status", "type"]
    assert condition["properties"]["reason"]["pattern"] == REASON_PATTERN
    assert condition["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert condition["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert condition["properties"]["observedGeneration"]["minimum"] == 0
