"""``capa serve`` as a command: HTTPS by default with a certificate authority kept beside the store, the
kubeconfig it writes (an admin client certificate, mode 0600), ``--token-auth-file``, and plain HTTP only
with ``--insecure-http`` on a loopback address. Refusals exit 2 naming the flag, before anything starts."""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.core import Secret
from capa_py.store.kube import KubeStore
from tests.apiserver.apiserver_support import ROOT


def _command(tmp_path: Path, *extra: str) -> list[str]:
    state = str(tmp_path / "state.db")
    return [sys.executable, "-m", "capa_app.cli", "--state", state, "serve", "--port", "0", *extra]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}


@contextmanager
def serving(tmp_path: Path, *extra: str) -> Iterator[str]:
    """``capa serve`` in a process of its own until the block ends: the URL it prints."""
    server = subprocess.Popen(
        _command(tmp_path, *extra),
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert " on " in first, f"capa serve printed {first!r}"
        yield first.rsplit(" on ", 1)[1].strip()
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(30)
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()
    assert code == 0


def _refused(tmp_path: Path, *extra: str) -> str:
    done = subprocess.run(
        _command(tmp_path, *extra),
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "state.db").exists(), "nothing is created when the server cannot start"
    return done.stderr


def _ask(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_serve_makes_its_authority_once_and_the_kubeconfig_is_the_admins(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    with serving(tmp_path, "--write-kubeconfig", str(kubeconfig)) as url:
        assert url.startswith("https://127.0.0.1:")
        assert _mode(kubeconfig) == 0o600
        with KubeStore.from_kubeconfig(kubeconfig) as store:
            store.create(Secret.model_validate({"metadata": {"name": "kept"}, "stringData": {"k": "v"}}))
        document = yaml.safe_load(kubeconfig.read_text())
        ca_pem = base64.b64decode(document["clusters"][0]["cluster"]["certificate-authority-data"])
        anonymous = ssl.create_default_context(cadata=ca_pem.decode())
        status, body = _ask(f"{url}/api/v1/namespaces/default/secrets/kept", anonymous)
        assert (status, body["reason"]) == (401, "Unauthorized")
    directory = tmp_path / "state.db.serve"
    assert _mode(directory) == 0o700
    assert sorted(p.name for p in directory.iterdir()) == [
        ".lock",
        "ca.crt",
        "ca.key",
        "sa.key",
        "tls.crt",
        "tls.key",
    ]
    assert all(_mode(p) == 0o600 for p in directory.iterdir())
    # Served again: the same authority, so the first kubeconfig's certificate still authenticates.
    with serving(tmp_path) as url:
        document["clusters"][0]["cluster"]["server"] = url
        kubeconfig.write_text(yaml.safe_dump(document))
        with KubeStore.from_kubeconfig(kubeconfig) as store:
            assert store.get(Secret, "kept", "default").data is not None


def test_a_token_file_authenticates_over_plain_http_on_loopback(tmp_path: Path) -> None:
    """Authenticated is not authorized: alice, whom no RBAC binding names, is refused 403 by name; the
    token file's member of system:masters may read Secrets."""
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('s3cret,alice,uid-alice,"dev"\nr00t,root,uid-root,"system:masters"\n')
    secrets = "/api/v1/namespaces/default/secrets"
    with serving(tmp_path, "--insecure-http", "--token-auth-file", str(tokens)) as url:
        assert url.startswith("http://127.0.0.1:")
        assert _ask(f"{url}{secrets}")[0] == 401
        assert _ask(f"{url}{secrets}", token="wrong")[0] == 401
        status, body = _ask(f"{url}{secrets}", token="s3cret")
        assert (status, body["reason"]) == (403, "Forbidden")
        assert body["message"] == (
            'secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the '
            'namespace "default"'
        )
        status, body = _ask(f"{url}{secrets}", token="r00t")
        assert (status, body["kind"]) == (200, "SecretList")
        assert _ask(f"{url}/version")[0] == 200


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.0.2.1"])
def test_plain_http_is_refused_off_loopback(tmp_path: Path, bind: str) -> None:
    said = _refused(tmp_path, "--insecure-http", "--bind", bind)
    assert "--insecure-http" in said
    assert bind in said


def test_plain_http_cannot_carry_the_written_kubeconfigs_certificate(tmp_path: Path) -> None:
    said = _refused(tmp_path, "--insecure-http", "--write-kubeconfig", str(tmp_path / "kubeconfig"))
    assert "--write-kubeconfig" in said
    assert not (tmp_path / "kubeconfig").exists()


@pytest.mark.parametrize(
    ("content", "named"),
    [("only-a-token,alice\n", "line 1"), ("good,bob,uid\nshort\n", "line 2"), (None, "tokens.csv")],
)
def test_an_unusable_token_file_exits_2_naming_it(tmp_path: Path, content: str | None, named: str) -> None:
    tokens = tmp_path / "tokens.csv"
    if content is not None:
        tokens.write_text(content)
    said = _refused(tmp_path, "--token-auth-file", str(tokens))
    assert "--token-auth-file" in said
    assert named in said
