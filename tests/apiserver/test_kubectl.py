"""kubectl against ``capa serve``, started as the CLI starts it, with the kubeconfig it writes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.apiserver.apiserver_support import EXAMPLE, ROOT

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")


class Kubectl:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "KUBECONFIG": str(kubeconfig),
        }

    def run(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["kubectl", *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stdout}\n{done.stderr}"
        return done

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["kubectl", *args], env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    """``capa serve --port 0 --write-kubeconfig`` in a subprocess, stopped with SIGTERM after the test."""
    kubeconfig = tmp_path / "kube" / "config"
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "capa_app.cli",
            "--state",
            str(tmp_path / "state.db"),
            "serve",
            "--port",
            "0",
            "--write-kubeconfig",
            str(kubeconfig),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert " on https://127.0.0.1:" in first, f"capa serve printed {first!r}"
        url = first.rsplit(" on ", 1)[1].strip()
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == url
        yield Kubectl(kubeconfig, tmp_path)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
            raise
    errors = server.stderr.read() if server.stderr else ""
    for stream in (server.stdout, server.stderr):
        if stream is not None:
            stream.close()
    assert code == 0, errors


def test_kubectl_apply_get_label_patch_delete(kubectl: Kubectl) -> None:
    applied = kubectl.run("apply", "-f", str(EXAMPLE))
    assert "awscluster.infrastructure.cluster.x-k8s.io/demo created" in applied.stdout
    again = kubectl.run("apply", "-f", str(EXAMPLE))
    assert "cluster.cluster.x-k8s.io/demo unchanged" in again.stdout
    # Re-applying the same manifest changes nothing stored (kubectl may still send a patch).
    assert (
        json.loads(kubectl.run("get", "awscluster", "demo", "-o", "json").stdout)["metadata"]["generation"]
        == 1
    )

    # The AWSCluster CRD's printer columns, CAPA's (ENDPOINT only with -o wide), under CAPA's short name.
    table = kubectl.run("get", "awsc").stdout.splitlines()
    assert table[0].split() == ["NAME", "CLUSTER", "READY", "VPC", "BASTION", "IP"]
    assert table[1].split()[:2] == ["demo", "false"]  # no cluster-name label: CLUSTER is empty
    assert kubectl.run("get", "awsclusters", "-o", "wide").stdout.split()[:7] == [
        "NAME",
        "CLUSTER",
        "READY",
        "VPC",
        "ENDPOINT",
        "BASTION",
        "IP",
    ]

    listed = json.loads(kubectl.run("get", "awsclusters", "-o", "json").stdout)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["demo"]
    assert listed["items"][0]["spec"]["region"] == "us-east-1"

    kubectl.run("label", "awscluster", "demo", "team=red")
    kubectl.run(
        "patch", "awscluster", "demo", "--type", "merge", "-p", '{"spec":{"additionalTags":{"owner":"me"}}}'
    )
    patched = json.loads(kubectl.run("get", "awscluster", "demo", "-o", "json").stdout)
    assert patched["metadata"]["labels"] == {"team": "red"}
    assert patched["spec"]["additionalTags"]["owner"] == "me"
    assert kubectl.run("get", "awsclusters", "-l", "team=blue", "-o", "name").stdout == ""

    refused = kubectl.run(
        "patch", "awscluster", "demo", "--type", "merge", "-p", '{"spec":{"region":"us-west-2"}}', check=False
    )
    assert refused.returncode != 0
    assert "spec.region" in refused.stderr

    described = kubectl.run("describe", "awscluster", "demo").stdout
    assert "Name:         demo" in described
    assert "team=red" in described
    everywhere = kubectl.run("get", "awsclusters", "-A").stdout.splitlines()
    assert everywhere[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert everywhere[1].split()[:2] == ["default", "demo"]

    kubectl.run("delete", "-f", str(EXAMPLE), "--wait", "--timeout", "60s")
    assert kubectl.run("get", "awsclusters,clusters,secrets", "-o", "name").stdout == ""


def test_kubectl_wait_for_a_condition_set_through_the_status_subresource(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", str(EXAMPLE))
    waiter = kubectl.popen("wait", "--for=condition=Ready", "awscluster/demo", "--timeout=60s")
    try:
        status = {
            "status": {
                "ready": True,
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ],
            }
        }
        kubectl.run(
            "patch", "awscluster", "demo", "--subresource=status", "--type", "merge", "-p", json.dumps(status)
        )
        out, err = waiter.communicate(timeout=90)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 0, err
    assert "condition met" in out
    assert kubectl.run("get", "awscluster", "demo").stdout.splitlines()[1].split()[:2] == ["demo", "true"]

    kubectl.run("delete", "awscluster", "demo", "--cascade=foreground", "--wait", "--timeout", "60s")
    assert kubectl.run("get", "awsclusters", "-o", "name").stdout == ""


def test_kubectl_namespaces(kubectl: Kubectl) -> None:
    system = [
        "namespace/default",
        "namespace/kube-node-lease",
        "namespace/kube-public",
        "namespace/kube-system",
    ]
    assert kubectl.run("get", "namespaces", "-o", "name").stdout.split() == system
    kubectl.run("create", "namespace", "team-a")
    assert kubectl.run("get", "namespaces", "-o", "name").stdout.split() == [*system, "namespace/team-a"]
    table = kubectl.run("get", "ns").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "AGE"]
    assert table[1].split()[:2] == ["default", "Active"]
    kubectl.run("delete", "namespace", "team-a")
    assert kubectl.run("get", "namespaces", "-o", "name").stdout.split() == system


def test_serve_refuses_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "capa_app.cli",
                "--state",
                str(tmp_path / "s.db"),
                "serve",
                "--port",
                str(port),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


def test_kubectl_get_watch_sees_a_change(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", str(EXAMPLE))
    watcher = kubectl.popen("get", "awscluster", "demo", "-w", "--request-timeout", "60s")
    try:
        assert watcher.stdout is not None
        header = watcher.stdout.readline()
        initial = watcher.stdout.readline()
        assert header.split()[:2] == ["NAME", "CLUSTER"]
        assert initial.split()[0] == "demo"
        # The watch is open once the current state is printed; a change made now must arrive.
        deadline = time.monotonic() + 60
        kubectl.run("label", "awscluster", "demo", "seen=yes")
        changed = watcher.stdout.readline()
        assert time.monotonic() < deadline
        assert changed.split()[0] == "demo"
    finally:
        watcher.terminate()
        watcher.communicate(timeout=30)


def test_kubectl_delete_cascades_to_dependents_unless_orphaned(kubectl: Kubectl, tmp_path: Path) -> None:
    """Objects whose ownerReferences name a deleted owner go with it (background, kubectl's default);
    ``--cascade=orphan`` keeps them and drops the reference."""
    for owner in ("kept", "gone"):
        kubectl.run("create", "configmap", f"owner-{owner}", "--from-literal=k=v")
        uid = kubectl.run("get", "configmap", f"owner-{owner}", "-o", "jsonpath={.metadata.uid}").stdout
        dependent = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"dependent-of-{owner}",
                "namespace": "default",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": f"owner-{owner}", "uid": uid}
                ],
            },
            "stringData": {"k": "v"},
        }
        path = tmp_path / f"dependent-{owner}.yaml"
        path.write_text(yaml.safe_dump(dependent))
        kubectl.run("apply", "-f", str(path))

    kubectl.run("delete", "configmap", "owner-gone", "--wait", "--timeout", "60s")
    kubectl.run("delete", "configmap", "owner-kept", "--cascade=orphan", "--wait", "--timeout", "60s")

    remaining = kubectl.run("get", "secrets", "-o", "json").stdout
    names = {item["metadata"]["name"]: item for item in json.loads(remaining)["items"]}
    assert "dependent-of-gone" not in names, "the dependent of a deleted owner was not deleted"
    assert "dependent-of-kept" in names, "--cascade=orphan deleted the dependent"
    assert not names["dependent-of-kept"]["metadata"].get("ownerReferences"), "an orphan keeps no reference"
