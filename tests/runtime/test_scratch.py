"""A process's files on disk (a serving CA's keys, the Kubernetes client's copies of a kubeconfig's inline
certificates) live in its private scratch directory, which the next process removes once it was killed.

Each test gives its processes their own temporary directory (``TMPDIR``), so what they leave is theirs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path

    from capa_py.apiserver.certificates import ephemeral_serving_files, kubeconfig_document
    from capa_py.store.kube_endpoint import client_from_kubeconfig
    from capa_py.workflow.kubeapply import _api_client

    files, holder = ephemeral_serving_files(("127.0.0.1",))
    ca = files.ca_cert.read_bytes()
    document = kubeconfig_document("https://127.0.0.1:1", ca, "c", ca, files.serving_key.read_bytes())
    import yaml
    path = Path(sys.argv[1])
    path.write_text(yaml.safe_dump(document))
    client_from_kubeconfig(path)
    _api_client(document)
    print(files.serving_key, flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def run(tmp: Path, kubeconfig: Path, how: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", KILLED, str(kubeconfig), how],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def left_files(tmp: Path) -> list[Path]:
    return sorted(p for p in tmp.rglob("*") if p.is_file())


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    directory = tmp_path / "tmp"
    directory.mkdir()
    return directory


def test_a_killed_processs_keys_and_certificate_copies_are_removed_by_the_next_process(
    tmp: Path, tmp_path: Path
) -> None:
    killed = run(tmp, tmp_path / "a.kubeconfig", "kill")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    ca_key = Path(killed.stdout.strip().splitlines()[-1])
    scratch = tmp / f"capa-py-{os.getuid()}" / "processes"
    assert ca_key.is_file()
    assert scratch in ca_key.parents
    left = left_files(tmp)
    assert {p.parent.name for p in left} >= {"pki", "kube"}  # certificate copies too, not loose in TMPDIR
    assert all(scratch in p.parents for p in left), left
    assert all(p.stat().st_mode & 0o077 == 0 for p in (tmp / f"capa-py-{os.getuid()}", *scratch.iterdir()))

    finished = run(tmp, tmp_path / "b.kubeconfig", "exit")
    assert finished.returncode == 0, finished.stderr
    assert not ca_key.exists()  # the next process removed the dead one's directory
    assert left_files(tmp) == []  # and its own on its way out
    assert list(scratch.iterdir()) == []


def test_a_live_processs_directory_is_left_alone(tmp: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from capa_py.scratch import process_directory;"
            " print(process_directory(), flush=True); sys.stdin.read()",
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        directory = Path(holder.stdout.readline().strip())
        assert directory.is_dir()
        finished = run(tmp, tmp_path / "c.kubeconfig", "exit")
        assert finished.returncode == 0, finished.stderr
        assert directory.is_dir()  # its lock is held: the other process did not touch it
    finally:
        assert holder.stdin is not None
        assert holder.stdout is not None
        holder.stdin.close()
        holder.wait(timeout=60)
        holder.stdout.close()
    assert not directory.exists()  # removed by its own process on exit
