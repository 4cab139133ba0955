"""The size limits a client observes on a write, as kube-apiserver applies them (tests/conformance compares
the same writes with it). Before, capa serve stored each of these objects."""

from __future__ import annotations

from typing import Any

import pytest

from tests.apiserver.apiserver_support import Server

BASE = "/api/v1/namespaces/default"
MIB = 1024 * 1024


def configmap(name: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **extra}


@pytest.mark.parametrize(
    ("resource", "doc", "field"),
    [
        (
            "configmaps",
            {**configmap("ann"), "metadata": {"name": "ann", "annotations": {"a": "x" * 262144}}},
            "metadata.annotations",
        ),
        ("configmaps", configmap("data", data={"a": "x" * (MIB + 1)}), "[]"),
        (
            "configmaps",
            configmap("binary", data={"a": "x" * (MIB // 2)}, binaryData={"b": "eXl5" * (MIB // 6 + 1)}),
            "[]",
        ),
        (
            "secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "s"},
                "stringData": {"a": "x" * (MIB + 1)},
            },
            "data",
        ),
    ],
)
def test_a_field_over_its_limit_is_too_long(
    server: Server, resource: str, doc: dict[str, Any], field: str
) -> None:
    code, status = server.http("POST", f"{BASE}/{resource}", doc)
    assert (code, status["reason"]) == (422, "Invalid")
    assert [(c["reason"], c["field"]) for c in status["details"]["causes"]] == [("FieldValueTooLong", field)]
    assert server.http("GET", f"{BASE}/{resource}/{doc['metadata']['name']}")[0] == 404


def test_an_annotation_key_must_be_a_qualified_name(server: Server) -> None:
    doc = {
        **configmap("key"),
        "metadata": {"name": "key", "annotations": {"a b": "x", "example.com/ok": "y"}},
    }
    code, status = server.http("POST", f"{BASE}/configmaps", doc)
    assert code == 422
    assert [(c["reason"], c["field"]) for c in status["details"]["causes"]] == [
        ("FieldValueInvalid", "metadata.annotations")
    ]


def test_the_largest_values_within_the_limits_are_stored(server: Server) -> None:
    at = {"metadata": {"name": "at", "annotations": {"a": "x" * (262144 - 1)}}, "data": {"a": "y" * MIB}}
    code, _ = server.http("POST", f"{BASE}/configmaps", {**configmap("at"), **at})
    assert code == 201


def test_an_object_over_the_storage_limit_is_too_large(server: Server) -> None:
    """Within every field's limit, over etcd's 1.5 MiB: 413 with etcd's message (kube-apiserver: 500)."""
    doc = configmap("huge", data={"a": "x" * 1_040_000})
    doc["metadata"]["annotations"] = {"a": "y" * 262_000}
    doc["metadata"]["labels"] = {f"l{i:05d}": "v" * 63 for i in range(4000)}
    code, status = server.http("POST", f"{BASE}/configmaps", doc)
    assert (code, status["reason"], status["message"]) == (
        413,
        "RequestEntityTooLarge",
        "etcdserver: request is too large",
    )
    assert server.http("GET", f"{BASE}/configmaps/huge")[0] == 404


def test_a_namespace_or_service_name_is_a_dns_label(server: Server) -> None:
    """No dots, at most 63 characters (a dotted Namespace and Service were stored; a Namespace name of 64
    was refused for its label only)."""
    service = {"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80}]}}
    for path, doc, fields in (
        ("/api/v1/namespaces", {"metadata": {"name": "a.b"}}, ["metadata.name"]),
        ("/api/v1/namespaces", {"metadata": {"name": "n" * 64}}, ["metadata.name", "metadata.labels"]),
        (f"{BASE}/services", {**service, "metadata": {"name": "a.b"}}, ["metadata.name"]),
    ):
        code, status = server.http("POST", path, doc)
        assert code == 422, doc
        assert [c["field"] for c in status["details"]["causes"]] == fields
