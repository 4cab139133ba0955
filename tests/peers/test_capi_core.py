"""Upstream Cluster API core (v1.13.6, built from ``tests/peers/capi``) on a real kube-apiserver: the
versions its CRDs serve and convert, the objects its controllers write for a MachineDeployment whose
infrastructure is a test-only provider defined here, and clusterctl reading the result.

What core writes, as these tests assert it (an embedded MachineDeployment controller must write the same):

- MachineDeployment: finalizer ``cluster.x-k8s.io/machinedeployment``; label ``cluster.x-k8s.io/cluster-name``
  (also added to ``spec.selector.matchLabels`` and the template's labels by the defaulting webhook); owner
  reference to the Cluster (not controller); annotation ``machinedeployment.clusters.x-k8s.io/revision: "1"``.
- MachineSet ``<md>-<5 random>``: labels cluster-name, ``cluster.x-k8s.io/deployment-name``,
  ``machine-template-hash`` (``<hash>-<the name's suffix>``, also in its selector and template) and the
  template's own labels; annotations ``machinedeployment.clusters.x-k8s.io/{revision,desired-replicas,
  max-replicas}`` and ``cluster.x-k8s.io/disable-machine-create: "false"``; finalizer
  ``cluster.x-k8s.io/machineset``; one owner reference, the MachineDeployment (controller,
  blockOwnerDeletion).
- Machine ``<machineset>-<5 random>``: the MachineSet's labels plus ``cluster.x-k8s.io/set-name``; the
  template's annotations; finalizer ``machine.cluster.x-k8s.io``; owner the MachineSet (controller,
  blockOwnerDeletion); ``spec.infrastructureRef`` names the clone; ``spec.deletion.nodeDeletionTimeoutSeconds:
  10`` defaulted.
- Infrastructure clone, named as its Machine, ``spec`` = the template's ``spec.template.spec``: the Machine's
  labels and annotations plus the template's ``spec.template.metadata`` ones, and annotations
  ``cluster.x-k8s.io/cloned-from-name`` (the template) and ``cluster.x-k8s.io/cloned-from-groupkind``
  (``PeerTestMachineTemplate.<group>``); no finalizer. The MachineSet creates it owned by the MachineSet
  (neither controller nor blockOwnerDeletion); the Machine's controller then replaces that reference with the
  Machine (controller, blockOwnerDeletion).
- The template and the infrastructure cluster get an owner reference to the Cluster (not controller); the
  infrastructure cluster also the cluster-name label.

Phases without a bootstrap provider (only ``bootstrap.dataSecretName``) and without a Node: ``Pending`` (core
never sets ``status.initialization.bootstrapDataSecretCreated`` when there is no ``configRef``, so never
``Provisioning``), ``Provisioned`` once the infrastructure machine has ``spec.providerID`` and
``status.initialization.provisioned``; never ``Running`` (no ``nodeRef``). Scaling down deletes first the
Machines annotated ``cluster.x-k8s.io/delete-machine``, then (all being equally "unhealthy" without a Node) by
name; a deleted Machine's infrastructure clone goes first, then the Machine's finalizer.

Core picks the API version of a provider's kind from its CRD's label ``cluster.x-k8s.io/v1beta2`` (else
``cluster.x-k8s.io/v1beta1``): versions joined by ``_``, the newest is used; v1beta1 readers see references
as ``apiVersion: <group>/<that version>``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import pytest

from tests.clusterapi.clusterctl_support import wait_for as poll
from tests.peers.clusterapi import CapiCore

T = TypeVar("T")

NAMESPACE = "default"
CLUSTER = "capi-peer"
DEPLOYMENT = "workers"
TEMPLATE = "workers-template"
INFRA_GROUP = "infrastructure.peertest.capa-py.io"
CORE = f"/apis/cluster.x-k8s.io/v1beta2/namespaces/{NAMESPACE}"
OLD = f"/apis/cluster.x-k8s.io/v1beta1/namespaces/{NAMESPACE}"
INFRA = f"/apis/{INFRA_GROUP}/v1alpha1/namespaces/{NAMESPACE}"
TIMEOUT = 120.0


def wait_for(core: CapiCore, what: str, probe: Callable[[], T | None], timeout: float = TIMEOUT) -> T:
    """``probe()``'s first truthy result; fails with the manager's log tail when none comes in time."""
    return poll(what, probe, timeout, lambda: f"--- cluster-api-manager log ---\n{core.log_tail()}")


def patch(core: CapiCore, path: str, body: dict[str, Any]) -> Any:
    """A JSON merge patch as the admin."""
    api = core.cluster
    request = urllib.request.Request(api.url + path, data=json.dumps(body).encode(), method="PATCH")
    request.add_header("Content-Type", "application/merge-patch+json")
    request.add_header("Accept", "application/json")
    with urllib.request.urlopen(request, context=api.admin_context(), timeout=30) as response:
        return json.loads(response.read())


def infra_crd(kind: str, plural: str) -> dict[str, Any]:
    """A test-only infrastructure CRD carrying the contract label core reads (``cluster.x-k8s.io/v1beta2``);
    its name is what core derives from the kind (plural.group)."""
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{INFRA_GROUP}", "labels": {"cluster.x-k8s.io/v1beta2": "v1alpha1"}},
        "spec": {
            "group": INFRA_GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": open_object, "status": open_object},
                        }
                    },
                }
            ],
        },
    }


def items(core: CapiCore, path: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = core.cluster.request(path)["items"]
    return found


def live(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if "deletionTimestamp" not in o["metadata"]]


def owner_refs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in ref.items() if k != "uid"} for ref in obj["metadata"].get("ownerReferences", [])
    ]


def machine_owned(core: CapiCore, name: str) -> dict[str, Any] | None:
    """The infrastructure clone ``name`` once a Machine owns it."""
    clone: dict[str, Any] = core.cluster.request(f"{INFRA}/peertestmachines/{name}")
    return clone if clone["metadata"]["ownerReferences"][0]["kind"] == "Machine" else None


def _served(core: CapiCore, path: str) -> bool:
    try:
        core.cluster.request(path)
    except urllib.error.HTTPError as exc:
        exc.close()
        return False
    return True


@pytest.fixture(autouse=True)
def manager_log_on_failure(request: pytest.FixtureRequest, capi_cluster: CapiCore) -> Iterator[None]:
    """When a test here fails, its report shows the tail of the manager's log (captured at teardown)."""
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:
        print(f"--- cluster-api-manager log ({capi_cluster.log}) ---\n{capi_cluster.log_tail()}")


