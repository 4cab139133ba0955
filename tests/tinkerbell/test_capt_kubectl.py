"""The bare-metal provider's kinds through ``capa serve`` with kubectl as the client: the example applies,
kubectl discovers the kinds and prints their columns, and an invalid TinkerbellMachine is refused with a
422 naming the field."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tests.apiserver.test_kubectl import Kubectl, kubectl  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell-cluster-machines.yaml"


def _header(table: str) -> list[str]:
    return re.split(r"\s{2,}", table.splitlines()[0].strip())


def test_kubectl_applies_the_example_and_prints_the_provider_columns(kubectl: Kubectl) -> None:  # noqa: F811
    applied = kubectl.run("apply", "-f", str(EXAMPLE)).stdout
    assert "tinkerbellmachine.infrastructure.cluster.x-k8s.io/lab-cp-0 created" in applied
    assert "tinkerbellcluster.infrastructure.cluster.x-k8s.io/lab created" in applied
    listed = kubectl.run("api-resources", "--api-group=infrastructure.cluster.x-k8s.io").stdout
    names = {line.split()[0] for line in listed.splitlines()[1:]}
    assert {"tinkerbellclusters", "tinkerbellmachines", "tinkerbellmachinetemplates"} <= names
    machines = kubectl.run("get", "tinkerbellmachines").stdout
    assert _header(machines) == ["NAME", "CLUSTER", "HARDWARE", "PROVIDERID", "READY", "AGE"]
    assert [line.split()[0] for line in machines.splitlines()[1:]] == [
        "lab-cp-0",
        "lab-worker-0",
        "lab-worker-1",
    ]
    assert _header(kubectl.run("get", "tinkerbellclusters", "-o", "wide").stdout) == [
        "NAME",
        "CLUSTER",
        "READY",
        "ENDPOINT",
        "AGE",
    ]


def test_kubectl_is_refused_an_invalid_machine_naming_the_field(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    bad = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "TinkerbellMachine",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {
            "hardwareAffinity": {"preferred": [{"weight": 0, "hardwareAffinityTerm": {"labelSelector": {}}}]}
        },
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    refused = kubectl.run("apply", "-f", str(path), check=False)
    assert refused.returncode != 0
    assert 'The TinkerbellMachine "bad" is invalid' in refused.stderr, refused.stderr
    assert "spec.hardwareAffinity.preferred[0].weight: 0 is not in 1-100" in refused.stderr
    assert kubectl.run("get", "tinkerbellmachines", "-o", "name").stdout == ""
