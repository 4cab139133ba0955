"""clusterctl (v1.13.6, built from ``tests/peers/capi``) pointed at capa-py, and what it needs around it.

* :class:`Clusterctl` — the binary with a HOME and a configuration file of its own (``--config``), the
  provider repository ``capa manifests repository`` wrote registered there as ``capa-py``;
* :func:`install_inventory` — what ``clusterctl init`` would leave on a management cluster, written by hand
  (``init`` needs GitHub and cert-manager's pods, neither available here): clusterctl's inventory CRD
  (``providers.clusterctl.cluster.x-k8s.io``, from the module's ``cmd/clusterctl/config/manifest``), the
  labels ``init`` puts on every component (``clusterctl.cluster.x-k8s.io: ""`` and
  ``cluster.x-k8s.io/provider: <type prefix>-<name>``) on core's and capa-py's CRDs, and one ``Provider``
  object per provider. ``clusterctl move`` finds the kinds it moves from CRDs carrying the first label, and
  refuses a target whose inventory lacks a provider of the source's.
* :func:`management_cluster` — a control plane with Cluster API core, capa-py's infrastructure CRDs and that
  inventory; :func:`workload_cluster` — a bare control plane standing in for the workload cluster (its Nodes
  are created through the API: there is no kubelet).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from capa_py.api.meta import KubeObject
from capa_py.manifests.crds import crd_for, crd_name
from capa_py.manifests.rbac import NAMESPACE as CAPA_NAMESPACE
from capa_py.manifests.repository import (
    PROVIDER_DIRECTORY,
    PROVIDER_NAME,
    infrastructure_kinds,
    write_repository,
)
from tests.e2e.test_controller_mode import Background
from tests.peers import clusterapi
from tests.peers.cluster import PeerCluster
from tests.peers.cluster import running as control_plane
from tests.peers.clusterapi import CapiCore
from tests.realkube.realkube_support import Kubectl
from tests.support.eventually import eventually

T = TypeVar("T")

CLUSTERCTL_LABEL = "clusterctl.cluster.x-k8s.io"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
INVENTORY_LABEL = "clusterctl.cluster.x-k8s.io/core"
CORE_PROVIDER = "cluster-api"
CORE_NAMESPACE = "capi-system"
CAPA_PROVIDER = PROVIDER_DIRECTORY  # "infrastructure-capa-py": clusterctl's label for the provider
CAPA_VERSION = "v0.1.0"
INVENTORY = "/apis/clusterctl.cluster.x-k8s.io/v1alpha3"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass
class Clusterctl:
    """``clusterctl`` with its own HOME and ``--config FILE`` naming capa-py's local repository."""

    binary: Path
    home: Path
    config: Path

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 180.0
    ) -> subprocess.CompletedProcess[str]:
        self.home.mkdir(parents=True, exist_ok=True)
        environment = {
            k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CLUSTERCTL_", "KUBECONFIG"))
        }
        environment.update(
            {
                "HOME": str(self.home),
                "XDG_CONFIG_HOME": str(self.home / ".config"),
                "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",  # no internet to ask GitHub for a newer release
                **(env or {}),
            }
        )
        return subprocess.run(
            [str(self.binary), *args, "--config", str(self.config)],
            capture_output=True,
            text=True,
            env=environment,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, env: dict[str, str] | None = None, timeout: float = 180.0) -> str:
        """``run(...)``'s standard output; fails with both outputs unless clusterctl exited 0."""
        done = self.run(*args, env=env, timeout=timeout)
        assert done.returncode == 0, (
            f"$ clusterctl {' '.join(args)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
        return done.stdout


def repository_config(path: Path, repository: Path, version: str = CAPA_VERSION, **extra: Any) -> Path:
    """A clusterctl configuration file registering capa-py's local repository (``file://`` URL of the
    components of ``version``, as clusterctl's docs lay a local repository out), plus ``extra`` keys."""
    components = repository / PROVIDER_DIRECTORY / version / "infrastructure-components.yaml"
    providers = [{"name": PROVIDER_NAME, "url": components.as_uri(), "type": "InfrastructureProvider"}]
    path.write_text(yaml.safe_dump({"providers": providers, **extra}, sort_keys=False))
    return path


def clusterctl(directory: Path, version: str = CAPA_VERSION) -> Clusterctl:
    """clusterctl with capa-py's repository (release ``version``) written under ``directory``."""
    binaries = clusterapi.build()
    repository = directory / "repository"
    write_repository(repository, version)
    config = repository_config(directory / "clusterctl.yaml", repository, version)
    return Clusterctl(binaries.clusterctl, directory / "clusterctl-home", config)


def with_local_core(tool: Clusterctl, core: CapiCore, directory: Path) -> Clusterctl:
    """``tool`` with Cluster API core's provider read from a local repository (its ``metadata.yaml`` from
    the module, an empty components file) instead of GitHub: what commands that read the core provider's
    metadata need here (``upgrade plan``)."""
    version = clusterapi.required_version(clusterapi.MODULE, clusterapi.MANAGER_PACKAGE)
    release = directory / "core-repository" / CORE_PROVIDER / version
    release.mkdir(parents=True, exist_ok=True)
    (release / "metadata.yaml").write_text((core.module / "metadata.yaml").read_text())
    (release / "core-components.yaml").write_text("")
    config = yaml.safe_load(tool.config.read_text())
    core_entry = {
        "name": CORE_PROVIDER,
        "url": (release / "core-components.yaml").as_uri(),
        "type": "CoreProvider",
    }
    config["providers"] = [*config["providers"], core_entry]
    path = directory / "clusterctl-local-core.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return Clusterctl(tool.binary, tool.home, path)


def labelled(obj: dict[str, Any], provider: str) -> dict[str, Any]:
    """``obj`` with the labels ``clusterctl init`` adds to every component of ``provider``."""
    obj["metadata"].setdefault("labels", {}).update({CLUSTERCTL_LABEL: "", PROVIDER_LABEL: provider})
    return obj


def infrastructure_crds() -> list[dict[str, Any]]:
    """The CRDs capa-py's provider components install (the AWS and Tinkerbell infrastructure kinds and
    Tinkerbell's own, which the controller watches), labelled as clusterctl labels them; never capa-py's
    own Cluster/Machine CRDs: Cluster API core serves those kinds."""
    return [labelled(crd_for(kind), CAPA_PROVIDER) for kind in infrastructure_kinds()]


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 120.0, report: Callable[[], str] = str
) -> T:
    """``probe()``'s first truthy result; fails naming ``what`` (and what ``report()`` says) when none comes
    in time."""
    return cast(T, eventually(probe, what, timeout=timeout, interval=0.5, detail=report))