@pytest.fixture(scope="module")
def cluster(capi_cluster: CapiCore) -> dict[str, Any]:
    """The test provider's CRDs, a provisioned PeerTestCluster and a Cluster on it, written at the version
    Cluster API's CRDs store (v1beta2)."""
    api = capi_cluster.cluster
    for kind, plural in (
        ("PeerTestCluster", "peertestclusters"),
        ("PeerTestMachineTemplate", "peertestmachinetemplates"),
        ("PeerTestMachine", "peertestmachines"),
    ):
        api.request(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "POST", infra_crd(kind, plural)
        )
        wait_for(capi_cluster, f"{plural} served", partial(_served, capi_cluster, f"{INFRA}/{plural}"))
    api.request(
        f"{INFRA}/peertestclusters",
        "POST",
        {"apiVersion": f"{INFRA_GROUP}/v1alpha1", "kind": "PeerTestCluster", "metadata": {"name": CLUSTER}},
    )
    patch(
        capi_cluster,
        f"{INFRA}/peertestclusters/{CLUSTER}/status",
        {"status": {"initialization": {"provisioned": True}}},
    )
    created: dict[str, Any] = api.request(
        f"{CORE}/clusters",
        "POST",
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": CLUSTER},
            "spec": {
                "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                "infrastructureRef": {"apiGroup": INFRA_GROUP, "kind": "PeerTestCluster", "name": CLUSTER},
            },
        },
    )
    return created


@pytest.fixture(scope="module")
def deployment(capi_cluster: CapiCore, cluster: dict[str, Any]) -> dict[str, Any]:
    """A MachineDeployment of 2 replicas on a PeerTestMachineTemplate, with a ready-made bootstrap secret."""
    api = capi_cluster.cluster
    api.request(
        f"{INFRA}/peertestmachinetemplates",
        "POST",
        {
            "apiVersion": f"{INFRA_GROUP}/v1alpha1",
            "kind": "PeerTestMachineTemplate",
            "metadata": {"name": TEMPLATE},
            "spec": {
                "template": {
                    "metadata": {"labels": {"from-template": "yes"}, "annotations": {"template-note": "x"}},
                    "spec": {"size": "small"},
                }
            },
        },
    )
    api.request(
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        "POST",
        {"metadata": {"name": "workers-bootstrap"}, "stringData": {"value": "#cloud-config\n"}},
    )
    created: dict[str, Any] = api.request(
        f"{CORE}/machinedeployments",
        "POST",
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineDeployment",
            "metadata": {"name": DEPLOYMENT},
            "spec": {
                "clusterName": CLUSTER,
                "replicas": 2,
                "selector": {"matchLabels": {"pool": DEPLOYMENT}},
                "template": {
                    "metadata": {"labels": {"pool": DEPLOYMENT}, "annotations": {"machine-note": "y"}},
                    "spec": {
                        "clusterName": CLUSTER,
                        "bootstrap": {"dataSecretName": "workers-bootstrap"},
                        "infrastructureRef": {
                            "apiGroup": INFRA_GROUP,
                            "kind": "PeerTestMachineTemplate",
                            "name": TEMPLATE,
                        },
                    },
                },
            },
        },
    )
    return created


