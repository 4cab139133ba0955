"""Applying arbitrary manifests to a cluster's API server: reading them (files, URLs, bad documents), finding
the cluster's kubeconfig in its Cluster API Secret (a real SQLite store), and applying them to ``capa serve``
in a subprocess, with kubectl as the independent reader of what was applied."""

from __future__ import annotations

import base64
import copy
import functools
import logging
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, MutableMapping
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from structlog.testing import capture_logs

from capa_py.api.core import Secret
from capa_py.manifests.crds import crds
from capa_py.store.sqlite import SQLiteStore
from capa_py.workflow.kubeapply import (
    AppliedDocument,
    ClusterUnreachable,
    ManifestError,
    apply_documents,
    cluster_kubeconfig,
    kubeconfig_from_secret,
    read_manifest,
)
from tests.apiserver.apiserver_support import aws_cluster
from tests.cli.served import capa_serve

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/cni/demo-cni.yaml"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One ``capa serve`` for the module (each test applies objects of its own names): its kubeconfig."""
    with capa_serve(tmp_path_factory.mktemp("served")) as kubeconfig:
        yield kubeconfig


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def config_map(name: str, namespace: str | None = "default", **data: str) -> dict[str, Any]:
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def widget_crd(group: str = "example.com") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


# -- applying to capa serve ----------------------------------------------------------------------------


def test_the_example_cni_is_created_then_unchanged_then_only_a_changed_configmap_is_configured(
    served: Path,
) -> None:
    docs = read_manifest(EXAMPLE, ROOT)
    refs = [
        "ServiceAccount/kube-system/demo-net",
        "ClusterRole/demo-net",
        "ClusterRoleBinding/demo-net",
        "ConfigMap/kube-system/demo-net-config",
        "DaemonSet/kube-system/demo-net",
    ]

    assert apply_documents(served, docs) == [AppliedDocument(ref, "created") for ref in refs]
    listed = kubectl(served, "get", "daemonsets", "-n", "kube-system", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["daemonset.apps/demo-net"]
    template = kubectl(served, "get", "ds", "demo-net", "-n", "kube-system", "-o", "yaml")
    assert yaml.safe_load(template.stdout)["spec"] == docs[4]["spec"], "the DaemonSet was not stored as given"

    assert apply_documents(served, docs) == [AppliedDocument(ref, "unchanged") for ref in refs]

    changed = copy.deepcopy(docs)
    changed[3]["data"]["net-conf.json"] = '{"network": "10.244.0.0/16"}\n'
    outcomes = {a.ref: a.outcome for a in apply_documents(served, changed)}
    assert outcomes == {ref: "configured" if ref.startswith("ConfigMap/") else "unchanged" for ref in refs}
    stored = kubectl(
        served,
        "get",
        "configmap",
        "demo-net-config",
        "-n",
        "kube-system",
        "-o",
        "jsonpath={.data.net-conf\\.json}",
    )
    assert stored.stdout.strip() == '{"network": "10.244.0.0/16"}', stored.stderr


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every log line of the test, at every level, whatever level an earlier test left configured; the
    configuration is restored afterwards."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**saved)


def test_a_document_the_server_normalises_is_unchanged_when_applied_again_and_never_logged(
    served: Path, logged: list[MutableMapping[str, Any]]
) -> None:
    # The server folds stringData into data and drops creationTimestamp: null, so the document never equals
    # what is stored; only the dry run tells that applying it again changes nothing.
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "normalised", "namespace": "default", "creationTimestamp": None},
        "stringData": {"token": "s3cr3t-first"},
    }
    assert apply_documents(served, [secret]) == [AppliedDocument("Secret/default/normalised", "created")]
    assert apply_documents(served, [secret])[0].outcome == "unchanged"
    secret["stringData"] = {"token": "s3cr3t-second"}
    assert apply_documents(served, [secret])[0].outcome == "configured"
    assert logged, "applying logged nothing"
    assert not [line for line in logged if "s3cr3t" in repr(line)], "a Secret's value reached the log"
    stored = kubectl(served, "get", "secret", "normalised", "-o", "jsonpath={.data.token}")
    assert base64.b64decode(stored.stdout) == b"s3cr3t-second"


def test_a_namespaced_document_without_namespace_goes_to_default_and_a_cluster_scoped_one_drops_it(
    served: Path,
) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "net-extra", "namespace": "x"}}
    applied = apply_documents(served, [config_map("no-namespace", None, mode="vxlan"), namespace])
    assert applied == [
        AppliedDocument("ConfigMap/default/no-namespace", "created"),
        AppliedDocument("Namespace/net-extra", "created"),
    ]
    found = kubectl(
        served, "get", "configmap", "no-namespace", "-n", "default", "-o", "jsonpath={.data.mode}"
    )
    assert found.stdout == "vxlan", found.stderr


