"""capa-py installed on a real kube-apiserver as a user installs it, and the controller run against it.

* :func:`kubectl` — the kubectl on PATH (the tests are skipped without one), run with a kubeconfig and a
  HOME of the test's own (kubectl caches discovery under ``$HOME/.kube``);
* :class:`WebhookCertificates` — a CA and a serving certificate for 127.0.0.1 in controller-runtime's
  ``tls.crt``/``tls.key`` layout, for ``capa controller --webhook-cert-dir``;
* :func:`install` — ``capa manifests …`` written to a file and applied with ``kubectl apply -f``;
* :func:`start_controller` — ``capa --kubeconfig <the ServiceAccount's> controller …`` as a subprocess;
* :func:`audited_requests` — what one user asked the API server for, from its audit log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from capa_py.manifests.rbac import NAMESPACE, SERVICE_ACCOUNT
from tests.e2e.e2e_support import ROOT, capa_env
from tests.e2e.test_controller_mode import Background
from tests.peers.cluster import Authority, PeerCluster
from tests.peers.kubectl import find_kubectl
from tests.support.eventually import eventually

CONTROLLER_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
"""Who ``capa controller`` is on the API server: the ServiceAccount ``capa manifests rbac`` binds."""


def kubectl_binary() -> str:
    found = find_kubectl()
    if found.path is None:
        pytest.skip(found.reason)
    return str(found.path)


@dataclass
class Kubectl:
    """``kubectl`` against one cluster, as a user runs it."""

    kubeconfig: Path
    home: Path

    def run(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        self.home.mkdir(parents=True, exist_ok=True)
        completed = subprocess.run(
            [kubectl_binary(), *args],
            capture_output=True,
            text=True,
            env={
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(self.home),
                "KUBECONFIG": str(self.kubeconfig),
            },
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
        if check:
            assert completed.returncode == 0, (
                f"$ kubectl {' '.join(args)}\nexit {completed.returncode}\n"
                f"{completed.stdout}\n{completed.stderr}"
            )
        return completed

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)


def capa(*args: str, home: Path) -> str:
    """``capa ARGS`` (this checkout's) and its output; asserts exit 0."""
    completed = subprocess.run(
        [sys.executable, "-m", "capa_app.cli", *args],
        capture_output=True,
        text=True,
        env=capa_env(home),
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, f"$ capa {' '.join(args)}\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout


def install(kubectl: Kubectl, directory: Path, *manifests: Sequence[str]) -> list[str]:
    """Each ``capa manifests ARGS`` written to a file, then applied in that order with one ``kubectl apply
    -f`` per file; the lines kubectl printed."""
    printed: list[str] = []
    for index, args in enumerate(manifests):
        path = directory / f"manifests-{index}.yaml"
        path.write_text(capa("manifests", *args, home=directory / "home"))
        printed += kubectl.run("apply", "-f", str(path)).stdout.splitlines()
    return printed


@dataclass(frozen=True)
class WebhookCertificates:
    """``directory`` holds ``tls.crt``/``tls.key`` for 127.0.0.1, signed by the CA at ``ca_file``."""

    directory: Path
    ca_file: Path

    @classmethod
    def create(cls, directory: Path) -> WebhookCertificates:
        authority = Authority.create("capa-py-webhook-ca")
        cert, key = authority.issue("capa-py-webhook", hosts=("localhost",), ips=("127.0.0.1",))
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "tls.crt").write_bytes(cert)
        (directory / "tls.key").write_bytes(key)
        ca_file = directory.parent / "webhook-ca.crt"
        ca_file.write_bytes(authority.pem)
        return cls(directory, ca_file)


def start_controller(
    name: str,
    kubeconfig: Path,
    endpoint: str | None,
    workdir: Path,
    *flags: str,
) -> Background:
    """``capa --kubeconfig KUBECONFIG controller --aws-endpoint ENDPOINT FLAGS`` in the background (no
    ``--aws-endpoint`` when ``endpoint`` is None: a controller without the AWS provider), metrics on any free
    port and no probe endpoint unless ``flags`` say otherwise; returns once its controllers run, or it waits
    for the Lease."""
    aws = ["--aws-endpoint", endpoint] if endpoint is not None else []
    process = Background(
        name,
        [
            "--kubeconfig", str(kubeconfig), "controller", *aws,
            "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "0", *flags,
        ],
        capa_env(workdir / f"{name}-home"),
        workdir,
    )  # fmt: skip
    process.wait_for_line(r"controllers running:|waiting for the store lease", timeout=90)
    return process


@contextlib.contextmanager
def running_controller(
    name: str, kubeconfig: Path, endpoint: str | None, workdir: Path, *flags: str
) -> Iterator[Background]:
    """:func:`start_controller`'s process for the block; after it, SIGTERM must stop it with status 0
    (it is killed on the way out whatever happens)."""
    controller = start_controller(name, kubeconfig, endpoint, workdir, *flags)
    try:
        yield controller
        assert controller.stop(signal.SIGTERM) == 0, controller.report()
    finally:
        controller.stop(signal.SIGKILL, timeout=10)


@dataclass(frozen=True)
class Request:
    """One audited request: ``resource`` is ``<plural>[/<subresource>]``, empty for a non-resource URL."""

    group: str
    resource: str
    verb: str
    code: int
    uri: str


def audited_requests(cluster: PeerCluster, user: str) -> list[Request]:
    """Every request ``user`` made, in the order the API server finished them."""
    found = []
    for event in cluster.audit_events():
        if (event.get("user") or {}).get("username") != user:
            continue
        ref = event.get("objectRef") or {}
        resource = str(ref.get("resource") or "")
        if resource and ref.get("subresource"):
            resource += f"/{ref['subresource']}"
        found.append(
            Request(
                group=str(ref.get("apiGroup") or ""),
                resource=resource,
                verb=str(event.get("verb") or ""),
                code=int((event.get("responseStatus") or {}).get("code") or 0),
                uri=str(event.get("requestURI") or ""),
            )
        )
    return found


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 120.0, interval: float = 0.2) -> Any:
    """``condition()``'s first truthy value; fails naming ``what`` once ``timeout`` has passed."""
    return eventually(condition, what, timeout=timeout, interval=interval)
