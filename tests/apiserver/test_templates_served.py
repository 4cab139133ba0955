"""Templates over HTTP: ``capa serve`` and a real kube-apiserver running capa-py's CRDs with capa-py's
validating webhook registered (served in-process, called by the API server over TLS) answer the same
writes the same way: a valid AWSMachineTemplate created, an update of its spec refused with a 422 naming
each changed field under ``spec.template``, a change of its own labels accepted, and a template with an
instance-only field refused naming it. kubectl lists them by short name on both."""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.manifests.webhooks import ExternalWebhooks, validating_webhook_configuration
from capa_py.webhooks import start_in_thread
from tests.api.test_api_templates import MACHINE_SPEC, machine_template
from tests.apiserver.apiserver_support import Server
from tests.apiserver.crd_support import Api
from tests.peers.cluster import PeerCluster, running
from tests.peers.crds import install_capa_crds
from tests.peers.fixtures import require_go
from tests.peers.kubectl import find_kubectl
from tests.realkube.realkube_support import WebhookCertificates

PATH = "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/default/awsmachinetemplates"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


@pytest.fixture(scope="module")
def guarded_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PeerCluster]:
    """A control plane of its own (a webhook registered on the shared one would judge every suite's
    writes) with capa-py's CRDs and its webhooks registered, calling an in-process webhook server."""
    require_go()
    workdir = tmp_path_factory.mktemp("templates-peer")
    certificates = WebhookCertificates.create(workdir / "webhook-certs")
    webhook = start_in_thread(certificates.directory, port=0)
    try:
        with running(directory=workdir / "cluster", controller_manager=False) as cluster:
            install_capa_crds(cluster)
            external = ExternalWebhooks(webhook.url, certificates.ca_file.read_bytes())
            cluster.request(WEBHOOKS, "POST", validating_webhook_configuration(external=external))
            api = Api(cluster.url, cluster.admin_context())
            probe = machine_template({**MACHINE_SPEC, "providerID": "aws:///x"}, name="probe")
            # The API server starts calling a new webhook once its informer has seen the registration.
            api.until(lambda: api("POST", PATH, probe)[0] == 422, "the webhook is called", timeout=60)
            yield cluster
    finally:
        webhook.stop()


@pytest.fixture
def both(guarded_peer: PeerCluster, server: Server) -> dict[str, Api]:
    return {
        "peer": Api(guarded_peer.url, guarded_peer.admin_context()),
        "capa": Api(server.url, server.context),
    }


def _causes(body: Any) -> list[str]:
    return [cause["field"] for cause in body["details"]["causes"]]


def test_both_servers_refuse_a_template_spec_update_and_accept_a_relabelling(both: dict[str, Api]) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for side, api in both.items():
        status, created = api("POST", PATH, machine_template(name="workers"))
        assert status == 201, (side, created)
        changed = copy.deepcopy(created)
        changed["spec"]["template"]["spec"]["instanceType"] = "t3.large"
        changed["spec"]["template"]["spec"]["rootVolume"]["size"] = 80
        refused_status, refused = api("PUT", f"{PATH}/workers", changed)
        relabelled = copy.deepcopy(created)
        relabelled["metadata"]["labels"] = {"cluster.x-k8s.io/cluster-name": "demo"}
        relabel_status, stored = api("PUT", f"{PATH}/workers", relabelled)
        bad_status, bad = api("POST", PATH, machine_template({**MACHINE_SPEC, "instanceID": "i-0123"}, "bad"))
        _, got = api("GET", f"{PATH}/workers")
        seen[side] = {
            "refused": (refused_status, refused.get("reason"), _causes(refused)),
            "relabelled": (relabel_status, stored["metadata"].get("labels")),
            "instance-only": (bad_status, bad.get("reason"), _causes(bad)),
            "stored spec": got["spec"],
        }
        assert "AWSMachineTemplate.spec cannot change after create" in refused["message"], (side, refused)
    assert seen["capa"] == seen["peer"]
    assert seen["capa"]["refused"] == (
        422,
        "Invalid",
        ["spec.template.spec.instanceType", "spec.template.spec.rootVolume.size"],
    )
    assert seen["capa"]["relabelled"] == (200, {"cluster.x-k8s.io/cluster-name": "demo"})
    assert seen["capa"]["instance-only"] == (422, "Invalid", ["spec.template.spec.instanceID"])
    assert seen["capa"]["stored spec"]["template"]["spec"]["instanceType"] == "t3.medium"


