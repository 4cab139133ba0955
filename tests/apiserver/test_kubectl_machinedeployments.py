"""MachineDeployments through kubectl, against ``capa serve`` and the real API server with capa-py's CRDs:
the same manifest is accepted by both (``maxSurge`` as a percentage, ``maxUnavailable`` as an integer), both
print Cluster API's columns, and the real API server scales one through the CRD's scale subresource."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.apiserver_support import Server
from tests.apiserver.crd_support import Kubectl, capa_kubeconfig, find_kubectl
from tests.apiserver.peer_support import capa_endpoint, peer_endpoint, scratch_namespace
from tests.peers.cluster import PeerCluster
from tests.peers.crds import install_capa_crds


def _deployment(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": "workers", "namespace": namespace},
        "spec": {
            "clusterName": "c1",
            "replicas": 2,
            "selector": {"matchLabels": {"pool": "workers"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"pool": "workers"}},
                "spec": {
                    "clusterName": "c1",
                    "version": "v1.30.1",
                    "bootstrap": {"dataSecretName": "workers-bootstrap"},
                    "infrastructureRef": {
                        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                        "kind": "TinkerbellMachineTemplate",
                        "name": "workers",
                    },
                },
            },
        },
    }


def _header(table: str) -> list[str]:
    return re.split(r"\s{2,}", table.splitlines()[0].strip())


def _row(table: str) -> list[str]:
    return re.split(r"\s{2,}", table.splitlines()[1].strip())


def test_kubectl_applies_and_prints_a_machine_deployment_on_both_servers(
    peer_cluster: PeerCluster, server: Server, tmp_path: Path
) -> None:
    binary = find_kubectl()
    if binary is None:
        pytest.skip("kubectl is not installed")
    install_capa_crds(peer_cluster)
    kubectls = {
        "capa": Kubectl(binary, capa_kubeconfig(server, tmp_path / "capa" / "config"), tmp_path / "capa"),
        "peer": Kubectl(binary, peer_cluster.admin_kubeconfig, tmp_path / "peer"),
    }
    endpoints = (capa_endpoint(server, tmp_path / "capa-endpoint"), peer_endpoint(peer_cluster))
    seen: dict[str, dict[str, Any]] = {}
    with scratch_namespace(*endpoints, prefix="capa-md") as namespace:
        for side, kubectl in kubectls.items():
            kubectl.apply([_deployment(namespace)])
            table = kubectl("get", "machinedeployments", "-n", namespace)
            assert table.returncode == 0, table.stderr
            wide = kubectl("get", "md", "-n", namespace, "-o", "wide")
            assert wide.returncode == 0, wide.stderr
            seen[side] = {
                "header": _header(table.stdout),
                "wide": _header(wide.stdout),
                "row": _row(table.stdout),
            }

        scaled = kubectls["peer"]("scale", "machinedeployment", "workers", "-n", namespace, "--replicas=3")
        assert scaled.returncode == 0, scaled.stderr
        replicas = kubectls["peer"](
            "get", "md", "workers", "-n", namespace, "-o", "jsonpath={.spec.replicas}"
        )
        assert replicas.stdout == "3"

        # capa serve runs Cluster API's admission for its own core kinds: a template the selector does
        # not match is refused, naming the field.
        bad = _deployment(namespace)
        bad["metadata"]["name"] = "bad"
        bad["spec"]["template"]["metadata"]["labels"] = {"pool": "other"}
        refused = kubectls["capa"]("create", "-f", "-", stdin=__import__("json").dumps(bad))
        assert refused.returncode != 0
        assert "spec.template.metadata.labels" in refused.stderr, refused.stderr

    assert (
        seen["capa"]["header"]
        == seen["peer"]["header"]
        == [
            "NAME",
            "CLUSTER",
            "REPLICAS",
            "READY",
            "UPDATED",
            "UNAVAILABLE",
            "PHASE",
            "AGE",
            "VERSION",
        ]
    )
    assert seen["capa"]["wide"] == seen["peer"]["wide"]
    assert "DESIRED" in seen["peer"]["wide"]
    for side in ("capa", "peer"):
        row = seen[side]["row"]
        assert (row[0], row[1], row[-1]) == ("workers", "c1", "v1.30.1"), (side, row)


def test_capa_serve_defaults_a_machine_set_before_judging_it(server: Server) -> None:
    """A MachineSet without a selector is defaulted (its own name selects its Machines) and then admitted,
    as Cluster API's defaulting webhook runs before its validating one (refused as an empty selector
    before)."""
    body = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineSet",
        "metadata": {"name": "extra", "namespace": "default"},
        "spec": {"clusterName": "c1", "template": _deployment("default")["spec"]["template"]},
    }
    del body["spec"]["template"]["metadata"]
    status, created = server.http(
        "POST", "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/machinesets", body
    )
    assert status == 201, created
    assert created["spec"]["selector"]["matchLabels"] == {
        "cluster.x-k8s.io/set-name": "extra",
        "cluster.x-k8s.io/cluster-name": "c1",
    }
    assert created["spec"]["replicas"] == 1
    assert created["spec"]["deletePolicy"] == "Random"

    body["metadata"]["name"] = "mismatched"
    body["spec"]["selector"] = {"matchLabels": {"pool": "a"}}
    status, refused = server.http(
        "POST", "/apis/cluster.x-k8s.io/v1beta1/namespaces/default/machinesets", body
    )
    assert status == 422, refused
    assert [c["field"] for c in refused["details"]["causes"]] == ["spec.template.metadata.labels"]
