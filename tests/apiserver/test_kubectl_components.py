"""kubectl against ``capa serve``: installing the provider's components, and reading Events."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from capa_py.api.aws import AWSCluster
from capa_py.runtime.events import EventRecorder
from capa_py.store import SQLiteStore
from tests.apiserver.apiserver_support import EXAMPLE, ROOT
from tests.apiserver.test_kubectl import Kubectl, kubectl

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")

__all__ = ["kubectl"]


def _manifests(tmp_path: Path, what: str) -> Path:
    printed = subprocess.run(
        [sys.executable, "-m", "capa_app.cli", "manifests", what],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    path = tmp_path / f"{what}.yaml"
    path.write_text(printed.stdout)
    return path


def test_kubectl_applies_the_crds_then_the_whole_components_file(kubectl: Kubectl, tmp_path: Path) -> None:
    crds = _manifests(tmp_path, "crds")
    created = kubectl.run("apply", "-f", str(crds)).stdout.splitlines()
    # Cluster API (Cluster, Machine, MachineDeployment, MachineSet, MachinePool), capa-py, AWS (with the
    # templates and AWSMachinePool), Tinkerbell and bare-metal kinds, and the AWS identities
    assert len(created) == 21, created
    assert all(line.endswith(" created") for line in created), created
    again = kubectl.run("apply", "-f", str(crds)).stdout.splitlines()
    assert all(line.endswith(" unchanged") for line in again), again
    names = kubectl.run("get", "crds", "-o", "name").stdout.split()
    assert sorted(names) == [
        "customresourcedefinition.apiextensions.k8s.io/awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/awsclusterroleidentities.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/awsclusters.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/awsclusterstaticidentities.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/awsclustertemplates.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/awsmachinepools.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/awsmachines.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/awsmachinetemplates.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/clusterconfigs.capa-py.io",
        "customresourcedefinition.apiextensions.k8s.io/clusters.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/hardware.tinkerbell.org",
        "customresourcedefinition.apiextensions.k8s.io/machinedeployments.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/machinepools.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/machines.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/machinesets.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/osies.tinkerbell.org",
        "customresourcedefinition.apiextensions.k8s.io/templates.tinkerbell.org",
        "customresourcedefinition.apiextensions.k8s.io/tinkerbellclusters.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/tinkerbellmachines.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io",
        "customresourcedefinition.apiextensions.k8s.io/workflows.tinkerbell.org",
    ]

    components = _manifests(tmp_path, "all")
    applied = kubectl.run("apply", "-f", str(components)).stdout.splitlines()
    for line in (
        "namespace/capa-py-system created",
        "serviceaccount/capa-py-controller-manager created",
        "clusterrole.rbac.authorization.k8s.io/capa-py-manager-role created",
        "clusterrolebinding.rbac.authorization.k8s.io/capa-py-manager-rolebinding created",
        "deployment.apps/capa-py-controller-manager created",
        "service/capa-py-controller-manager-metrics created",
        "issuer.cert-manager.io/capa-py-selfsigned-issuer created",
        "certificate.cert-manager.io/capa-py-serving-cert created",
        "service/capa-py-webhook-service created",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/"
        "capa-py-validating-webhook-configuration created",
    ):
        assert line in applied, applied
    reapplied = kubectl.run("apply", "-f", str(components)).stdout.splitlines()
    assert all(line.endswith(" unchanged") for line in reapplied), reapplied
    deployment = json.loads(
        kubectl.run(
            "get", "deployment", "capa-py-controller-manager", "-n", "capa-py-system", "-o", "json"
        ).stdout
    )
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["volumes"] == [
        {"name": "tmp", "emptyDir": {}},
        {"name": "webhook-cert", "secret": {"secretName": "capa-py-webhook-service-cert"}},
        {
            "name": "aws-credentials",
            "secret": {"secretName": "capa-py-manager-bootstrap-credentials", "optional": True},
        },
    ]
    # A changed image is a strategic patch of one container field: the rest of the container stays.
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    text = components.read_text().replace("ghcr.io/capa-py/capa-py:", "registry.example.com/capa-py:")
    components.write_text(text)
    changed = kubectl.run("apply", "-f", str(components)).stdout
    assert "deployment.apps/capa-py-controller-manager configured" in changed
    container = json.loads(
        kubectl.run(
            "get", "deployment", "capa-py-controller-manager", "-n", "capa-py-system", "-o", "json"
        ).stdout
    )["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].startswith("registry.example.com/capa-py:")
    assert container["args"] == args
    webhooks = json.loads(
        kubectl.run(
            "get", "validatingwebhookconfiguration", "capa-py-validating-webhook-configuration", "-o", "json"
        ).stdout
    )
    assert webhooks["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "capa-py-system/capa-py-serving-cert"
    )
    assert [w["name"] for w in webhooks["webhooks"]] == [
        "validation.clusterconfig.capa-py.io",
        "validation.awsclustercontrolleridentity.infrastructure.cluster.x-k8s.io",
        "validation.awsclusterroleidentity.infrastructure.cluster.x-k8s.io",
        "validation.awscluster.infrastructure.cluster.x-k8s.io",
        "validation.awsclusterstaticidentity.infrastructure.cluster.x-k8s.io",
        "validation.awsclustertemplate.infrastructure.cluster.x-k8s.io",
        "validation.awsmachinepool.infrastructure.cluster.x-k8s.io",
        "validation.awsmachine.infrastructure.cluster.x-k8s.io",
        "validation.awsmachinetemplate.infrastructure.cluster.x-k8s.io",
        "validation.tinkerbellcluster.infrastructure.cluster.x-k8s.io",
        "validation.tinkerbellmachine.infrastructure.cluster.x-k8s.io",
        "validation.tinkerbellmachinetemplate.infrastructure.cluster.x-k8s.io",
        "validation.hardware.tinkerbell.org",
        "validation.osie.tinkerbell.org",
        "validation.template.tinkerbell.org",
        "validation.workflow.tinkerbell.org",
    ]
    certificate = json.loads(
        kubectl.run(
            "get", "certificates", "capa-py-serving-cert", "-n", "capa-py-system", "-o", "json"
        ).stdout
    )
    assert certificate["spec"]["secretName"] == "capa-py-webhook-service-cert"
    issuer = json.loads(
        kubectl.run("get", "issuer", "capa-py-selfsigned-issuer", "-n", "capa-py-system", "-o", "json").stdout
    )
    assert issuer["spec"] == {"selfSigned": {}}
    role = json.loads(kubectl.run("get", "clusterrole", "capa-py-manager-role", "-o", "json").stdout)
    assert {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "update"]} in role["rules"]


def test_kubectl_describe_and_get_events_show_what_the_controllers_recorded(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    kubectl.run("apply", "-f", str(EXAMPLE))
    store = SQLiteStore(tmp_path / "state.db")
    try:
        awscluster = store.get(AWSCluster, "demo", "default")
        recorder = EventRecorder(store)
        recorder.normal(awscluster, "SuccessfulCreateVPC", "Created new managed VPC vpc-0123")
        recorder.warning(awscluster, "FailedReconcileSubnets", "InvalidSubnet.Conflict: overlaps")
        recorder.warning(awscluster, "FailedReconcileSubnets", "InvalidSubnet.Conflict: overlaps")
    finally:
        store.close()

    described = kubectl.run("describe", "awscluster", "demo").stdout
    events = described.split("\nEvents:", 1)[1].splitlines()
    assert events[1].split() == ["Type", "Reason", "Age", "From", "Message"], described
    normal = next(line for line in events if "SuccessfulCreateVPC" in line)
    assert normal.split()[0] == "Normal"
    assert "capa-py-controller" in normal
    assert normal.endswith("Created new managed VPC vpc-0123")
    warning = next(line for line in events if "FailedReconcileSubnets" in line)
    assert warning.split()[0] == "Warning"
    assert "(x2 over" in warning

    table = kubectl.run("get", "events").stdout.splitlines()
    assert table[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    rows = [line.split() for line in table[1:]]
    assert any("Warning" in r and "FailedReconcileSubnets" in r and "awscluster/demo" in r for r in rows)
    assert any("Normal" in r and "SuccessfulCreateVPC" in r and "awscluster/demo" in r for r in rows)
    warnings = kubectl.run("get", "events", "--field-selector", "type=Warning", "-o", "json").stdout
    assert [e["reason"] for e in json.loads(warnings)["items"]] == ["FailedReconcileSubnets"]
