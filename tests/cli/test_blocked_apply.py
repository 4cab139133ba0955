"""An apply blocked on something that cannot change by itself says why, on a terminal or not.

A Machine naming a Cluster that does not exist (and its AWSMachine, which waits on it) can never become
ready: apply exits 1 with the ``ClusterNotFound`` condition's reason and message per object, instead of
waiting out its timeout. No AWS call is needed to get there, so these run in-process.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from capa_app.cli import aws_commands
from tests.cli.cli_support import Cli, CliResult
from tests.e2e.e2e_support import EXAMPLE


def _lost_machine(tmp_path: Path) -> Path:
    """The example's worker 0 (Machine, AWSMachine) and bootstrap secret, in cluster ``nowhere``."""
    documents = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    lost = [d for d in documents if d["metadata"]["name"] in ("demo-worker-0", "demo-bootstrap")]
    for doc in lost:
        if doc["kind"] == "Machine":
            doc["spec"]["clusterName"] = "nowhere"
        doc["metadata"].setdefault("labels", {})["cluster.x-k8s.io/cluster-name"] = "nowhere"
    path = tmp_path / "lost.yaml"
    path.write_text(yaml.safe_dump_all(lost, sort_keys=False))
    return path


def _apply(cli: Cli, tmp_path: Path, endpoint: str) -> CliResult:
    # A long timeout: the test fails (by pytest's own timeout) if apply waits it out.
    return cli("apply", "-f", str(_lost_machine(tmp_path)), "--aws-endpoint", endpoint, "--timeout", "30m")


def test_blocked_apply_without_a_terminal_exits_1_with_each_reason(
    cli: Cli, tmp_path: Path, closed_endpoint: str
) -> None:
    result = _apply(cli, tmp_path, closed_endpoint)
    assert result.exit_code == 1, f"a blocked apply should exit 1:\n{result}"
    assert (
        "error: Machine default/demo-worker-0: ClusterNotFound: cluster default/nowhere (spec.clusterName) "
        "does not exist" in result.stderr
    ), str(result)
    assert "error: AWSMachine default/demo-worker-0: ClusterNotFound: waits on" in result.stderr, str(result)
    assert "not ready after" not in result.stderr, str(result)


def test_blocked_apply_on_a_terminal_shows_the_objects_blocked_and_exits_1(
    cli: Cli, tmp_path: Path, closed_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=250, color_system=None)
    monkeypatch.setattr(aws_commands, "stderr", terminal)
    result = _apply(cli, tmp_path, closed_endpoint)
    assert result.exit_code == 1, f"a blocked apply should exit 1:\n{result}\n{screen.getvalue()}"
    text = screen.getvalue()
    rows = [line for line in text.splitlines() if "machine/demo-worker-0" in line and "blocked" in line]
    assert rows, f"the live table does not show machine/demo-worker-0 blocked:\n{text}"
    assert "error: Machine default/demo-worker-0: ClusterNotFound" in text, text


def test_blocked_apply_as_json_names_each_blocked_object_and_its_reason(
    cli: Cli, tmp_path: Path, closed_endpoint: str
) -> None:
    manifest = str(_lost_machine(tmp_path))
    result = cli("apply", "-f", manifest, "--aws-endpoint", closed_endpoint, "--timeout", "30m", "-o", "json")
    assert result.exit_code == 1, f"a blocked apply should exit 1:\n{result}"
    document = json.loads(result.stdout)
    assert document["converged"] is False, document
    assert document["timedOut"] is False, document
    blocked = document["blocked"]
    assert set(blocked) == {"Machine default/demo-worker-0", "AWSMachine default/demo-worker-0"}, blocked
    assert {b["reason"] for b in blocked.values()} == {"ClusterNotFound"}, blocked
    assert "cluster default/nowhere" in blocked["Machine default/demo-worker-0"]["message"], blocked