def test_a_crd_then_an_object_of_its_kind_in_one_list_are_both_created(served: Path, tmp_path: Path) -> None:
    # capa serve serves only the kinds capa-py registers, so the CRD here is one of capa-py's own: the
    # object's kind is served as soon as it is asked for. A kind that appears only once its CRD is
    # established needs a real API server; the next test pins what happens when it never appears.
    crd = next(d for d in crds() if d["metadata"]["name"].startswith("awsclusters."))
    cluster = aws_cluster("crd-then-object")
    kubeconfig = yaml.safe_load(served.read_text())

    applied = apply_documents(kubeconfig, [crd, cluster])

    assert applied == [
        AppliedDocument(f"CustomResourceDefinition/{crd['metadata']['name']}", "created"),
        AppliedDocument("AWSCluster/default/crd-then-object", "created"),
    ]
    found = kubectl(served, "get", "awsclusters", "crd-then-object", "-o", "name")
    assert found.stdout.strip() == "awscluster.infrastructure.cluster.x-k8s.io/crd-then-object", found.stderr


def test_a_crd_kind_that_never_becomes_served_stops_the_apply_at_its_first_object(served: Path) -> None:
    # capa serve serves what a CRD defines, except a kind capa-py models: that stays its model's, so a CRD
    # for it at another version is stored and the version never served.
    unserved = widget_crd("infrastructure.cluster.x-k8s.io")
    unserved["metadata"]["name"] = "awsclusters.infrastructure.cluster.x-k8s.io"
    unserved["spec"]["names"] = {"kind": "AWSCluster", "plural": "awsclusters"}
    unserved["spec"]["versions"][0]["name"] = "v9"
    docs = [
        config_map("before-widget"),
        unserved,
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v9",
            "kind": "AWSCluster",
            "metadata": {"name": "w", "namespace": "default"},
        },
        config_map("after-widget"),
    ]
    started = time.monotonic()
    with pytest.raises(ManifestError) as raised:
        apply_documents(served, docs, timeout=1.0)
    waited = time.monotonic() - started

    message = str(raised.value)
    assert message.startswith(
        "document 3 (AWSCluster/default/w): kind AWSCluster of apiVersion infrastructure.cluster.x-k8s.io/v9 "
        "is not "
    )
    assert f"served by {yaml.safe_load(served.read_text())['clusters'][0]['cluster']['server']}" in message
    assert "CustomResourceDefinition awsclusters.infrastructure.cluster.x-k8s.io was applied" in message
    # The server is the module's: an earlier test may have applied capa-py's AWSCluster CRD.
    assert [a.ref for a in raised.value.applied] == [
        "ConfigMap/default/before-widget",
        "CustomResourceDefinition/awsclusters.infrastructure.cluster.x-k8s.io",
    ]
    assert raised.value.applied[0].outcome == "created"
    assert waited >= 1.0, "the kind its CRD defines was not waited for"
    after = kubectl(served, "get", "configmap", "after-widget")
    assert after.returncode != 0, "a document after the failing one was applied"
    assert "not found" in after.stderr.lower()


def test_a_kind_no_crd_defines_fails_at_once_naming_the_document(served: Path) -> None:
    gadget = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    started = time.monotonic()
    with pytest.raises(
        ManifestError, match=r"^document 1 \(Gadget/g\): kind Gadget of apiVersion example\.com/v1"
    ):
        apply_documents(served, [gadget], timeout=30.0)
    assert time.monotonic() - started < 10.0, "an unknown kind without a CRD was waited for"


def test_a_document_the_server_refuses_names_it_and_carries_the_servers_message(served: Path) -> None:
    bad = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "bad-data"},
        "data": {"k": "not base64!"},
    }
    with pytest.raises(ManifestError) as raised:
        apply_documents(served, [config_map("before-refused"), bad])
    message = str(raised.value)
    assert message.startswith("document 2 (Secret/default/bad-data): refused by https://127.0.0.1:")
    assert "422" in message
    assert "not valid base64" in message
    assert "applied before it: ConfigMap/default/before-refused" in message
    assert raised.value.applied == [AppliedDocument("ConfigMap/default/before-refused", "created")]


def loopback_kubeconfig(port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "gone", "user": {}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
        "current-context": "gone",
    }


def test_a_server_that_does_not_answer_is_unreachable_not_a_manifest_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port once the probe is closed.
    with pytest.raises(ClusterUnreachable, match=f"http://127.0.0.1:{port} does not answer"):
        apply_documents(loopback_kubeconfig(port), [config_map("never")], timeout=5.0)


@pytest.mark.timeout(30)
def test_a_server_that_accepts_but_never_answers_gives_up_within_the_timeout() -> None:
    # A listening socket nobody accepts from: connections succeed (the backlog), no answer ever comes.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(ClusterUnreachable, match="does not answer"):
            apply_documents(loopback_kubeconfig(port), [config_map("never")], timeout=0.5)
        # The client retries a read that timed out a few times; each try is bounded.
        assert time.monotonic() - started < 10.0


def test_a_kubeconfig_file_that_is_not_there_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.kubeconfig"
    with pytest.raises(ManifestError, match=f"kubeconfig {missing}: no such file"):
        apply_documents(missing, [config_map("never")])


