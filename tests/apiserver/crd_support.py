"""CRDs for the tests of CRD-defined kinds, and one client that talks to capa serve or the real API server."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from capa_py.apiserver import RunningServer
from tests.apiserver.apiserver_support import Server
from tests.peers.kubectl import kubectl_binary
from tests.support.eventually import eventually

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _peering_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    """kopf's peering CRDs (``kopf.dev``): status only, every field of it kept."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "scope": scope,
            "group": "kopf.dev",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    },
                }
            ],
        },
    }


KOPF_CRDS = [
    _peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
    _peering_crd("KopfPeering", "kopfpeerings", "Namespaced"),
]


def widget_crd(group: str) -> dict[str, Any]:
    """A namespaced kind with printer columns (one of priority 1), defaults, an enum, a required field,
    bounds, a pattern, int-or-string, a preserved map, a short name, a category, the status subresource,
    and a second served version (no schema of its own beyond preserving everything)."""
    columns = [
        {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
        {"name": "Owner", "type": "string", "jsonPath": ".spec.owner", "priority": 1},
        {"name": "Created", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    spec_schema = {
        "type": "object",
        "required": ["color"],
        "properties": {
            "color": {"type": "string", "enum": ["red", "green", "blue"]},
            "size": {"type": "integer", "default": 3, "minimum": 1, "maximum": 10},
            "owner": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
            "port": {"x-kubernetes-int-or-string": True},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            "parts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "weight": {"type": "integer", "default": 1}},
                },
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": "Widget",
                "plural": "widgets",
                "singular": "widget",
                "shortNames": ["wd"],
                "categories": ["all-widgets"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "spec": spec_schema,
                                "status": {
                                    "type": "object",
                                    "properties": {"ready": {"type": "boolean", "default": False}},
                                },
                            },
                        }
                    },
                },
                {
                    "name": "v2",
                    "served": True,
                    "storage": False,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                },
            ],
        },
    }


def widget(group: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{group}/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


class Api:
    """Raw JSON requests to one server: ``(status, body)``, errors included."""

    def __init__(self, url: str, context: ssl.SSLContext | None = None) -> None:
        self.url = url
        self.context = context

    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", content_type)
        request.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            with exc:
                raw = exc.read()
            try:
                return exc.code, json.loads(raw or b"null")
            except json.JSONDecodeError:  # the API server's plain-text "404 page not found"
                return exc.code, raw.decode()

    def until(self, check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        eventually(check, what, timeout=timeout, interval=0.1)


def find_kubectl() -> str | None:
    return kubectl_binary()


class Kubectl:
    def __init__(self, binary: str, config: Path, home: Path) -> None:
        self.binary = binary
        self.env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "KUBECONFIG": str(config)}

    def __call__(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            input=stdin,
            check=False,
        )

    def apply(self, docs: list[dict[str, Any]]) -> None:
        done = self("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        assert done.returncode == 0, done.stderr


def capa_kubeconfig(server: RunningServer | Server, path: Path) -> Path:
    """An admin kubeconfig for ``capa serve`` running in this process, written to ``path``."""
    running = server.running if isinstance(server, Server) else server
    return running.write_kubeconfig(path)
