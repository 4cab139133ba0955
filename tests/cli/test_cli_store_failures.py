"""The ``capa`` command on a store it cannot write, a damaged one, a full disk and a newer capa-py's file:
one ``error:`` line and a non-zero exit, never a traceback (real ``capa`` subprocesses, real SQLite files).

Before: a read-only store could not even be read (``unable to open database file`` / ``attempt to write a
readonly database``, exit 2); a damaged page, a full disk, a renamed column and a field of a newer version
ended in a SQLite or pydantic traceback, and the full disk kept the first objects of the apply.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py import __version__
from tests.e2e.e2e_support import EXAMPLE, Capa, Run
from tests.harness.store_faults import STORE_FREE_PAGES
from tests.store.test_store_failures import NEWER, corrupt

pytestmark = pytest.mark.slow


@pytest.fixture
def capa(tmp_path: Path) -> Capa:
    state = tmp_path / "store" / "state.db"
    state.parent.mkdir()
    capa = Capa(state=state, home=tmp_path / "home")
    capa.ok("apply", "--no-wait", "-f", str(EXAMPLE))
    return capa


def _one_error(run: Run) -> str:
    """The single line a failed command printed on stderr."""
    assert run.returncode != 0, str(run)
    assert "Traceback" not in run.stderr, str(run)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, str(run)
    assert lines[0].startswith("error: "), str(run)
    return lines[0]


def _names(capa: Capa, kind: str) -> list[str]:
    return sorted(item["metadata"]["name"] for item in capa.get(kind))


def _sql(path: Path, sql: str, params: tuple[Any, ...] = ()) -> None:
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(sql, params)
    finally:
        conn.close()


# -- read-only ------------------------------------------------------------------------------------------
@pytest.fixture(params=["file", "directory"])
def read_only(request: pytest.FixtureRequest, capa: Capa) -> Iterator[Any]:
    """``run(*args)``: capa on the store with the file (or its whole directory) not writable. As root, who
    writes through file modes, the file is made immutable (chattr +i) or the directory mounted read-only
    in a mount namespace of the command's own."""
    directory, state = capa.state.parent, capa.state
    restore: list[Any] = []
    prefix: list[str] = []
    if os.geteuid() != 0:
        if request.param == "directory":
            directory.chmod(0o555)
            restore.append(lambda: directory.chmod(0o755))
        state.chmod(0o444)
        restore.append(lambda: state.chmod(0o644))
    elif request.param == "file":
        if (
            shutil.which("chattr") is None
            or subprocess.run(["chattr", "+i", str(state)], check=False).returncode != 0
        ):
            pytest.skip("cannot make the file immutable here (chattr)")
        restore.append(lambda: subprocess.run(["chattr", "-i", str(state)], check=True))
    else:
        if shutil.which("unshare") is None:
            pytest.skip("no unshare to mount the directory read-only")
        script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
        prefix = ["unshare", "--mount", "sh", "-c", script, str(directory)]

    def run(*args: str) -> Run:
        argv = ["--state", str(state), *args]
        started = time.monotonic()
        done = subprocess.run(
            [*prefix, sys.executable, "-m", "capa_app.cli", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            env=capa.env(),
            cwd=capa.home,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        return Run(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)

    try:
        yield run
    finally:
        for undo in reversed(restore):
            undo()


def test_a_read_only_store_is_read_and_writes_are_refused_in_one_line(capa: Capa, read_only: Any) -> None:
    listed = read_only("get", "awsmachines", "-o", "json")
    assert listed.returncode == 0, str(listed)
    assert len(json.loads(listed.stdout)["items"]) == 3, str(listed)
    one = read_only("get", "cluster", "demo")
    assert one.returncode == 0, str(one)
    assert "demo" in one.stdout, str(one)

    for write in (("apply", "--no-wait", "-f", str(EXAMPLE)), ("delete", "secret", "demo-bootstrap")):
        refused = _one_error(read_only(*write))
        assert refused.startswith(f"error: the store at {capa.state} is read-only ("), refused
        assert refused.endswith("; nothing was changed"), refused
    assert "demo-bootstrap" in _names(capa, "secrets")


# -- damaged, full, newer ---------------------------------------------------------------------------------
def test_a_damaged_store_says_so_in_one_line_naming_the_file_and_recover(capa: Capa, tmp_path: Path) -> None:
    many = tmp_path / "many.yaml"
    many.write_text(yaml.safe_dump_all(_secrets(60)))
    capa.ok("apply", "--no-wait", "-f", str(many))
    corrupt(capa.state)
    for command in (("get", "secrets"), ("apply", "--no-wait", "-f", str(many))):
        line = _one_error(capa.run(*command))
        assert f"error: the store at {capa.state} is damaged (" in line, line
        assert f"'sqlite3 {capa.state} .recover | sqlite3 recovered.db'" in line, line


def _secrets(count: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"bulk-{i:03d}", "namespace": "default"},
            "stringData": {"value": "x" * 2000},
        }
        for i in range(count)
    ]


def test_an_apply_on_a_full_disk_stores_nothing_and_says_so_in_one_line(capa: Capa, tmp_path: Path) -> None:
    manifest = tmp_path / "bulk.yaml"
    manifest.write_text(yaml.safe_dump_all(_secrets(400)))
    before = _names(capa, "secrets")
    full = capa.run("apply", "--no-wait", "-f", str(manifest), faults={STORE_FREE_PAGES: "40"})
    assert full.returncode == 1, str(full)
    line = _one_error(full)
    assert (
        line
        == f"error: cannot write the store at {capa.state}: database or disk is full; nothing was changed"
    )
    assert _names(capa, "secrets") == before, "the failed apply stored some of its objects"
    capa.ok("apply", "--no-wait", "-f", str(manifest))
    assert len(_names(capa, "secrets")) == len(before) + 400


def test_a_store_of_a_newer_layout_is_refused_naming_both_versions(capa: Capa) -> None:
    _sql(capa.state, "UPDATE store_meta SET value='2' WHERE name='layout'")
    _sql(capa.state, "UPDATE store_meta SET value=? WHERE name='newest_writer'", (NEWER,))
    for command in (("get", "clusters"), ("apply", "--no-wait", "-f", str(EXAMPLE))):
        line = _one_error(capa.run(*command))
        assert f"its layout is version 2, written by capa-py {NEWER}" in line, line
        assert f"this capa-py ({__version__}) knows layout 1" in line, line


def test_a_renamed_column_is_refused_in_one_line(capa: Capa) -> None:
    _sql(capa.state, "ALTER TABLE objects RENAME COLUMN doc TO document")
    line = _one_error(capa.run("get", "clusters"))
    assert "its table objects has no column doc" in line, line


def test_an_object_with_a_field_of_a_newer_version_is_refused_in_one_line(capa: Capa) -> None:
    import sqlite3

    conn = sqlite3.connect(capa.state)
    try:
        ((doc,),) = list(conn.execute("SELECT doc FROM objects WHERE kind='AWSCluster'"))
        document = json.loads(doc)
        document["spec"]["futureField"] = True
        with conn:
            conn.execute("UPDATE objects SET doc=? WHERE kind='AWSCluster'", (json.dumps(document),))
            conn.execute("UPDATE store_meta SET value=? WHERE name='newest_writer'", (NEWER,))
    finally:
        conn.close()
    line = _one_error(capa.run("get", "awsclusters"))
    assert line.startswith("error: cannot read AWSCluster default/demo from the store: spec.futureField"), (
        line
    )
    assert f"written by capa-py {NEWER}" in line, line
    assert capa.run("get", "clusters").returncode == 0
