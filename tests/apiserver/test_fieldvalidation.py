"""``fieldValidation`` (Strict, Warn, Ignore, absent) on creates, updates, patches and status writes, judged
by the real API server with capa-py's CRDs installed. Before, ``capa serve`` refused every unknown field
whatever the mode (422), so kopf's status writes (``status.kopf``) and ``kubectl apply --validate=warn``
failed where a real cluster stores the object without the field."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver.apiserver_support import Server, aws_cluster
from tests.apiserver.peer_support import (
    Endpoint,
    Reply,
    capa_endpoint,
    peer_endpoint,
    scratch_namespace,
)
from tests.peers.cluster import PeerCluster
from tests.peers.crds import install_capa_crds

AWSCLUSTERS = "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/{ns}/awsclusters"


@pytest.fixture
def both(server: Server, peer_cluster: PeerCluster, tmp_path: Path) -> list[Endpoint]:
    install_capa_crds(peer_cluster)
    return [capa_endpoint(server, tmp_path / "capa"), peer_endpoint(peer_cluster)]


@pytest.fixture
def namespace(both: list[Endpoint]) -> Iterator[str]:
    with scratch_namespace(*both, prefix="field-validation") as name:
        yield name


def _with_extras(name: str) -> bytes:
    """An AWSCluster with unknown fields at four depths and ``spec.region`` twice (the last one wins)."""
    doc = aws_cluster(name)
    doc["metadata"] = {"name": name, "foo": 1}
    doc["spec"]["foo"] = "bar"
    doc["spec"]["network"]["vpc"]["bar"] = 2
    doc["top"] = 3
    text = json.dumps(doc)
    return text.replace('"spec": {', '"spec": {"region": "eu-west-1", ', 1).encode()


def _query(mode: str | None) -> str:
    return "" if mode is None else f"?fieldValidation={mode}"


def _observed(reply: Reply) -> dict[str, Any]:
    body = reply.json()
    seen: dict[str, Any] = {"status": reply.status, "warnings": reply.warnings()}
    if body.get("kind") == "Status":
        seen["reason"], seen["message"] = body.get("reason"), _elide_object(body.get("message", ""))
        seen["causes"] = [c.get("field") for c in body.get("details", {}).get("causes", [])]
    return seen


def _elide_object(message: str) -> str:
    """The message without the patched object a Strict patch error quotes (its server fields differ)."""
    return re.sub(r'Invalid value: "(?:[^"\\]|\\.)*"', 'Invalid value: "<object>"', message)


def _stored(endpoint: Endpoint, path: str) -> dict[str, Any]:
    doc = endpoint.send("GET", path).json()
    return {
        "metadata.foo": "foo" in doc["metadata"],
        "top": "top" in doc,
        "spec.region": doc["spec"]["region"],
        "spec.foo": "foo" in doc["spec"],
        "spec.network.vpc.bar": "bar" in doc["spec"]["network"]["vpc"],
        "status.kopf": "kopf" in doc.get("status", {}),
    }


def _compare(answers: dict[str, Any]) -> Any:
    capa, real = answers["capa serve"], answers["kube-apiserver"]
    assert capa == real
    return capa


@pytest.mark.parametrize("mode", ["Strict", "Warn", "Ignore", None])
def test_a_create_with_unknown_and_duplicate_fields(
    both: list[Endpoint], namespace: str, mode: str | None
) -> None:
    answers = {}
    for endpoint in both:
        path = AWSCLUSTERS.format(ns=namespace)
        reply = endpoint.send("POST", path + _query(mode), _with_extras("demo"))
        stored = _stored(endpoint, f"{path}/demo") if reply.status == 201 else None
        answers[endpoint.name] = (_observed(reply), stored)
    observed, stored = _compare(answers)
    problems = [
        'duplicate field "spec.region"',
        'unknown field "metadata.foo"',
        'unknown field "spec.foo"',
        'unknown field "spec.network.vpc.bar"',
        'unknown field "top"',
    ]
    if mode == "Strict":
        assert observed["status"] == 400
        assert observed["message"] == (
            'AWSCluster in version "v1beta2" cannot be handled as a AWSCluster: strict decoding error: '
            + ", ".join(problems)
        )
        return
    assert observed["status"] == 201
    warned = [] if mode == "Ignore" else problems
    assert observed["warnings"] == [f"299 - {json.dumps(p)}" for p in warned]
    assert stored["spec.region"] == "us-east-1"
    assert not any(stored[key] for key in ("metadata.foo", "top", "spec.foo", "spec.network.vpc.bar"))


@pytest.mark.parametrize("mode", ["Strict", "Warn"])
def test_an_update_and_a_patch_with_unknown_fields(both: list[Endpoint], namespace: str, mode: str) -> None:
    answers = {}
    for endpoint in both:
        path = AWSCLUSTERS.format(ns=namespace)
        created = endpoint.send("POST", path, aws_cluster("demo") | {"metadata": {"name": "demo"}}).json()
        created["spec"]["foo"] = "bar"
        updated = endpoint.send("PUT", f"{path}/demo{_query(mode)}", created)
        patch = [{"op": "add", "path": "/spec/network/subnets/0/foo", "value": 1}]
        patched = endpoint.send("PATCH", f"{path}/demo{_query(mode)}", patch, "application/json-patch+json")
        answers[endpoint.name] = (_observed(updated), _observed(patched))
    updated, patched = _compare(answers)
    if mode == "Strict":
        assert (updated["status"], updated["reason"]) == (400, "BadRequest")
        assert (patched["status"], patched["reason"], patched["causes"]) == (422, "Invalid", ["patch"])
        assert patched["message"] == (
            ' "" is invalid: patch: Invalid value: "<object>": strict decoding error: '
            'unknown field "spec.network.subnets[0].foo"'
        )
    else:
        assert updated["warnings"] == ['299 - "unknown field \\"spec.foo\\""']
        assert patched["warnings"] == ['299 - "unknown field \\"spec.network.subnets[0].foo\\""']


def test_a_status_write_with_a_field_the_kind_lacks_stores_the_rest(
    both: list[Endpoint], namespace: str
) -> None:
    """kopf writes its progress into ``status.kopf`` of resources whose CRD does not preserve unknown
    fields: the write succeeds, the field is dropped with a warning."""
    answers = {}
    for endpoint in both:
        path = AWSCLUSTERS.format(ns=namespace)
        assert endpoint.send("POST", path, aws_cluster("demo") | {"metadata": {"name": "demo"}}).status == 201
        patch = {"status": {"ready": True, "kopf": {"progress": {"h": {"started": "now"}}}}}
        reply = endpoint.send("PATCH", f"{path}/demo/status", patch, "application/merge-patch+json")
        stored = endpoint.send("GET", f"{path}/demo").json()["status"]
        answers[endpoint.name] = (_observed(reply), stored.get("ready"), "kopf" in stored)
    observed, ready, kopf = _compare(answers)
    assert observed == {"status": 200, "warnings": ['299 - "unknown field \\"status.kopf\\""']}
    assert (ready, kopf) == (True, False)


@pytest.mark.parametrize(("method", "options"), [("POST", "CreateOptions"), ("PATCH", "PatchOptions")])
def test_an_unknown_mode_is_refused(both: list[Endpoint], namespace: str, method: str, options: str) -> None:
    answers = {}
    for endpoint in both:
        path = AWSCLUSTERS.format(ns=namespace) + ("/demo" if method == "PATCH" else "")
        media = "application/merge-patch+json" if method == "PATCH" else "application/json"
        reply = endpoint.send(method, f"{path}?fieldValidation=strict", {}, media)
        answers[endpoint.name] = _observed(reply)
    observed = _compare(answers)
    assert (observed["status"], observed["reason"]) == (422, "Invalid")
    assert observed["message"].startswith(f'{options}.meta.k8s.io "" is invalid: fieldValidation: ')


@pytest.mark.parametrize("validate", ["strict", "warn", "false"])
def test_kubectl_apply_with_an_unknown_field(
    both: list[Endpoint], namespace: str, tmp_path: Path, validate: str
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    manifest = tmp_path / "awscluster.yaml"
    doc = aws_cluster("demo")
    doc["metadata"] = {"name": "demo", "namespace": namespace}
    doc["spec"]["foo"] = "bar"
    manifest.write_text(yaml.safe_dump(doc))
    answers = {}
    for endpoint in both:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(endpoint.kubeconfig),
        }
        done = subprocess.run(
            [kubectl, "apply", f"--validate={validate}", "-f", str(manifest)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        answers[endpoint.name] = (done.returncode, done.stdout, done.stderr)
    code, out, err = _compare(answers)
    if validate == "strict":
        assert code == 1
        assert 'strict decoding error: unknown field "spec.foo"' in err
    else:
        assert (code, out) == (0, "awscluster.infrastructure.cluster.x-k8s.io/demo created\n")
        assert err == ('Warning: unknown field "spec.foo"\n' if validate == "warn" else "")