def object_states(cluster: PeerCluster, namespace: str, resources: Sequence[tuple[str, str]]) -> str:
    """One line per object of each ``(plural, group/version)`` in ``namespace``: its phase, whether it is
    being deleted and its conditions that are not True (for a failure's message)."""
    lines = []
    for plural, group in resources:
        items = cluster.request(f"/apis/{group}/namespaces/{namespace}/{plural}").get("items", [])
        for item in items:
            status = item.get("status", {})
            conditions = [
                f"{c['type']}={c['status']}({c.get('reason', '')}: {c.get('message', '')})"
                for c in (status.get("conditions") or [])
                if c.get("status") != "True"
            ]
            deleting = bool(item["metadata"].get("deletionTimestamp"))
            lines.append(
                f"{plural}/{item['metadata']['name']}: phase={status.get('phase')} "
                f"deleting={deleting} {'; '.join(conditions)[:600]}"
            )
    return "\n".join(lines)


def _established(cluster: PeerCluster, name: str) -> bool:
    crd = cluster.request(f"{CRDS}/{name}")
    return any(
        c["type"] == "Established" and c["status"] == "True"
        for c in crd.get("status", {}).get("conditions", [])
    )


def install_crds(cluster: PeerCluster, kinds: Sequence[type[KubeObject]]) -> None:
    """capa-py's CRD of each kind, created unless it exists already (another module of the session installed
    it), then waited for until every one is established."""
    for kind in kinds:
        try:
            cluster.request(CRDS, "POST", crd_for(kind))
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code != 409:
                raise
    for name in (crd_name(kind) for kind in kinds):
        wait_for(f"CRD {name} established", lambda name=name: _established(cluster, name), timeout=60)


