"""``capa move`` killed with SIGKILL between two store writes, then run again, ends as an uninterrupted move
does: every object once on the target, the graph gone from the source, the clusters unpaused."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from capa_py.api.cluster import Cluster
from capa_py.move import MOVABLE_KINDS
from capa_py.store.sqlite import SQLiteStore
from tests.move.scenario import populate
from tests.support.programs import module_command, program_env

KILL_POINTS = (1, 2, 10, 25, 45, 46, 60, 71, 72)
"""Writes after which the move is killed (of 73): in pausing (1, 2), creating and writing status (up to 45),
deleting (46 to 71) and unpausing (72)."""


def _capa(*args: str, kill_after: int | None = None) -> subprocess.CompletedProcess[str]:
    command = module_command("capa_app.cli", *args)
    if kill_after is not None:
        command = module_command("tests.move.killed_capa", str(kill_after), *args)
    return subprocess.run(
        command,
        env=program_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _keys(path: Path) -> tuple[set[tuple[str, str | None, str]], list[bool]]:
    store = SQLiteStore(path)
    try:
        found = {(o.kind, o.namespace, o.name) for k in MOVABLE_KINDS for o in store.list(k)}
        return found, [c.spec.paused for c in store.list(Cluster)]
    finally:
        store.close()


@pytest.mark.parametrize("kill_after", KILL_POINTS)
def test_a_killed_move_completes_when_run_again(tmp_path: Path, kill_after: int) -> None:
    source, target = tmp_path / "a.db", tmp_path / "b.db"
    store = SQLiteStore(source)
    populate(store)
    store.close()
    before, _ = _keys(source)

    killed = _capa("--state", str(source), "move", "--to-state", str(target), kill_after=kill_after)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    finished = _capa("--state", str(source), "move", "--to-state", str(target))

    assert finished.returncode == 0, finished.stderr
    left, _ = _keys(source)
    moved, paused = _keys(target)
    assert left == {k for k in before if k[0] == "Hardware" and k[2] != "machine1"} | {
        ("Secret", "default", "unrelated")
    }
    assert moved == before - left
    assert paused == [False, False]
