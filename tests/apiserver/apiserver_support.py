"""Helpers of the API server tests: the example objects and a handle on a running server."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from capa_py.apiserver import RunningServer
from capa_py.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "aws-cluster-machines.yaml"
GROUP = "infrastructure.cluster.x-k8s.io"
VERSION = "v1beta2"
BOOKMARK_INTERVAL = 0.3


def example(kind: str) -> dict[str, Any]:
    """The first document of ``kind`` in the example manifest."""
    for doc in yaml.safe_load_all(EXAMPLE.read_text()):
        if doc and doc["kind"] == kind:
            return copy.deepcopy(doc)  # type: ignore[no-any-return]
    raise KeyError(kind)


def aws_cluster(name: str = "demo", labels: dict[str, str] | None = None) -> dict[str, Any]:
    doc = example("AWSCluster")
    doc["metadata"] = {"name": name, "namespace": "default", "labels": labels or {}}
    return doc


class Server:
    """A running server and its store; ``http`` sends raw requests and returns (status, JSON body)."""

    def __init__(self, running: RunningServer, store: SQLiteStore) -> None:
        self.running = running
        self.store = store
        self.url = running.url
        self.context = running.client_context()

    def http(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", **headers: str
    ) -> tuple[int, Any]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", content_type)
        for key, value in headers.items():
            request.add_header(key.replace("_", "-"), value)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def api_client(self) -> client.ApiClient:
        """The official client, as the server's admin (a kubeconfig with a client certificate)."""
        configuration = client.Configuration()
        config.load_kube_config_from_dict(  # type: ignore[no-untyped-call]
            self.running.kubeconfig(), client_configuration=configuration, persist_config=False
        )
        return client.ApiClient(configuration)


ServerFactory = Callable[..., Server]
