"""The attributes ``capa serve`` authorizes a request by (:mod:`capa_py.apiserver.request_info`) are the ones
kube-apiserver resolves: each request below is sent to kube-apiserver, and its audit event (verb and
objectRef) is compared with what capa-py resolves from the same method, path and query."""

from __future__ import annotations

import contextlib
import urllib.error
import urllib.request
import uuid
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from capa_py.apiserver.request_info import resolve
from tests.peers.cluster import PeerCluster

NS = "request-info-test"

REQUESTS: list[tuple[str, str]] = [
    ("GET", f"/api/v1/namespaces/{NS}/configmaps"),
    ("GET", f"/api/v1/namespaces/{NS}/configmaps?watch=true&timeoutSeconds=1"),
    ("GET", f"/api/v1/namespaces/{NS}/configmaps?watch=1&timeoutSeconds=1"),
    ("GET", f"/api/v1/namespaces/{NS}/configmaps?watch=false"),
    ("GET", f"/api/v1/namespaces/{NS}/configmaps?watch=nonsense&timeoutSeconds=1"),
    ("GET", f"/api/v1/namespaces/{NS}/configmaps?fieldSelector=metadata.name%3Done"),
    (
        "GET",
        f"/api/v1/namespaces/{NS}/configmaps?fieldSelector=metadata.name%3D%3Done,metadata.namespace%3Dx",
    ),
    ("GET", f"/api/v1/namespaces/{NS}/configmaps?fieldSelector=metadata.name%21%3Done"),
    ("GET", f"/api/v1/namespaces/{NS}/configmaps/absent"),
    ("POST", f"/api/v1/namespaces/{NS}/configmaps"),
    ("PUT", f"/api/v1/namespaces/{NS}/configmaps/one"),
    ("PATCH", f"/api/v1/namespaces/{NS}/configmaps/one"),
    ("DELETE", f"/api/v1/namespaces/{NS}/configmaps/one"),
    ("DELETE", f"/api/v1/namespaces/{NS}/configmaps?labelSelector=nothing%3Dmatches"),
    ("GET", "/api/v1/configmaps"),
    ("GET", f"/api/v1/namespaces/{NS}"),
    ("GET", f"/api/v1/namespaces/{NS}/status"),
    ("PUT", f"/api/v1/namespaces/{NS}/finalize"),
    ("GET", "/api/v1/namespaces"),
    ("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/absent/status"),
    ("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/absent/scale"),
    ("GET", f"/api/v1/watch/namespaces/{NS}/configmaps?timeoutSeconds=1"),
    ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin"),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
    ("GET", "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/default/awsclusters"),
    ("GET", "/healthz"),
    ("GET", "/version"),
    ("GET", "/api"),
    ("GET", "/api/v1"),
    ("GET", "/apis"),
    ("GET", "/apis/apps"),
    ("GET", "/apis/apps/v1"),
    ("GET", "/openapi/v2"),
]
"""Every shape: collection, watch (by query, by a Go boolean, by the old path, by a value that does not
parse), list of one name, named object, each write, delete of a collection, the cluster scope, a
Namespace and its own subresources, another kind's subresources, a review, an unserved group, and the
non-resource paths (health, version, discovery, OpenAPI)."""

_BODIES: dict[str, Any] = {
    "POST": b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"one"}}',
    "PUT": b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"one"}}',
    "PATCH": b"{}",
}


def _send(cluster: PeerCluster, method: str, path: str) -> None:
    data = _BODIES.get(method)
    if path.endswith("selfsubjectaccessreviews"):
        data = b'{"spec":{"nonResourceAttributes":{"verb":"get","path":"/"}}}'
    request = urllib.request.Request(cluster.url + path, data=data, method=method)
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, context=cluster.admin_context(), timeout=30) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        exc.close()


def _observed(event: dict[str, Any]) -> dict[str, str]:
    """What the audit event says was asked. A create's objectRef names the object its body names, which
    authorization never sees (it decides before the body is read): that name is left out."""
    ref: dict[str, str] = event.get("objectRef") or {}
    fields = ("resource", "subresource", "namespace", "name", "apiGroup", "apiVersion")
    observed = {"verb": event["verb"], **{key: ref[key] for key in fields if ref.get(key)}}
    if event["verb"] == "create" and not ref.get("subresource"):
        observed.pop("name", None)
    return observed


def _resolved(method: str, uri: str) -> dict[str, str]:
    parts = urlsplit(uri)
    info = resolve(method, unquote(parts.path), dict(parse_qsl(parts.query)))
    fields = {
        "resource": info.resource,
        "subresource": info.subresource,
        "namespace": info.namespace,
        "name": info.name,
        "apiGroup": info.api_group,
        "apiVersion": info.api_version,
    }
    return {"verb": info.verb, **{key: value for key, value in fields.items() if value}}


def test_request_attributes_are_those_kube_apiserver_resolves(peer_cluster: PeerCluster) -> None:
    """The audit log is written before each response is (blocking mode): every event is there once the
    requests are answered."""
    with contextlib.suppress(urllib.error.HTTPError):
        peer_cluster.request("/api/v1/namespaces", "POST", {"metadata": {"name": NS}})
    marker = uuid.uuid4().hex
    sent = []
    for index, (method, path) in enumerate(REQUESTS):
        uri = f"{path}{'&' if '?' in path else '?'}probe={marker}-{index}"
        _send(peer_cluster, method, uri)
        sent.append((method, uri))
    events = {e["requestURI"]: e for e in peer_cluster.audit_events() if marker in e.get("requestURI", "")}
    assert sorted(events) == sorted(uri for _, uri in sent)
    observed = [_observed(events[uri]) for _, uri in sent]
    resolved = [_resolved(method, uri) for method, uri in sent]
    assert [(uri, r) for (_, uri), r in zip(sent, resolved, strict=True)] == [
        (uri, o) for (_, uri), o in zip(sent, observed, strict=True)
    ]
    verbs = {entry["verb"] for entry in observed}
    assert verbs >= {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
