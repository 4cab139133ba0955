"""The upstream peers themselves: the control plane starts, authenticates admins and ServiceAccounts,
authorizes with RBAC, collects garbage, audits requests, and its etcd can be compacted; ``python -m
tests.peers cluster`` (``make peer-cluster``) writes a kubeconfig and cleans up on SIGTERM."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.peers.build import required_version
from tests.peers.cluster import PeerCluster, running
from tests.peers.fixtures import require_go
from tests.support.eventually import eventually

ROOT = Path(__file__).resolve().parents[2]


def api_for(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def status_of(call: Callable[[], object]) -> int:
    """The HTTP status a client call ends with (200 when it succeeds)."""
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


def wait_for_status(call: Callable[[], object], wanted: int, what: str, timeout: float = 60.0) -> None:
    def status() -> int:
        found = status_of(call)
        assert found == wanted, f"still {found}"
        return found

    eventually(status, what, timeout=timeout, interval=0.2)


def test_the_api_server_reports_the_kubernetes_release_it_is_built_from(peer_cluster: PeerCluster) -> None:
    """Built without the release's linker flags, kube-apiserver said ``v0.0.0-master+$Format:%H$`` here, and
    clients that check the server's version (Cluster API's manager) refused to start."""
    version = client.VersionApi(api_for(peer_cluster.admin_kubeconfig)).get_code()
    expected = required_version(ROOT / "tests" / "peers", "k8s.io/kubernetes")
    assert version.git_version == expected
    assert (version.major, version.minor) == tuple(expected.lstrip("v").split(".")[:2])


def test_admin_sees_the_system_namespaces(peer_cluster: PeerCluster) -> None:
    with api_for(peer_cluster.admin_kubeconfig) as api:
        names = {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}
    assert {"default", "kube-system", "kube-public"} <= names


def test_a_service_account_is_authenticated_and_authorized_by_rbac(
    peer_cluster: PeerCluster, tmp_path: Path
) -> None:
    path = peer_cluster.service_account_kubeconfig(tmp_path / "sa.kubeconfig", "peer-rbac", "reader")
    with api_for(path) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        assert review.status.user_info.username == "system:serviceaccount:peer-rbac:reader"
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(api).list_namespaced_config_map("peer-rbac")
        assert refused.value.status == 403
    with api_for(peer_cluster.admin_kubeconfig) as admin:
        rbac = client.RbacAuthorizationV1Api(admin)
        rbac.create_namespaced_role(
            "peer-rbac",
            {
                "metadata": {"name": "read-configmaps"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            "peer-rbac",
            {
                "metadata": {"name": "reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "read-configmaps",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "peer-rbac"}],
            },
        )
    with api_for(path) as api:
        core = client.CoreV1Api(api)
        wait_for_status(lambda: core.list_namespaced_config_map("peer-rbac"), 200, "the RoleBinding")


def test_the_controller_manager_collects_garbage(peer_cluster: PeerCluster) -> None:
    with api_for(peer_cluster.admin_kubeconfig) as api:
        core = client.CoreV1Api(api)
        owner = core.create_namespaced_config_map("default", {"metadata": {"name": "gc-owner"}})
        reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gc-owner", "uid": owner.metadata.uid}
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "gc-dependent", "ownerReferences": [reference]}}
        )
        core.delete_namespaced_config_map("gc-owner", "default")
        wait_for_status(
            lambda: core.read_namespaced_config_map("gc-dependent", "default"), 404, "the dependent"
        )


def test_requests_are_audited(peer_cluster: PeerCluster) -> None:
    with api_for(peer_cluster.admin_kubeconfig) as api:
        client.CoreV1Api(api).create_namespaced_config_map("default", {"metadata": {"name": "audited"}})
    found = eventually(
        lambda: [
            e
            for e in peer_cluster.audit_events()
            if e.get("verb") == "create" and (e.get("objectRef") or {}).get("name") == "audited"
        ],
        "an audit event for the create",
        timeout=10,
        interval=0.1,
    )
    assert found[0]["user"]["username"] == "capa-peers-admin"
    assert found[0]["responseStatus"]["code"] == 201


def test_a_watch_from_a_compacted_resource_version_is_gone(tmp_path: Path) -> None:
    """Without the watch cache, watches read etcd itself: once etcd is compacted, a watch from an older
    resourceVersion ends with a 410 Expired error event. (With the cache, the server answers from memory
    until its window moves on.)"""
    require_go()
    with (
        running(
            directory=tmp_path / "cluster",
            controller_manager=False,
            extra_apiserver_args=("--watch-cache=false",),
        ) as cluster,
        api_for(cluster.admin_kubeconfig) as api,
    ):
        core = client.CoreV1Api(api)
        first = core.create_namespaced_config_map("default", {"metadata": {"name": "compacted"}})
        old = first.metadata.resource_version
        for i in range(3):
            core.patch_namespaced_config_map("compacted", "default", {"data": {"n": str(i)}})
        stream = watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=5
        )
        assert [e["type"] for e in stream] == ["MODIFIED"] * 3
        revision = cluster.compact_etcd()
        assert revision >= int(old) + 3
        # The official client turns the ERROR event into an exception.
        with pytest.raises(ApiException) as gone:
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=5
                )
            )
    assert gone.value.status == 410
    assert "Expired" in str(gone.value.reason)


def test_peer_cluster_command_writes_a_kubeconfig_and_cleans_up(tmp_path: Path) -> None:
    require_go()
    out = tmp_path / "kubeconfig"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.peers",
            "cluster",
            "--kubeconfig-out",
            str(out),
            "--no-controller-manager",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "admin kubeconfig written" in line, line + (process.stderr.read() if process.stderr else "")
        document = yaml.safe_load(out.read_text())
        server = document["clusters"][0]["cluster"]["server"]
        assert server.startswith("https://127.0.0.1:")
        with api_for(out) as api:
            version = client.VersionApi(api).get_code()
        assert version.major == "1"
        data_dir = Path(line.rsplit("data in ", 1)[1].strip())
        assert data_dir.is_dir()
        process.send_signal(signal.SIGTERM)
        out_text, err_text = process.communicate(timeout=60)
        assert process.returncode == 0, err_text
        assert "data directory removed" in out_text
        assert not data_dir.exists()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(server + "/readyz", context=ssl._create_unverified_context(), timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _parent(args: list[str]) -> subprocess.Popen[str]:
    """A process of its own that starts a control plane from the repository (its stdout piped), to be
    killed outright by the test."""
    return subprocess.Popen(
        args,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_peer_cluster_command_stops_when_its_parent_is_killed(tmp_path: Path) -> None:
    """``make peer-cluster &`` then ``kill %1`` signals make only: the command must notice its parent went
    and stop the control plane. Failed before: the three components ran on, orphaned."""
    require_go()
    out = tmp_path / "kubeconfig"
    command = (
        f"{sys.executable} -m tests.peers cluster --kubeconfig-out {out} --no-controller-manager; exit $?"
    )
    parent = _parent(["sh", "-c", command])
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert "data in " in line, line
        data_dir = Path(line.rsplit("data in ", 1)[1].strip())
        server = yaml.safe_load(out.read_text())["clusters"][0]["cluster"]["server"]
        parent.kill()  # SIGKILL: the shell cannot pass anything on
        parent.wait(timeout=10)
        eventually(
            lambda: not data_dir.exists(), "the control plane ends with its parent", timeout=60, interval=0.2
        )
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(server + "/readyz", context=ssl._create_unverified_context(), timeout=5)
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate()


def test_components_started_by_a_test_process_stop_when_it_is_killed(tmp_path: Path) -> None:
    """A test process killed outright (pytest under a CI timeout, Ctrl-C twice) takes its control plane with
    it. Failed before: every component got SIGTERM at once, and the kube-apiserver, whose etcd was already
    gone, stayed in its graceful shutdown, orphaned."""
    require_go()
    directory = tmp_path / "control-plane"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tests.peers.cluster import start\n"
        f"cluster = start(directory=Path({str(directory)!r}), controller_manager=False)\n"
        "print(cluster.url, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = _parent([sys.executable, "-c", script])
    try:
        assert parent.stdout is not None
        server = parent.stdout.readline().strip()
        assert server.startswith("https://127.0.0.1:"), server
        parent.kill()
        parent.wait(timeout=10)
        eventually(
            lambda: not _answers(server),
            "the kube-apiserver ends with the test process",
            timeout=30,
            interval=0.2,
        )
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.communicate()


def _answers(server: str) -> bool:
    try:
        with urllib.request.urlopen(server + "/readyz", context=ssl._create_unverified_context(), timeout=5):
            return True
    except urllib.error.HTTPError as exc:
        exc.close()
        return True
    except (urllib.error.URLError, OSError):
        return False