def machines(core: CapiCore) -> list[dict[str, Any]]:
    return items(core, f"{CORE}/machines?labelSelector=cluster.x-k8s.io/deployment-name={DEPLOYMENT}")


def replicas(core: CapiCore, count: int) -> list[dict[str, Any]] | None:
    """The Machines once exactly ``count`` exist (none deleting) and as many clones."""
    found = machines(core)
    clones = items(core, f"{INFRA}/peertestmachines")
    if len(found) == count and len(live(found)) == count and len(clones) == count:
        return found
    return None


def test_cluster_api_crds_store_v1beta2_and_serve_deprecated_v1beta1_through_the_manager_s_conversion_webhook(
    capi_cluster: CapiCore, cluster: dict[str, Any]
) -> None:
    api = capi_cluster.cluster
    for name in ("clusters", "machines", "machinesets", "machinedeployments"):
        crd = api.request(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}.cluster.x-k8s.io")
        versions = {
            v["name"]: (v["served"], v["storage"], v.get("deprecated", False))
            for v in crd["spec"]["versions"]
        }
        assert versions == {"v1beta1": (True, False, True), "v1beta2": (True, True, False)}, name
        assert (
            crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"]
            == f"{capi_cluster.webhook_url}/convert"
        )
        assert crd["status"]["storedVersions"] == ["v1beta2"]
    # Read at v1beta1, the Cluster comes from the manager's /convert: the reference is an apiVersion again, at
    # the version the PeerTestCluster CRD's contract label names.
    old = api.request(f"{OLD}/clusters/{CLUSTER}")
    assert old["apiVersion"] == "cluster.x-k8s.io/v1beta1"
    assert old["metadata"]["uid"] == cluster["metadata"]["uid"]
    assert old["spec"]["infrastructureRef"] == {
        "apiVersion": f"{INFRA_GROUP}/v1alpha1",
        "kind": "PeerTestCluster",
        "name": CLUSTER,
        "namespace": NAMESPACE,
    }
    ready = wait_for(
        capi_cluster,
        "status.infrastructureReady at v1beta1",
        lambda: (
            o
            if (o := api.request(f"{OLD}/clusters/{CLUSTER}")).get("status", {}).get("infrastructureReady")
            else None
        ),
    )
    assert ready["status"]["infrastructureReady"] is True
    now = api.request(f"{CORE}/clusters/{CLUSTER}")
    assert now["status"]["initialization"]["infrastructureProvisioned"] is True
    assert now["metadata"]["finalizers"] == ["cluster.cluster.x-k8s.io"]
    infra = api.request(f"{INFRA}/peertestclusters/{CLUSTER}")
    assert infra["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": CLUSTER}
    assert owner_refs(infra) == [
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": CLUSTER}
    ]


def test_the_validating_webhook_wants_an_infrastructure_or_control_plane_reference(
    capi_cluster: CapiCore,
) -> None:
    with pytest.raises(urllib.error.HTTPError) as denied:
        capi_cluster.cluster.request(
            f"{CORE}/clusters",
            "POST",
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Cluster",
                "metadata": {"name": "bare"},
                "spec": {"paused": True},
            },
        )
    assert denied.value.code == 422
    status = json.loads(denied.value.read())
    denied.value.close()
    assert status["message"].startswith(
        'admission webhook "validation.cluster.cluster.x-k8s.io" denied the request'
    )
    assert (
        "one of spec.controlPlaneRef, spec.infrastructureRef or spec.topology must be set"
        in status["message"]
    )


