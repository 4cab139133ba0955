"""Fuzzing capa serve's API: random paths, methods, query parameters and bodies sent to a running
in-process server. The server never answers 500 (a bug) and every refusal is a ``Status`` (a 504 Timeout
is an answer too: a resourceVersion from the future). Bounded (``max_examples``, the future's wait
shortened) so the suite stays fast; ``CAPA_FUZZ_EXAMPLES=2000`` runs a longer search."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capa_py.apiserver import listoptions, start_in_thread
from capa_py.store import SQLiteStore

FUZZ = settings(
    max_examples=int(os.environ.get("CAPA_FUZZ_EXAMPLES", "60")),
    # The suite's run is repeatable (a fixed seed); CAPA_FUZZ_EXAMPLES=N searches anew with N examples.
    derandomize="CAPA_FUZZ_EXAMPLES" not in os.environ,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
GROUP_VERSIONS = [
    "/api/v1",
    "/apis/infrastructure.cluster.x-k8s.io/v1beta2",
    "/apis/cluster.x-k8s.io/v1beta1",
    "/apis/apps/v1",
    "/apis/coordination.k8s.io/v1",
    "/apis/apiextensions.k8s.io/v1",
    "/apis/authorization.k8s.io/v1",
]
RESOURCES = ["configmaps", "secrets", "namespaces", "awsclusters", "awsmachines", "leases", "deployments"]
PARAMETERS = [
    "resourceVersion",
    "resourceVersionMatch",
    "limit",
    "continue",
    "labelSelector",
    "fieldSelector",
    "dryRun",
    "fieldValidation",
    "fieldManager",
    "force",
    "propagationPolicy",
    "sendInitialEvents",
    "allowWatchBookmarks",
    "includeObject",
]
MEDIA_TYPES = [
    "application/json",
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
]
words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
names = st.sampled_from(["fuzz", "default", "kube-system"]) | words
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), words)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(words, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def paths(draw: st.DrawFn) -> str:
    parts = [draw(st.sampled_from(GROUP_VERSIONS))]
    if draw(st.booleans()):
        parts += ["namespaces", draw(names)]
    parts.append(draw(st.sampled_from(RESOURCES) | words))
    if draw(st.booleans()):
        parts.append(draw(names))
        if draw(st.booleans()):
            parts.append(draw(st.sampled_from(["status", "scale"]) | words))
    return "/".join(urllib.parse.quote(p, safe="") if i else p for i, p in enumerate(parts))


@st.composite
def queries(draw: st.DrawFn) -> str:
    values = st.sampled_from(["", "0", "1", "-1", "abc", "999999999", "true", "All", "Exact", "NotOlderThan"])
    chosen = draw(st.dictionaries(st.sampled_from(PARAMETERS) | words, values | words, max_size=4))
    return urllib.parse.urlencode(chosen)


@st.composite
def bodies(draw: st.DrawFn) -> bytes | None:
    kind = draw(st.sampled_from(["none", "bytes", "json", "object"]))
    if kind == "none":
        return None
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    doc: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(["v1", "infrastructure.cluster.x-k8s.io/v1beta2"]) | words),
        "kind": draw(st.sampled_from(["ConfigMap", "Secret", "AWSCluster", "Namespace"]) | words),
        "metadata": draw(st.fixed_dictionaries({"name": names}, optional={"labels": json_values})),
    }
    doc.update(draw(st.dictionaries(st.sampled_from(["data", "spec", "status", "stringData"]), json_values)))
    return json.dumps(doc).encode()


@dataclass(frozen=True)
class Target:
    """The server, and a TLS context presenting its admin's client certificate."""

    host: str
    port: int
    context: ssl.SSLContext


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "state.db"
    with pytest.MonkeyPatch.context() as patch, SQLiteStore(path, poll_interval=0.02) as store:
        patch.setattr(listoptions, "TOO_LARGE_WAIT", 0.05)
        running = start_in_thread(store)
        try:
            parsed = urllib.parse.urlsplit(running.url)
            assert parsed.hostname is not None
            assert parsed.port is not None
            yield Target(parsed.hostname, parsed.port, running.client_context())
        finally:
            running.stop()


def send(server: Target, method: str, path: str, body: bytes | None, media: str) -> tuple[int, bytes]:
    connection = http.client.HTTPSConnection(server.host, server.port, timeout=30, context=server.context)
    try:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = media
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def check(status: int, raw: bytes) -> None:
    assert status != 500, raw[:2000]
    if status >= 400:
        document = json.loads(raw)
        assert document["kind"] == "Status", document
        assert document["code"] == status
        assert document["status"] == "Failure"
        assert status != 504 or document["reason"] == "Timeout"


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]),
    path=paths(),
    query=queries(),
    body=bodies(),
    media=st.sampled_from(MEDIA_TYPES),
)
def test_no_request_is_answered_500_and_every_refusal_is_a_status(
    server: Target, method: str, path: str, query: str, body: bytes | None, media: str
) -> None:
    status, raw = send(server, method, f"{path}?{query}" if query else path, body, media)
    check(status, raw)


@FUZZ
@given(
    path=st.sampled_from(
        ["/api/v1/namespaces/default/configmaps", "/api/v1/namespaces/default/configmaps/fuzz"]
    ),
    media=st.sampled_from(MEDIA_TYPES[1:5]),
    body=bodies(),
)
def test_no_patch_of_an_object_is_answered_500(
    server: Target, path: str, media: str, body: bytes | None
) -> None:
    """Patches of an object that exists, so that they reach the patch code, not a 404."""
    send(
        server,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        b'{"metadata":{"name":"fuzz"}}',
        "application/json",
    )
    status, raw = send(
        server, "PATCH", "/api/v1/namespaces/default/configmaps/fuzz?fieldManager=fuzz", body, media
    )
    check(status, raw)
