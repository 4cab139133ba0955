"""The ``--state`` path: a path that is not a store is one line and exit 2; reads never create a store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.cli_support import Cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machines.yaml"


def _one_error_line(result_stderr: str) -> str:
    lines = [line for line in result_stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got:\n{result_stderr}"
    assert "Traceback" not in result_stderr
    return lines[0]


@pytest.mark.parametrize("command", [("get", "clusters"), ("apply", "-f", str(EXAMPLE), "--no-wait")])
def test_a_text_file_as_state_is_exit_2_naming_the_path(
    cli: Cli, tmp_path: Path, command: tuple[str, ...]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list: eggs, milk\n" * 20)
    result = cli(*command, state_path=notes)
    assert result.exit_code == 2, str(result)
    line = _one_error_line(result.stderr)
    assert str(notes) in line, str(result)
    assert "not a capa store" in line, str(result)
    assert notes.read_text().startswith("shopping list"), "the file was changed"


@pytest.mark.parametrize("command", [("get", "clusters"), ("apply", "-f", str(EXAMPLE), "--no-wait")])
def test_a_directory_as_state_is_exit_2_naming_the_path(
    cli: Cli, tmp_path: Path, command: tuple[str, ...]
) -> None:
    result = cli(*command, state_path=tmp_path)
    assert result.exit_code == 2, str(result)
    line = _one_error_line(result.stderr)
    assert str(tmp_path) in line, str(result)
    assert "directory" in line, str(result)


def test_get_on_a_missing_store_reads_it_as_empty_and_creates_nothing(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir" / "state.db"
    table = cli("get", "clusters", state_path=missing)
    assert table.exit_code == 0, str(table)
    assert f"No store at {missing}" in table.stderr, str(table)
    as_json = cli("get", "awsclusters", "-A", "-o", "json", state_path=missing)
    assert as_json.exit_code == 0, str(as_json)
    assert json.loads(as_json.stdout)["items"] == []
    one = cli("get", "cluster", "demo", state_path=missing)
    assert one.exit_code == 1, str(one)
    assert not (tmp_path / "nonexistent").exists(), "a read-only command created the store's directory"


def test_resources_offline_on_a_missing_store_creates_nothing(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "absent" / "state.db"
    result = cli("resources", "--offline", "-o", "json", state_path=missing)
    assert result.exit_code == 0, str(result)
    assert json.loads(result.stdout) == {"resources": []}
    assert not missing.parent.exists()


def test_audit_refuses_a_missing_store_instead_of_creating_one(
    cli: Cli, tmp_path: Path, closed_endpoint: str
) -> None:
    missing = tmp_path / "absent" / "state.db"
    result = cli("audit", "--aws-endpoint", closed_endpoint, state_path=missing)
    assert result.exit_code == 2, str(result)
    assert str(missing) in _one_error_line(result.stderr)
    assert not missing.parent.exists()


def test_write_commands_still_create_the_store(cli: Cli, tmp_path: Path) -> None:
    fresh = tmp_path / "new" / "state.db"
    result = cli("apply", "-f", str(EXAMPLE), "--no-wait", state_path=fresh)
    assert result.exit_code == 0, str(result)
    assert fresh.exists()
