"""A Kubernetes API discovery endpoint with no objects: enough for ``kubectl apply --dry-run=client``.

kubectl maps every document's apiVersion/kind to a resource through discovery and reads the object (to
choose create or patch) even in client dry run, so it cannot run without a server. This stub serves the
built-in groups the deployment artefacts use (and, given CRDs, the kinds they define, as an API server does
once they are installed), answers every object read with a ``NotFound`` Status, and records the paths
kubectl asked for. A document whose apiVersion/kind the real API server does not have
fails here as it would there (``no matches for kind``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# group/version -> [(plural, kind, namespaced)], as a Kubernetes 1.3x API server has them.
BUILTIN: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("namespaces", "Namespace", False),
        ("serviceaccounts", "ServiceAccount", True),
        ("services", "Service", True),
        ("secrets", "Secret", True),
        ("configmaps", "ConfigMap", True),
    ],
    "apps/v1": [("deployments", "Deployment", True)],
    "rbac.authorization.k8s.io/v1": [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    "apiextensions.k8s.io/v1": [("customresourcedefinitions", "CustomResourceDefinition", False)],
    "coordination.k8s.io/v1": [("leases", "Lease", True)],
    "admissionregistration.k8s.io/v1": [
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False),
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False),
    ],
}
CERT_MANAGER_CRDS: list[dict[str, Any]] = [
    {
        "spec": {
            "group": "cert-manager.io",
            "names": {"plural": plural, "kind": kind},
            "scope": "Namespaced",
            "versions": [{"name": "v1"}],
        }
    }
    for plural, kind in (("issuers", "Issuer"), ("certificates", "Certificate"))
]
"""What installing cert-manager adds to discovery (the parts :func:`served_by` reads of its CRDs)."""

_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


Served = dict[str, list[tuple[str, str, bool]]]


def served_by(crds: list[dict[str, Any]]) -> Served:
    """What installing these CRDs adds to discovery, as the API server derives it from their names."""
    served: Served = {}
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            served.setdefault(f"{spec['group']}/{version['name']}", []).append(
                (spec["names"]["plural"], spec["names"]["kind"], spec["scope"] == "Namespaced")
            )
    return served


def _resource_list(served: Served, group_version: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {
                "name": plural,
                "singularName": kind.lower(),
                "namespaced": namespaced,
                "kind": kind,
                "verbs": _VERBS,
            }
            for plural, kind, namespaced in served[group_version]
        ],
    }


def _group_list(served: Served) -> dict[str, Any]:
    groups = []
    for group_version in served:
        if "/" not in group_version:
            continue
        group, version = group_version.split("/")
        entry = {"groupVersion": group_version, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    @property
    def served(self) -> Served:
        return self.server.served

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        self.server.requests.append(f"GET {path}")
        if path == "/api":
            self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        elif path == "/apis":
            self._send(200, _group_list(self.served))
        elif path == "/api/v1":
            self._send(200, _resource_list(self.served, "v1"))
        elif path.startswith("/apis/") and path.count("/") == 3 and path[len("/apis/") :] in self.served:
            self._send(200, _resource_list(self.served, path[len("/apis/") :]))
        elif path == "/version":
            self._send(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0"})
        else:
            name = path.rsplit("/", 1)[-1]
            self._send(
                404,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"{name!r} not found",
                    "reason": "NotFound",
                    "details": {"name": name},
                    "code": 404,
                },
            )


class _Server(ThreadingHTTPServer):
    requests: list[str]
    served: Served


@contextmanager
def discovery_stub(crds: list[dict[str, Any]] | None = None) -> Iterator[tuple[str, list[str]]]:
    """``(url, requests)`` of a stub listening on a loopback port for the duration of the block, serving
    the built-in groups and, when given, what these CRDs define (as if they were installed)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.requests = []
    server.served = {**BUILTIN}
    for group_version, resources in served_by(crds or []).items():
        server.served[group_version] = [*server.served.get(group_version, []), *resources]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
