"""Each kubectl from 1.27 to 1.33 runs one fixed script (apply, server-side apply, diff, explain, get, watch,
describe, label, annotate, patch, edit, wait, delete, events; see ``kubectl_script``) against capa serve and
against the real kube-apiserver, and every step must show the same on both.

The exceptions are the steps capa serve cannot do yet because of a gap that is being closed:
``EXPECTED_FAILURES`` names each with the gap and the versions it concerns, and the test asserts they still
fail exactly so (the cell and a fragment of capa serve's message), so that an entry whose gap is closed
fails until it is removed. The matrix is printed at the end of the run and, when ``CAPA_KUBECTL_MATRIX``
names a file, written there as Markdown (docs/conformance.md carries it).
"""

from __future__ import annotations

import difflib
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conformance.endpoints import Endpoint
from tests.conformance.kubectl_script import (
    DIFFERS,
    EDITOR,
    FAILS_ON_CAPA,
    MATRIX,
    SAME,
    STEPS,
    Kubectl,
    Outcome,
    compare,
    kubeconfig_for,
    run_script,
)
from tests.peers.kubectl import VERSIONS, find_kubectl


@dataclass(frozen=True)
class Expected:
    """A step capa serve gets wrong until ``gap`` is closed: the matrix cell it shows and a fragment of
    what capa serve's kubectl printed (stdout or stderr)."""

    gap: str
    cell: str
    fragment: str
    only: str = ""
    """For a step that differs: a regular expression every line that differs must match (so that the
    listed difference hides no other)."""


# (step, "first-last" kubectl versions, inclusive) -> what capa serve shows until the gap is closed. Empty:
# the gaps listed here when the matrix was first run (/openapi/v2, server-side apply, printer columns) are
# closed; an entry is added only with a gap that is being worked on.
EXPECTED_FAILURES: dict[tuple[str, str], Expected] = {}

# Differences the differential suite also lists (tests/conformance/test_differential.py KNOWN_DIFFERENCES),
# by design rather than a gap being closed; same form as EXPECTED_FAILURES.
KNOWN_DIFFERENCES: dict[tuple[str, str], Expected] = {}


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def expected_failure(step: str, version: str) -> Expected | None:
    for (listed, versions), expected in (EXPECTED_FAILURES | KNOWN_DIFFERENCES).items():
        first, _, last = versions.partition("-")
        if listed == step and _minor(first) <= _minor(version) <= _minor(last or first):
            return expected
    return None


def _listed(entries: dict[tuple[str, str], Expected]) -> set[tuple[str, str]]:
    """The (step, version) pairs ``entries`` cover."""
    covered = set()
    for step, versions in entries:
        first, _, last = versions.partition("-")
        covered |= {(step, v) for v in VERSIONS if _minor(first) <= _minor(v) <= _minor(last or first)}
    return covered


def check(step: str, version: str, cell: str, ours: Outcome, theirs: Outcome) -> str | None:
    """What is wrong with one step's cell, or None."""
    expected = expected_failure(step, version)
    shown = f"    capa serve:\n{_indent(ours.text())}\n    kube-apiserver:\n{_indent(theirs.text())}"
    if expected is None:
        if cell == SAME:
            return None
        return f"kubectl {version}, step {step!r}: {cell}\n{shown}"
    if cell != expected.cell:
        return (
            f"kubectl {version}, step {step!r}: listed ({expected.gap}) as "
            f"{expected.cell!r} but now {cell!r}; remove or update the entry\n{shown}"
        )
    if expected.fragment not in ours.text():
        return (
            f"kubectl {version}, step {step!r}: still {cell!r}, but capa serve no longer says "
            f"{expected.fragment!r} ({expected.gap})\n{shown}"
        )
    unexpected = [line for line in differing_lines(ours, theirs) if not re.search(expected.only, line[2:])]
    if expected.only and unexpected:
        return (
            f"kubectl {version}, step {step!r}: differs in more than {expected.gap}:\n"
            + "\n".join(unexpected)
            + f"\n{shown}"
        )
    return None


def differing_lines(ours: Outcome, theirs: Outcome) -> list[str]:
    """The lines only capa serve showed (``- ``) and only kube-apiserver showed (``+ ``)."""
    left = [f"exit {ours.code}", *ours.stdout, *ours.stderr]
    right = [f"exit {theirs.code}", *theirs.stdout, *theirs.stderr]
    return [line for line in difflib.ndiff(left, right) if line[:2] in ("- ", "+ ")]


def _indent(text: str) -> str:
    return "\n".join(f"      {line}" for line in text.splitlines())


@pytest.mark.parametrize("version", VERSIONS)
def test_kubectl_sees_the_same_on_capa_serve_and_kube_apiserver(
    version: str, capa_serve: Endpoint, kube_apiserver: Endpoint, tmp_path: Path
) -> None:
    found = find_kubectl(version)
    if found.path is None:
        MATRIX.skipped[version] = found.reason
        pytest.skip(found.reason)
    namespace = f"kubectl-{version.replace('.', '-')}-{secrets.token_hex(3)}"
    for endpoint in (capa_serve, kube_apiserver):
        reply = endpoint.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        assert reply.status == 201, f"{endpoint.name}: {reply.body}"
    editor = tmp_path / "editor.sh"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    runs: dict[str, dict[str, Outcome]] = {}
    started = time.monotonic()
    for endpoint in (capa_serve, kube_apiserver):
        workdir = tmp_path / endpoint.name.replace(" ", "-")
        workdir.mkdir()
        kubeconfig = kubeconfig_for(endpoint, workdir / "kubeconfig")
        kubectl = Kubectl(found.path, kubeconfig, workdir / "home", namespace, editor, workdir)
        runs[endpoint.name] = run_script(kubectl, endpoint)
    MATRIX.seconds[version] = time.monotonic() - started
    for endpoint in (capa_serve, kube_apiserver):
        endpoint.call("DELETE", f"/api/v1/namespaces/{namespace}")

    problems = []
    ours, theirs = runs[capa_serve.name], runs[kube_apiserver.name]
    for step in STEPS:
        cell = compare(ours[step], theirs[step])
        MATRIX.cells[(step, version)] = cell
        expected = expected_failure(step, version)
        if expected is not None:
            kind = "by design" if (step, version) in _listed(KNOWN_DIFFERENCES) else "until capa serve has"
            MATRIX.notes[(step, version)] = f"{kind}: {expected.gap}"
        problem = check(step, version, cell, ours[step], theirs[step])
        if problem is not None:
            problems.append(problem)
    assert not problems, "\n\n".join(problems)


def test_expected_failures_name_steps_versions_and_known_cells() -> None:
    """Every entry of EXPECTED_FAILURES and KNOWN_DIFFERENCES names a step of the script, versions of the
    matrix and a cell the matrix can show (a typo would otherwise silently never match)."""
    for (step, versions), expected in (EXPECTED_FAILURES | KNOWN_DIFFERENCES).items():
        assert step in STEPS, step
        for version in versions.split("-"):
            assert version in VERSIONS, versions
        assert expected.cell in (FAILS_ON_CAPA, DIFFERS), expected
        assert expected.gap, expected
        assert expected.fragment, expected


def test_a_kubectl_version_is_found_on_path_or_reported_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finder takes ``kubectl.<version>`` from PATH first, and names where it looked when it is absent."""
    fake = tmp_path / "kubectl.9.99"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert find_kubectl("9.99").path == fake
    missing = find_kubectl("9.98")
    assert missing.path is None
    assert "kubectl.9.98 is not installed: looked on PATH" in missing.reason