def test_kubectl_lists_templates_by_short_name_as_on_the_api_server(
    both: dict[str, Api], guarded_peer: PeerCluster, server: Server, tmp_path: Path
) -> None:
    found = find_kubectl()
    if found.path is None:
        pytest.skip(found.reason)
    configs = {
        "peer": guarded_peer.admin_kubeconfig,
        "capa": server.running.write_kubeconfig(tmp_path / "capa.kubeconfig"),
    }
    printed: dict[str, tuple[list[str], list[str]]] = {}
    for side, api in both.items():
        status, body = api("POST", PATH, machine_template(name="listed"))
        assert status == 201, (side, body)
        done = subprocess.run(
            [str(found.path), "get", "awsmt", "listed", "-n", "default"],
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(tmp_path / side),
                "KUBECONFIG": str(configs[side]),
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (side, done.stderr)
        header, *rows = done.stdout.splitlines()
        printed[side] = (header.split(), [row.split()[0] for row in rows])
    assert printed["capa"] == printed["peer"] == (["NAME", "AGE"], ["listed"])


def test_a_topology_dry_run_may_change_a_template_spec_and_writes_nothing(both: dict[str, Api]) -> None:
    """Cluster API's topology controller dry-runs changed templates (annotated as its dry runs) to decide
    whether to rotate them: the spec check is skipped for that dry run only, as the providers' webhooks
    skip it; a plain dry run (kubectl's --dry-run=server) is refused as the write would be."""
    seen: dict[str, tuple[int, int, int, str]] = {}
    for side, api in both.items():
        status, created = api("POST", PATH, machine_template(name="rotated"))
        assert status == 201, (side, created)
        changed = copy.deepcopy(created)
        changed["spec"]["template"]["spec"]["instanceType"] = "t3.large"
        plain, refused = api("PUT", f"{PATH}/rotated?dryRun=All", changed)
        changed["metadata"].setdefault("annotations", {})["topology.cluster.x-k8s.io/dry-run"] = ""
        topology, answered = api("PUT", f"{PATH}/rotated?dryRun=All", changed)
        real, _ = api("PUT", f"{PATH}/rotated", changed)
        _, stored = api("GET", f"{PATH}/rotated")
        assert answered["spec"]["template"]["spec"]["instanceType"] == "t3.large", (side, answered)
        seen[side] = (plain, topology, real, stored["spec"]["template"]["spec"]["instanceType"])
        assert _causes(refused) == ["spec.template.spec.instanceType"], (side, refused)
    assert seen["capa"] == seen["peer"] == (422, 200, 422, "t3.medium")


def test_kubectl_explain_describes_a_templates_fields_as_on_the_api_server(
    guarded_peer: PeerCluster, server: Server, tmp_path: Path
) -> None:
    found = find_kubectl()
    if found.path is None:
        pytest.skip(found.reason)
    configs = {
        "peer": guarded_peer.admin_kubeconfig,
        "capa": server.running.write_kubeconfig(tmp_path / "capa.kubeconfig"),
    }
    explained: dict[str, str] = {}
    for side, config in configs.items():
        done = subprocess.run(
            [str(found.path), "explain", "awsmt.spec.template"],
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path / side), "KUBECONFIG": str(config)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (side, done.stderr)
        explained[side] = done.stdout
    assert explained["capa"] == explained["peer"]
    assert "Each AWSMachine made from the template" in explained["capa"]
    assert "spec\t<Object> -required-" in explained["capa"]
