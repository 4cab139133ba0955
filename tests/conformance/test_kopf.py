"""A kopf operator (``kopf_operator.py``, run as ``kopf run --standalone`` in its own process) against each
server: it must put its finalizer on a new Widget, write its creation handler's result into the Widget's
status, and on deletion run its deletion handler and remove its finalizer, so that the Widget goes away.

The Widget kind is a CRD of the test's own (``widgets.example.com``), applied by the test as an operator's
installation applies its CRDs. ``--standalone`` leaves out kopf's peering (its own ``kopfpeerings`` CRDs).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.endpoints import Endpoint, Reply
from tests.conformance.kubectl_script import kubeconfig_for
from tests.peers.crds import CRD_PATH
from tests.support.eventually import eventually

OPERATOR = Path(__file__).with_name("kopf_operator.py")
FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
"""kopf's finalizer (its default ``settings.persistence.finalizer``)."""
WIDGETS = "/apis/example.com/v1/namespaces/{namespace}/widgets"
TIMEOUT = 60.0
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("kopf") is None, reason="kopf is not installed (pip install -e '.[dev]')"
)


def reply_when(
    what: str, probe: Callable[[], Reply], done: Callable[[Reply], bool], log: Path | None = None
) -> Reply:
    """Poll ``probe`` until ``done`` holds, or fail after ``TIMEOUT`` seconds showing the last reply and
    the operator's log."""
    replies: list[Reply] = []

    def reply() -> Reply | None:
        replies.append(probe())
        return replies[-1] if done(replies[-1]) else None

    def operator_log() -> str:
        lines = log.read_text(errors="replace").splitlines()[-30:] if log and log.exists() else []
        last = f"last reply {replies[-1].status} {replies[-1].body}" if replies else "no reply"
        return f"{last}\noperator log:\n" + "\n".join(lines)

    found = eventually(reply, what, timeout=TIMEOUT, interval=0.2, detail=operator_log)
    assert found is not None
    return found


class CrdNotServed(Exception):
    """The server does not serve the kind of a CRD a client applied within the time allowed."""


def install_widget_crd(endpoint: Endpoint, timeout: float = 20.0) -> None:
    """Apply the Widget CRD and wait until it is Established and its kind is served (CrdNotServed when it
    is not, after ``timeout`` seconds)."""
    reply = endpoint.call("POST", CRD_PATH, WIDGET_CRD)
    assert reply.status in (201, 409), f"{endpoint.name}: creating the Widget CRD: {reply.body}"
    conditions: list[dict[str, Any]] = []

    def served() -> bool:
        crd = endpoint.call("GET", f"{CRD_PATH}/widgets.example.com").body or {}
        conditions[:] = (crd.get("status") or {}).get("conditions") or []
        established = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        return established and endpoint.call("GET", "/apis/example.com/v1").status == 200

    try:
        eventually(served, "the Widget CRD served", timeout=timeout, interval=0.2)
    except AssertionError as exc:
        raise CrdNotServed(
            f"{endpoint.name}: the Widget CRD is not served after {timeout:.0f} s "
            f"(conditions {conditions}, /apis/example.com/v1 answers "
            f"{endpoint.call('GET', '/apis/example.com/v1').status})"
        ) from exc


class Operator:
    """``kopf run --standalone`` on the operator module, watching one namespace, its output in ``log``."""

    def __init__(self, kubeconfig: Path, namespace: str, workdir: Path) -> None:
        self.log = workdir / "operator.log"
        self.deletions = workdir / "deletions"
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(workdir),
            "KUBECONFIG": str(kubeconfig),
            "WIDGET_DELETIONS": str(self.deletions),
        }
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kopf",
                    "run",
                    "--standalone",
                    "--namespace",
                    namespace,
                    "--verbose",
                    str(OPERATOR),
                ],
                env=env,
                cwd=workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def deleted(self) -> list[str]:
        return self.deletions.read_text().split() if self.deletions.exists() else []

    def stop(self) -> int:
        """SIGTERM (kopf stops gracefully), then SIGKILL after 20 s; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


@pytest.fixture(params=["capa serve", "kube-apiserver"])
def server(request: pytest.FixtureRequest) -> Endpoint:
    name = "capa_serve" if request.param == "capa serve" else "kube_apiserver"
    endpoint: Endpoint = request.getfixturevalue(name)
    return endpoint


@pytest.fixture
def kopf_namespace(server: Endpoint) -> Iterator[str]:
    name = f"kopf-{secrets.token_hex(3)}"
    reply = server.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert reply.status == 201, f"{server.name}: {reply.body}"
    yield name
    server.call("DELETE", f"/api/v1/namespaces/{name}")


def test_a_kopf_operator_finalizes_and_reports_status(
    server: Endpoint, kopf_namespace: str, tmp_path: Path
) -> None:
    install_widget_crd(server)
    running = Operator(kubeconfig_for(server, tmp_path / "kubeconfig"), kopf_namespace, tmp_path)
    try:
        check_operator(server, kopf_namespace, running)
    finally:
        running.stop()


def check_operator(server: Endpoint, namespace: str, running: Operator) -> None:
    widgets = WIDGETS.format(namespace=namespace)
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"size": 3},
    }
    reply = server.call("POST", widgets, widget)
    assert reply.status == 201, f"{server.name}: creating a Widget: {reply.status} {reply.body}"

    def handled(reply: Reply) -> bool:
        body = reply.body or {}
        finalizers = (body.get("metadata") or {}).get("finalizers") or []
        return FINALIZER in finalizers and "created" in (body.get("status") or {})

    seen = reply_when(
        "kopf's finalizer and the creation handler's status",
        lambda: server.call("GET", f"{widgets}/w1"),
        handled,
        running.log,
    )
    assert seen.body["status"]["created"] == {"size": 3, "state": "ready"}
    assert running.process.poll() is None, "the operator exited"

    deleting = server.call("DELETE", f"{widgets}/w1")
    assert deleting.status in (200, 202), deleting.body
    reply_when(
        "the Widget's deletion",
        lambda: server.call("GET", f"{widgets}/w1"),
        lambda r: r.status == 404,
        running.log,
    )
    assert running.deleted() == ["w1"], "the deletion handler ran once for w1"
    assert running.stop() == 0, running.log.read_text(errors="replace")[-3000:]
