"""The store's lease as the CLI shows it, and a malformed lease duration refused before anything changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.runtime.leader import LEASE_DURATION_ENV, LeaderElector
from capa_py.store import SQLiteStore
from tests.cli.cli_support import Cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster.yaml"
HOLDER = "capa apply pid 4242 on build-host (3fa2c1)"


def test_get_leases_shows_the_store_lease_and_its_holder(cli: Cli, state: Path) -> None:
    with SQLiteStore(state) as store:
        LeaderElector(store, HOLDER).acquire(wait=False)

    table = cli("get", "leases", "-n", "capa-system")
    assert table.exit_code == 0, str(table)
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "HOLDER", "AGE"], str(table)
    assert row.startswith(f"capa-py-controller   {HOLDER}   "), str(table)

    document = cli("get", "lease", "capa-py-controller", "-n", "capa-system", "-o", "json")
    assert document.exit_code == 0, str(document)
    assert '"apiVersion": "coordination.k8s.io/v1"' in document.stdout, str(document)
    assert f'"holderIdentity": "{HOLDER}"' in document.stdout, str(document)


@pytest.mark.parametrize("command", [("apply", "-f", str(EXAMPLE)), ("delete", "-f", str(EXAMPLE), "--wait")])
def test_a_malformed_lease_duration_exits_2_before_the_store_changes(
    cli: Cli, state: Path, closed_endpoint: str, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]
) -> None:
    monkeypatch.setenv(LEASE_DURATION_ENV, "soon")
    result = cli(*command, "--aws-endpoint", closed_endpoint)
    assert result.exit_code == 2, str(result)
    assert f"error: {LEASE_DURATION_ENV} must be a whole number of seconds, not 'soon'" in result.stderr, str(
        result
    )
    assert not state.exists(), "a refused command created the store"
