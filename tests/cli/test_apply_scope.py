"""``capa apply -f`` reconciles the clusters of its manifests: another cluster in the state costs nothing.

Against a moto server, through the CLI with ``-o json``: the AWS calls applying cluster beta's file costs
are the same whether the state file also holds a ready cluster alpha or not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.cli_support import Cli
from tests.harness.moto_server import MotoServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machines.yaml"


def _manifest(directory: Path, name: str) -> Path:
    """The example cluster with ``demo`` renamed ``name`` (one control-plane machine, two workers)."""
    path = directory / f"{name}.yaml"
    path.write_text(EXAMPLE.read_text().replace("demo", name))
    return path


def _apply(cli: Cli, server: MotoServer, manifest: Path, state: Path) -> dict[str, Any]:
    result = cli(
        "apply", "-f", str(manifest), "--aws-endpoint", server.url, "-o", "json", "--timeout", "3m",
        state_path=state,
    )  # fmt: skip
    assert result.exit_code == 0, str(result)
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["converged"], document["states"]
    return document


def _mutating(document: dict[str, Any]) -> dict[str, int]:
    from capa_py.aws.accounting import is_mutating

    calls: dict[str, int] = document["awsCalls"]["byOperation"]
    return {op: n for op, n in calls.items() if is_mutating(op.split(":", 1)[1])}


def test_applying_one_clusters_file_costs_the_same_calls_with_another_cluster_stored(
    cli: Cli, cli_moto: MotoServer, tmp_path: Path
) -> None:
    alpha, beta = _manifest(tmp_path, "alpha"), _manifest(tmp_path, "beta")

    cli_moto.reset()
    alone = tmp_path / "alone.db"
    created_alone = _apply(cli, cli_moto, beta, alone)
    steady_alone = _apply(cli, cli_moto, beta, alone)

    cli_moto.reset()
    both = tmp_path / "both.db"
    _apply(cli, cli_moto, alpha, both)
    created = _apply(cli, cli_moto, beta, both)
    steady = _apply(cli, cli_moto, beta, both)

    assert _mutating(created) == _mutating(created_alone), (
        f"creating beta beside alpha: {_mutating(created)}; alone: {_mutating(created_alone)}"
    )
    assert steady["awsCalls"]["total"] > 0, "the steady-state apply made no AWS call; the comparison is void"
    assert steady["awsCalls"]["byOperation"] == steady_alone["awsCalls"]["byOperation"], (
        "applying beta's file again costs different calls with alpha stored:\n"
        f"with alpha: {steady['awsCalls']['byOperation']}\n"
        f"alone:      {steady_alone['awsCalls']['byOperation']}"
    )
    assert set(steady["reconciled"]) == set(steady_alone["reconciled"]), steady["reconciled"]
    assert not [key for key in created["reconciled"] + steady["reconciled"] if "alpha" in key], (
        f"applying beta's file reconciled alpha: {created['reconciled']} then {steady['reconciled']}"
    )
    assert {o["metadata"]["name"] for o in steady["objects"]} == {
        "beta", "beta-control-plane-0", "beta-worker-0", "beta-worker-1",
    }  # fmt: skip