def merge_patch(cluster: PeerCluster, path: str, body: dict[str, Any]) -> Any:
    """A JSON merge patch as the admin."""
    request = urllib.request.Request(cluster.url + path, data=json.dumps(body).encode(), method="PATCH")
    request.add_header("Content-Type", "application/merge-patch+json")
    request.add_header("Accept", "application/json")
    with urllib.request.urlopen(request, context=cluster.admin_context(), timeout=30) as response:
        return json.loads(response.read())


def _merge_labels(cluster: PeerCluster, name: str, labels: dict[str, str]) -> None:
    # A patch: core's manager updates its CRDs (storage version migration) while this runs.
    merge_patch(cluster, f"{CRDS}/{name}", {"metadata": {"labels": labels}})


def provider(name: str, namespace: str, provider_name: str, kind: str, version: str) -> dict[str, Any]:
    """A clusterctl inventory entry (``Provider``, ``clusterctl.cluster.x-k8s.io/v1alpha3``)."""
    return labelled(
        {
            "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
            "kind": "Provider",
            "metadata": {"name": name, "namespace": namespace},
            "providerName": provider_name,
            "type": kind,
            "version": version,
        },
        name,
    )


def install_inventory(core: CapiCore, capa_version: str = CAPA_VERSION) -> None:
    """What ``clusterctl init`` leaves behind for core and capa-py, written by hand (see the module)."""
    cluster = core.cluster
    manifest = core.module / "cmd" / "clusterctl" / "config" / "manifest" / "clusterctl-api.yaml"
    [inventory_crd] = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    inventory_crd["metadata"].setdefault("labels", {})[INVENTORY_LABEL] = "inventory"
    cluster.request(CRDS, "POST", inventory_crd)
    for crd in cluster.request(CRDS)["items"]:
        if crd["spec"]["group"] in (
            "cluster.x-k8s.io",
            "addons.cluster.x-k8s.io",
            "runtime.cluster.x-k8s.io",
        ):
            _merge_labels(
                cluster, crd["metadata"]["name"], {CLUSTERCTL_LABEL: "", PROVIDER_LABEL: CORE_PROVIDER}
            )
    for crd in infrastructure_crds():
        cluster.request(CRDS, "POST", crd)
    for name in [inventory_crd["metadata"]["name"], *(c["metadata"]["name"] for c in infrastructure_crds())]:
        wait_for(f"CRD {name} established", lambda name=name: _established(cluster, name), timeout=60)
    for namespace in (CORE_NAMESPACE, CAPA_NAMESPACE):
        cluster.request("/api/v1/namespaces", "POST", {"metadata": {"name": namespace}})
    core_version = clusterapi.required_version(clusterapi.MODULE, clusterapi.MANAGER_PACKAGE)
    entries = (
        provider(CORE_PROVIDER, CORE_NAMESPACE, CORE_PROVIDER, "CoreProvider", core_version),
        provider(CAPA_PROVIDER, CAPA_NAMESPACE, PROVIDER_NAME, "InfrastructureProvider", capa_version),
    )
    for entry in entries:
        namespace = entry["metadata"]["namespace"]
        cluster.request(f"{INVENTORY}/namespaces/{namespace}/providers", "POST", entry)


@contextlib.contextmanager
def management_cluster(directory: Path) -> Iterator[CapiCore]:
    """A control plane of its own with Cluster API core, capa-py's infrastructure CRDs and clusterctl's
    inventory naming both; stopped at the end."""
    with clusterapi.running(directory) as core:
        install_inventory(core)
        yield core