# -- reading manifests ---------------------------------------------------------------------------------

LISTED = """\
apiVersion: v1
kind: ServiceAccount
metadata: {name: agent, namespace: kube-system}
---
# only a comment: an empty document
---
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: one}}
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: two}}
---
"""


def test_a_relative_path_is_read_from_the_base_dir_with_empty_documents_skipped_and_lists_flattened(
    tmp_path: Path,
) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "cni.yaml").write_text(LISTED)
    docs = read_manifest("net/cni.yaml", tmp_path)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ServiceAccount", "agent"),
        ("ConfigMap", "one"),
        ("ConfigMap", "two"),
    ]


def test_the_example_reads_as_five_documents_in_kube_system_or_cluster_scope() -> None:
    docs = read_manifest(EXAMPLE, ROOT)
    assert [d["kind"] for d in docs] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
    ]
    assert {d["metadata"].get("namespace") for d in docs} == {"kube-system", None}


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"^missing\.yaml: no such file"):
        read_manifest("missing.yaml", tmp_path)


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A directory served over HTTP on a loopback port for the test: (base URL, directory)."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

    served_dir = tmp_path / "www"
    served_dir.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(served_dir)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served_dir
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_http_url_is_fetched_and_one_that_cannot_be_is_named(
    http_dir: tuple[str, Path], tmp_path: Path
) -> None:
    base, directory = http_dir
    (directory / "cni.yaml").write_text(LISTED)

    docs = read_manifest(f"{base}/cni.yaml", tmp_path / "unused")
    assert [d["metadata"]["name"] for d in docs] == ["agent", "one", "two"]

    with pytest.raises(ManifestError, match=rf"^{base}/absent\.yaml: cannot be fetched: HTTP 404"):
        read_manifest(f"{base}/absent.yaml", tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n"
            "apiVersion: v1\nmetadata: {name: c}\n",
            "cni.yaml: document 3: kind: required",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n",
            "cni.yaml: document 1: metadata.name: required",
        ),
        ("kind: ConfigMap\nmetadata: {name: a}\n", "cni.yaml: document 1: apiVersion: required"),
        ("apiVersion: v1\nkind: ConfigMap\n", "cni.yaml: document 1: metadata.name: required"),
        (
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n"
            "- {apiVersion: v1, kind: ConfigMap, metadata: {}}\n",
            "cni.yaml: document 1: items[1]: metadata.name: required",
        ),
        ("- just\n- a list\n", "cni.yaml: document 1: a document must be a mapping, not list"),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkey: [unclosed\n",
            "cni.yaml: document 2: expected ',' or ']'",
        ),
    ],
    ids=["kind", "name", "apiVersion", "metadata", "list-item", "not-a-mapping", "not-yaml"],
)
def test_a_bad_document_is_named_by_number_and_field(tmp_path: Path, text: str, expected: str) -> None:
    (tmp_path / "cni.yaml").write_text(text)
    with pytest.raises(ManifestError) as raised:
        read_manifest("cni.yaml", tmp_path)
    assert str(raised.value).startswith(expected), str(raised.value)


# -- the cluster's kubeconfig --------------------------------------------------------------------------


def kubeconfig_secret(name: str, value: bytes | None) -> Secret:
    data = {} if value is None else {"value": base64.b64encode(value).decode()}
    return Secret.model_validate(
        {"metadata": {"name": name, "namespace": "default"}, "type": "cluster.x-k8s.io/secret", "data": data}
    )


def test_cluster_kubeconfig_reads_the_cluster_api_secret_and_is_none_without_it(
    store: SQLiteStore, served: Path
) -> None:
    assert cluster_kubeconfig(store, "default", "workload") is None
    store.create(kubeconfig_secret("workload-kubeconfig", served.read_bytes()))

    found = cluster_kubeconfig(store, "default", "workload")

    assert found == yaml.safe_load(served.read_text())
    assert found is not None
    assert apply_documents(found, [config_map("through-the-secret")]) == [
        AppliedDocument("ConfigMap/default/through-the-secret", "created")
    ]
    assert cluster_kubeconfig(store, "other", "workload") is None


def test_a_kubeconfig_secret_without_its_key_or_with_no_yaml_is_named_without_its_contents() -> None:
    with pytest.raises(ManifestError, match=r"^Secret default/demo-kubeconfig key 'value': missing"):
        kubeconfig_from_secret(kubeconfig_secret("demo-kubeconfig", None))

    with pytest.raises(ManifestError) as raised:
        kubeconfig_from_secret(kubeconfig_secret("demo-kubeconfig", b"token: [s3cr3t-unclosed\n"))
    assert str(raised.value).startswith("Secret default/demo-kubeconfig key 'value': not a YAML kubeconfig")
    assert "s3cr3t" not in str(raised.value)

    with pytest.raises(ManifestError, match="not a kubeconfig"):
        kubeconfig_from_secret(kubeconfig_secret("demo-kubeconfig", b"just a string\n"))
