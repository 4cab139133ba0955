"""The store's lease as the CLI shows it, and a malformed lease duration refused before anything changes."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from capa_app.cli.lease import store_lease
from capa_py.api.coordination import Lease, now_micro
from capa_py.runtime.leader import LEASE_DURATION_ENV, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE, LeaderElector
from capa_py.store import Conflict, SQLiteStore
from tests.cli.cli_support import Cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machines.yaml"
HOLDER = "capa apply pid 4242 on build-host (3fa2c1)"


def test_get_leases_shows_the_store_lease_and_its_holder(cli: Cli, state: Path) -> None:
    with SQLiteStore(state) as store:
        LeaderElector(store, HOLDER).acquire(wait=False)

    table = cli("get", "leases", "-n", "capa-py-system")
    assert table.exit_code == 0, str(table)
    header, row = table.stdout.splitlines()
    assert header.split() == ["NAME", "HOLDER", "AGE"], str(table)
    assert row.startswith(f"capa-py-controller   {HOLDER}   "), str(table)

    document = cli("get", "lease", "capa-py-controller", "-n", "capa-py-system", "-o", "json")
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


def _take_over(store: SQLiteStore, holder: str) -> None:
    """Write another holder into the record, as a process that judged the lease expired would."""
    while True:
        lease = store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE)
        now = now_micro()
        spec = lease.spec.model_copy(
            update={"holder_identity": holder, "acquire_time": now, "renew_time": now}
        )
        try:
            store.update(lease.model_copy(update={"spec": spec}))
            return
        except Conflict:
            continue


def test_a_run_that_loses_the_store_lease_stops_at_its_next_tick_and_exits_1(
    state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(LEASE_DURATION_ENV, "6")  # renewals every 2 s
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        ticks += 1

    with (  # noqa: PT012
        SQLiteStore(state) as store,
        pytest.raises(typer.Exit) as exited,
        store_lease(store, "capa apply") as lease,
    ):
        guarded = lease.guard(tick)
        guarded()
        _take_over(store, "intruder")
        while True:  # the converge loop: ends only through the guard
            guarded()
            lease.lost.wait(0.05)
    assert exited.value.exit_code == 1
    assert ticks >= 1
    err = capsys.readouterr().err
    lost = (
        "lost the store lease capa-py-system/capa-py-controller (held by intruder now); stopped reconciling"
    )
    assert f"error: {lost}" in err, err
    with SQLiteStore(state) as store:
        assert store.get(Lease, STORE_LEASE_NAME, STORE_LEASE_NAMESPACE).holder == "intruder"