@contextlib.contextmanager
def workload_cluster(directory: Path) -> Iterator[PeerCluster]:
    """etcd and kube-apiserver only: the workload cluster core connects to through the Cluster's
    ``<name>-kubeconfig`` Secret, where the Machines' Nodes are registered by hand."""
    with control_plane(directory=directory, controller_manager=False) as cluster:
        yield cluster


def absent(cluster: PeerCluster, path: str) -> bool:
    """Whether GET ``path`` answers 404."""
    try:
        cluster.request(path)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 404:
            return True
        raise
    return False


AWS_CLUSTER_SPEC: dict[str, Any] = {
    "region": "us-east-1",
    "network": {
        "vpc": {"cidrBlock": "10.0.0.0/16"},
        "subnets": [
            {"availabilityZone": "us-east-1a", "cidrBlock": "10.0.0.0/20", "isPublic": True},
            {"availabilityZone": "us-east-1a", "cidrBlock": "10.0.64.0/18"},
        ],
    },
    "controlPlaneLoadBalancer": {"scheme": "internet-facing"},
}
"""A small AWSCluster (one zone, a public and a private subnet) for the tests under Cluster API core."""


def kubeconfig_secret(cluster_name: str, namespace: str, workload: PeerCluster) -> dict[str, Any]:
    """The ``<cluster>-kubeconfig`` Secret through which Cluster API core reaches the workload cluster (as a
    control-plane provider writes it): ``workload``'s admin kubeconfig under ``value``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{cluster_name}-kubeconfig",
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster_name},
        },
        "type": "cluster.x-k8s.io/secret",
        "stringData": {"value": workload.admin_kubeconfig.read_text()},
    }


@dataclass
class UnderCore:
    """A run under Cluster API core: its control plane, the workload cluster, kubectl on the management
    cluster, a working directory and capa-py's controller."""

    core: CapiCore
    workload: PeerCluster
    kubectl: Kubectl
    workdir: Path
    controller: Background

    @property
    def cluster(self) -> PeerCluster:
        return self.core.cluster

    def list(self, path: str) -> list[dict[str, Any]]:
        """The items of a list ``path`` on the management cluster."""
        items: list[dict[str, Any]] = self.cluster.request(path).get("items", [])
        return items


def apply_cluster(
    kubectl: Kubectl,
    management: PeerCluster,
    workload: PeerCluster,
    path: Path,
    documents: list[dict[str, Any]],
) -> None:
    """What a user (and a control-plane provider) leaves on the management cluster: ``documents`` written to
    ``path`` and applied with ``kubectl``, and for their Cluster the kubeconfig Secret of ``workload``."""
    path.write_text(yaml.safe_dump_all(documents))
    kubectl.run("apply", "-f", str(path))
    [cluster] = [d for d in documents if d["kind"] == "Cluster"]
    name, namespace = cluster["metadata"]["name"], cluster["metadata"]["namespace"]
    management.request(
        f"/api/v1/namespaces/{namespace}/secrets", "POST", kubeconfig_secret(name, namespace, workload)
    )


NODE_CONDITIONS = [
    {"type": kind, "status": status, "reason": reason, "message": reason}
    for kind, status, reason in (
        ("Ready", "True", "KubeletReady"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
    )
]
"""What a healthy kubelet reports on its Node (core's Machine ``NodeHealthy`` reads them)."""


def register_node(workload: PeerCluster, provider_id: str, name: str | None = None) -> str:
    """The kubelet stand-in: a Node named after the instance, carrying its provider ID (as a kubelet with the
    AWS cloud provider registers it) and a healthy kubelet's conditions, in the workload cluster Cluster API
    core reads through the ``<cluster>-kubeconfig`` Secret. Returns the Node's name."""
    name = name or f"node-{provider_id.rsplit('/', 1)[-1]}"
    workload.request(
        "/api/v1/nodes", "POST", {"metadata": {"name": name}, "spec": {"providerID": provider_id}}
    )
    merge_patch(workload, f"/api/v1/nodes/{name}/status", {"status": {"conditions": NODE_CONDITIONS}})
    return name
