"""``capa serve --tls-cert-dir``: the store over HTTPS, with a kubeconfig that trusts the certificate.

The certificate is a self-signed one for 127.0.0.1 made per test; the official client (through the kube
store) and kubectl (when on PATH) verify it through the written kubeconfig's ``certificate-authority-data``.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from capa_py.api.core import ConfigMap
from capa_py.store.kube import KubeStore
from tests.apiserver.apiserver_support import ROOT
from tests.webhooks.certificates import write_certificate


def _env(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PYTHONPATH": str(ROOT)}


def _serve(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "capa_app.cli", "--state", str(tmp_path / "state.db"), "serve", "--port", "0",
         *extra],
        env=_env(tmp_path), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture
def https_kubeconfig(tmp_path: Path) -> Iterator[tuple[Path, bytes]]:
    certs = tmp_path / "certs"
    pem = write_certificate(certs, common_name="capa-serve")
    kubeconfig = tmp_path / "kubeconfig"
    server = _serve(tmp_path, "--tls-cert-dir", str(certs), "--write-kubeconfig", str(kubeconfig))
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert " on https://127.0.0.1:" in first, f"capa serve printed {first!r}"
        yield kubeconfig, pem
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(30)
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()
    assert code == 0


def test_the_kubeconfig_trusts_the_served_certificate_and_the_client_verifies_it(
    https_kubeconfig: tuple[Path, bytes],
) -> None:
    kubeconfig, pem = https_kubeconfig
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    assert cluster["server"].startswith("https://127.0.0.1:")
    assert base64.b64decode(cluster["certificate-authority-data"]) == pem

    store = KubeStore.from_kubeconfig(kubeconfig)
    try:
        store.create(ConfigMap.model_validate({"metadata": {"name": "over-tls"}, "data": {"k": "v"}}))
        assert store.get(ConfigMap, "over-tls", "default").data == {"k": "v"}
    finally:
        store.close()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_talks_to_the_https_server(https_kubeconfig: tuple[Path, bytes], tmp_path: Path) -> None:
    kubeconfig, _ = https_kubeconfig
    env = {**_env(tmp_path), "KUBECONFIG": str(kubeconfig)}
    done = subprocess.run(
        ["kubectl", "create", "namespace", "tls-works"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        ["kubectl", "get", "ns", "-o", "name"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "namespace/tls-works" in listed.stdout


def test_a_certificate_directory_without_the_files_exits_2_naming_it(tmp_path: Path) -> None:
    server = _serve(tmp_path, "--tls-cert-dir", str(tmp_path / "nothing-here"))
    out, err = server.communicate(timeout=60)
    assert server.returncode == 2, (out, err)
    assert "--tls-cert-dir" in err
    assert "nothing-here" in err
    assert not (tmp_path / "state.db").exists(), "nothing is created when the server cannot start"
