"""Upstream Cluster API core (the manager) and clusterctl, built from the Go module in ``capi/``.

:func:`running` starts a control plane of its own and :func:`start_core` on it: Cluster API's CRDs and
webhook configurations from the pinned module, rewritten to reach the manager on loopback by URL with a CA
generated here, then the manager, until its webhooks answer (see ``docs/real-kubernetes.md``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.peers.build import cached_build, find_go, go_env, required_version
from tests.peers.cluster import Authority, PeerCluster, _spawn, _terminate, _wait, free_port
from tests.peers.cluster import running as peer_cluster_running
from tests.support.eventually import eventually

MODULE = Path(__file__).parent / "capi"  # the Go module that pins Cluster API
MANAGER_PACKAGE = "sigs.k8s.io/cluster-api"
CLUSTERCTL_PACKAGE = "sigs.k8s.io/cluster-api/cmd/clusterctl"


@dataclass(frozen=True)
class CapiBinaries:
    manager: Path
    clusterctl: Path


def build(log: Callable[[str], None] | None = None) -> CapiBinaries:
    """The Cluster API manager and clusterctl, built first if the cache lacks them. Raises GoMissing
    without Go, RuntimeError (with Go's output) when a build fails."""
    say = log or (lambda message: print(message, file=sys.stderr))
    go = find_go()
    # Stamp the release into both, as Cluster API's release builds do (``clusterctl version`` shows it; the
    # manager logs it).
    version = required_version(MODULE, MANAGER_PACKAGE)
    major, minor = version.lstrip("v").split(".")[:2]
    ldflags = " ".join(
        f"-X sigs.k8s.io/cluster-api/version.{name}={value}"
        for name, value in (("gitVersion", version), ("gitMajor", major), ("gitMinor", minor))
    )

    def one(name: str, package: str) -> Path:
        return cached_build(
            go,
            MODULE,
            package,
            name,
            lambda: say(f"building {name} (Cluster API)"),
            lambda seconds: say(f"built {name} in {seconds:.0f} s"),
            ldflags=ldflags,
        )

    return CapiBinaries(
        manager=one("cluster-api-manager", MANAGER_PACKAGE), clusterctl=one("clusterctl", CLUSTERCTL_PACKAGE)
    )


def module_dir(go: Path | None = None) -> Path:
    """Where Go keeps the pinned ``sigs.k8s.io/cluster-api`` module's files (downloaded first if missing):
    its CRDs (``config/crd/bases``) and webhook configurations (``config/webhook/manifests.yaml``)."""
    go = go or find_go()
    out = subprocess.run(
        [str(go), "mod", "download", "-json", MANAGER_PACKAGE],
        cwd=MODULE,
        env=go_env(go),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(out.stdout)["Dir"])


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def crds(module: Path, webhook_url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Every CRD the manager serves and watches (``config/crd/bases``, the set its kustomization installs),
    converted by the manager's webhook at ``webhook_url``/convert, as the kustomization's patches set them
    up with a Service (a URL instead: the API server reaches the manager on loopback)."""
    converted = []
    for path in sorted((module / "config" / "crd" / "bases").glob("*.yaml")):
        for crd in _documents(path):
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {
                        "url": f"{webhook_url}/convert",
                        "caBundle": base64.b64encode(ca_bundle).decode(),
                    },
                },
            }
            converted.append(crd)
    return converted


def webhook_configurations(module: Path, webhook_url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The manager's validating and mutating webhook configurations (``config/webhook/manifests.yaml``)
    with each Service reference replaced by the URL of the same path on the manager's webhook server."""
    configurations = _documents(module / "config" / "webhook" / "manifests.yaml")
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            service = webhook["clientConfig"].pop("service")
            webhook["clientConfig"] = {
                "url": webhook_url + service["path"],
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
    return configurations


@dataclass
class CapiCore:
    """The Cluster API manager running against ``cluster``, with clusterctl beside it."""

    cluster: PeerCluster
    directory: Path
    binaries: CapiBinaries
    module: Path
    log: Path
    webhook_url: str
    health_url: str
    process: subprocess.Popen[bytes] | None = None

    def log_tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def clusterctl(
        self, *args: str, kubeconfig: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """``clusterctl ARGS --kubeconfig ADMIN`` (without the flag when ``kubeconfig`` is false: ``version``
        has none), with its configuration and cache in this peer's directory and its check for a newer release
        off (no internet here)."""
        home = self.directory / "clusterctl-home"
        home.mkdir(exist_ok=True)
        env = {
            **os.environ,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "CLUSTERCTL_DISABLE_VERSIONCHECK": "true",
        }
        return subprocess.run(
            [
                str(self.binaries.clusterctl),
                *args,
                *(["--kubeconfig", str(self.cluster.admin_kubeconfig)] if kubeconfig else []),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def stop(self) -> None:
        if self.process is not None:
            _terminate(self.process)
            self.process = None


def _create(cluster: PeerCluster, path: str, body: dict[str, Any]) -> None:
    cluster.request(path, "POST", body)


def _established(cluster: PeerCluster, names: list[str]) -> bool:
    for name in names:
        crd = cluster.request(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
        if conditions.get("Established") != "True":
            return False
    return True


def _webhooks_answer(cluster: PeerCluster) -> bool:
    """A dry-run create of a Cluster passes the manager's mutating and validating webhooks."""
    try:
        cluster.request(
            "/apis/cluster.x-k8s.io/v1beta2/namespaces/default/clusters?dryRun=All",
            "POST",
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Cluster",
                "metadata": {"name": "readiness-probe"},
                # The validating webhook wants one of controlPlaneRef, infrastructureRef or topology; a dry
                # run never looks the reference up.
                "spec": {
                    "infrastructureRef": {
                        "apiGroup": "infrastructure.cluster.x-k8s.io",
                        "kind": "ReadinessProbeCluster",
                        "name": "readiness-probe",
                    }
                },
            },
        )
    except urllib.error.HTTPError as exc:
        exc.close()
        return False
    return True


def start_core(cluster: PeerCluster, directory: Path, binaries: CapiBinaries | None = None) -> CapiCore:
    """Install Cluster API's CRDs and webhook configurations on ``cluster`` and start the manager against
    it; returns once its webhooks answer. The manager is stopped by :meth:`CapiCore.stop`."""
    binaries = binaries or build()
    module = module_dir()
    directory.mkdir(parents=True, exist_ok=True)
    certs = directory / "webhook-certs"
    certs.mkdir(exist_ok=True)
    authority = Authority.create("capi-webhook-ca")
    serving, serving_key = authority.issue("cluster-api-webhook", hosts=("localhost",), ips=("127.0.0.1",))
    (certs / "tls.crt").write_bytes(serving)
    (certs / "tls.key").write_bytes(serving_key)
    webhook_port = free_port()
    health_port = free_port()
    core = CapiCore(
        cluster=cluster,
        directory=directory,
        binaries=binaries,
        module=module,
        log=directory / "cluster-api-manager.log",
        webhook_url=f"https://127.0.0.1:{webhook_port}",
        health_url=f"http://127.0.0.1:{health_port}",
    )
    definitions = crds(module, core.webhook_url, authority.pem)
    for crd in definitions:
        _create(cluster, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    for configuration in webhook_configurations(module, core.webhook_url, authority.pem):
        plural = configuration["kind"].lower() + "s"
        _create(cluster, f"/apis/admissionregistration.k8s.io/v1/{plural}", configuration)
    names = [crd["metadata"]["name"] for crd in definitions]
    # The manager's REST mapper must find every kind at start.
    eventually(
        lambda: _established(cluster, names),
        f"Cluster API's CRDs established: {names}",
        timeout=60,
        interval=0.2,
    )
    args = [
        # The admin kubeconfig (system:masters): a test peer, so the manager gets every permission rather than
        # the ClusterRole its release manifests bind.
        f"--kubeconfig={cluster.admin_kubeconfig}",
        "--leader-elect=false",
        # The webhook server listens on every interface: no flag sets its host.
        f"--webhook-port={webhook_port}",
        f"--webhook-cert-dir={certs}",
        f"--health-addr=127.0.0.1:{health_port}",
        "--diagnostics-address=0",  # metrics and diagnostics off
        # Only what a MachineDeployment needs: MachinePool (on by default) and ClusterTopology off.
        "--feature-gates=MachinePool=false,ClusterTopology=false,RuntimeSDK=false",
    ]
    try:
        core.process = _spawn(binaries.manager, args, core.log)

        def ready() -> bool:
            with urllib.request.urlopen(core.health_url + "/readyz", timeout=5) as response:
                if response.status != 200:
                    return False
            return _webhooks_answer(cluster)

        _wait("cluster-api-manager", ready, core.process, core.log)
    except BaseException:
        core.stop()
        raise
    return core


@contextlib.contextmanager
def running(directory: Path) -> Iterator[CapiCore]:
    """A control plane of its own (etcd, kube-apiserver, kube-controller-manager for garbage collection)
    with Cluster API core on it, both stopped at the end."""
    binaries = build()
    with peer_cluster_running(directory=directory / "control-plane") as cluster:
        core = start_core(cluster, directory / "cluster-api", binaries)
        try:
            yield core
        finally:
            core.stop()
