"""Patches that cannot apply are refused with a 4xx Status and change nothing. Before, capa serve answered a
JSON patch whose operations are not objects 422 (kube-apiserver: 400, the body does not decode) and applied a
strategic merge patch with a malformed directive (an unknown ``$patch``, a ``$retainKeys`` or
``$setElementOrder`` that is no list) as if the directive were absent; kube-apiserver answers the first and
the last of those 500, capa serve 400 (docs/conformance.md)."""

from __future__ import annotations

import pytest

from tests.apiserver.apiserver_support import Server

BASE = "/api/v1/namespaces/default/configmaps"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


@pytest.mark.parametrize(
    ("media", "body"),
    [
        (JSON_PATCH, b"[1,2]"),
        (JSON_PATCH, b'["add"]'),
        (STRATEGIC, b'{"$patch":"bogus"}'),
        (STRATEGIC, b'{"metadata":{"labels":{"$patch":5}}}'),
        (STRATEGIC, b'{"$retainKeys":5}'),
        (STRATEGIC, b'{"metadata":{"$setElementOrder/finalizers":5}}'),
        (STRATEGIC, b'{"metadata":{"finalizers":[{"$patch":"sideways"}]}}'),
    ],
)
def test_a_malformed_patch_is_a_bad_request_and_changes_nothing(
    server: Server, media: str, body: bytes
) -> None:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pp"}, "data": {"a": "1"}}
    code, created = server.http("POST", BASE, doc)
    assert code == 201
    code, status = server.http("PATCH", f"{BASE}/pp", body, media)
    assert (code, status["kind"], status["reason"]) == (400, "Status", "BadRequest")
    code, after = server.http("GET", f"{BASE}/pp")
    assert after["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert after["data"] == {"a": "1"}