def test_a_machine_deployment_gets_a_machine_set_machines_and_infrastructure_clones(
    capi_cluster: CapiCore, deployment: dict[str, Any]
) -> None:
    api = capi_cluster.cluster
    two = wait_for(capi_cluster, "two Machines and two clones", lambda: replicas(capi_cluster, 2))
    md = api.request(f"{CORE}/machinedeployments/{DEPLOYMENT}")
    assert md["metadata"]["finalizers"] == ["cluster.x-k8s.io/machinedeployment"]
    assert md["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": CLUSTER}
    assert owner_refs(md) == [{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": CLUSTER}]
    assert md["spec"]["selector"]["matchLabels"] == {
        "cluster.x-k8s.io/cluster-name": CLUSTER,
        "pool": DEPLOYMENT,
    }

    (machine_set,) = items(capi_cluster, f"{CORE}/machinesets")
    ms_name = machine_set["metadata"]["name"]
    assert ms_name.startswith(f"{DEPLOYMENT}-")
    assert len(ms_name) == len(DEPLOYMENT) + 6
    template_hash = machine_set["metadata"]["labels"]["machine-template-hash"]
    assert template_hash.endswith("-" + ms_name.rsplit("-", 1)[1])
    assert machine_set["metadata"]["labels"] == {
        "cluster.x-k8s.io/cluster-name": CLUSTER,
        "cluster.x-k8s.io/deployment-name": DEPLOYMENT,
        "machine-template-hash": template_hash,
        "pool": DEPLOYMENT,
    }
    assert machine_set["metadata"]["annotations"] == {
        "cluster.x-k8s.io/disable-machine-create": "false",
        "machinedeployment.clusters.x-k8s.io/desired-replicas": "2",
        "machinedeployment.clusters.x-k8s.io/max-replicas": "3",
        "machinedeployment.clusters.x-k8s.io/revision": "1",
    }
    assert machine_set["metadata"]["finalizers"] == ["cluster.x-k8s.io/machineset"]
    assert owner_refs(machine_set) == [
        {
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "MachineDeployment",
            "name": DEPLOYMENT,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert machine_set["spec"]["selector"]["matchLabels"]["machine-template-hash"] == template_hash

    clones = {c["metadata"]["name"]: c for c in items(capi_cluster, f"{INFRA}/peertestmachines")}
    for machine in two:
        name = machine["metadata"]["name"]
        assert name.startswith(f"{ms_name}-")
        assert len(name) == len(ms_name) + 6
        assert machine["metadata"]["labels"] == {
            **machine_set["metadata"]["labels"],
            "cluster.x-k8s.io/set-name": ms_name,
        }
        assert machine["metadata"]["annotations"] == {"machine-note": "y"}
        assert machine["metadata"]["finalizers"] == ["machine.cluster.x-k8s.io"]
        assert owner_refs(machine) == [
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "MachineSet",
                "name": ms_name,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert machine["spec"]["infrastructureRef"] == {
            "apiGroup": INFRA_GROUP,
            "kind": "PeerTestMachine",
            "name": name,
        }
        assert machine["spec"]["bootstrap"] == {"dataSecretName": "workers-bootstrap"}
        clone = clones[name]
        assert clone["spec"] == {"size": "small"}
        assert clone["metadata"]["labels"] == {**machine["metadata"]["labels"], "from-template": "yes"}
        assert clone["metadata"]["annotations"] == {
            "cluster.x-k8s.io/cloned-from-name": TEMPLATE,
            "cluster.x-k8s.io/cloned-from-groupkind": f"PeerTestMachineTemplate.{INFRA_GROUP}",
            "machine-note": "y",
            "template-note": "x",
        }
        assert "finalizers" not in clone["metadata"]
        # The MachineSet creates the clone owned by itself (not as controller); the Machine's controller
        # then replaces that reference with the Machine, as controller.
        clone = wait_for(
            capi_cluster, f"the Machine owning {name}'s clone", partial(machine_owned, capi_cluster, name)
        )
        assert owner_refs(clone) == [
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Machine",
                "name": name,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    template = api.request(f"{INFRA}/peertestmachinetemplates/{TEMPLATE}")
    assert owner_refs(template) == [
        {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": CLUSTER}
    ]

    # Machines read at v1beta1 through the conversion webhook.
    old = {m["metadata"]["name"]: m for m in items(capi_cluster, f"{OLD}/machines")}
    assert set(old) == set(clones)
    for name, machine in old.items():
        assert machine["apiVersion"] == "cluster.x-k8s.io/v1beta1"
        assert machine["spec"]["infrastructureRef"] == {
            "apiVersion": f"{INFRA_GROUP}/v1alpha1",
            "kind": "PeerTestMachine",
            "name": name,
            "namespace": NAMESPACE,
        }
        assert machine["spec"]["nodeDeletionTimeout"] == "10s"
        assert "cluster.x-k8s.io/conversion-data" in machine["metadata"]["annotations"]
    old_md = api.request(f"{OLD}/machinedeployments/{DEPLOYMENT}")
    assert old_md["spec"]["template"]["spec"]["infrastructureRef"] == {
        "apiVersion": f"{INFRA_GROUP}/v1alpha1",
        "kind": "PeerTestMachineTemplate",
        "name": TEMPLATE,
        "namespace": NAMESPACE,
    }
    # A write at v1beta1 goes through the webhook to the stored v1beta2 object.
    patch(
        capi_cluster,
        f"{OLD}/machinedeployments/{DEPLOYMENT}",
        {"metadata": {"labels": {"written-at": "v1beta1"}}},
    )
    assert (
        api.request(f"{CORE}/machinedeployments/{DEPLOYMENT}")["metadata"]["labels"]["written-at"]
        == "v1beta1"
    )

    # Phases: Pending without a bootstrap provider, Provisioned once the infrastructure is; never Running.
    first = sorted(clones)[0]
    wait_for(
        capi_cluster,
        "both Machines Pending",
        lambda: all(m.get("status", {}).get("phase") == "Pending" for m in machines(capi_cluster)),
    )
    patch(capi_cluster, f"{INFRA}/peertestmachines/{first}", {"spec": {"providerID": f"peertest://{first}"}})
    patch(
        capi_cluster,
        f"{INFRA}/peertestmachines/{first}/status",
        {
            "status": {
                "initialization": {"provisioned": True},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
            }
        },
    )
    provisioned = wait_for(
        capi_cluster,
        "the provisioned Machine",
        lambda: (
            m
            if (m := api.request(f"{CORE}/machines/{first}")).get("status", {}).get("phase") == "Provisioned"
            else None
        ),
    )
    assert provisioned["spec"]["providerID"] == f"peertest://{first}"
    assert provisioned["status"]["initialization"] == {"infrastructureProvisioned": True}
    assert provisioned["status"]["addresses"] == [{"type": "InternalIP", "address": "10.0.0.5"}]
    assert "nodeRef" not in provisioned["status"]


def test_scaling_a_machine_deployment_up_and_down(capi_cluster: CapiCore, deployment: dict[str, Any]) -> None:
    wait_for(capi_cluster, "two Machines", lambda: replicas(capi_cluster, 2))
    patch(capi_cluster, f"{CORE}/machinedeployments/{DEPLOYMENT}", {"spec": {"replicas": 3}})
    three = wait_for(capi_cluster, "three Machines", lambda: replicas(capi_cluster, 3))
    names = sorted(m["metadata"]["name"] for m in three)
    assert len(items(capi_cluster, f"{CORE}/machinesets")) == 1
    # The one marked for deletion goes first, then (none has a Node, so all count as unhealthy) by name.
    patch(
        capi_cluster,
        f"{CORE}/machines/{names[-1]}",
        {"metadata": {"annotations": {"cluster.x-k8s.io/delete-machine": ""}}},
    )
    patch(capi_cluster, f"{CORE}/machinedeployments/{DEPLOYMENT}", {"spec": {"replicas": 1}})
    (survivor,) = wait_for(capi_cluster, "one Machine", lambda: replicas(capi_cluster, 1))
    assert survivor["metadata"]["name"] == names[1]
    (clone,) = items(capi_cluster, f"{INFRA}/peertestmachines")
    assert clone["metadata"]["name"] == names[1]
    (machine_set,) = items(capi_cluster, f"{CORE}/machinesets")
    assert machine_set["spec"]["replicas"] == 1
    assert (
        machine_set["metadata"]["annotations"]["machinedeployment.clusters.x-k8s.io/desired-replicas"] == "1"
    )


def test_clusterctl_describes_the_cluster(capi_cluster: CapiCore, deployment: dict[str, Any]) -> None:
    wait_for(capi_cluster, "Machines", lambda: live(machines(capi_cluster)))
    version = capi_cluster.clusterctl("version", kubeconfig=False)
    assert version.returncode == 0, version.stderr
    assert 'GitVersion:"v1.13.6"' in version.stdout, version.stdout
    described = capi_cluster.clusterctl("describe", "cluster", CLUSTER, "--namespace", NAMESPACE)
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert lines[0].split()[:1] == ["NAME"]
    assert lines[1].startswith(f"Cluster/{CLUSTER}")
    assert any(f"ClusterInfrastructure - PeerTestCluster/{CLUSTER}" in line for line in lines)
    assert any(f"MachineDeployment/{DEPLOYMENT}" in line for line in lines)
    missing = capi_cluster.clusterctl("describe", "cluster", "absent", "--namespace", NAMESPACE)
    assert missing.returncode != 0
