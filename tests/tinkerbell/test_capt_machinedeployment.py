"""The bare-metal example with its workers as a MachineDeployment of a TinkerbellMachineTemplate, under
``capa apply``: the embedded core clones a TinkerbellMachine per Machine, the bare-metal provider claims
Hardware and provisions it (agents run the Workflows), the MachineDeployment is Running; scaling down frees
a Hardware; deleting the Cluster frees them all."""

from __future__ import annotations

from pathlib import Path

import yaml

from capa_py.api import load_manifests
from capa_py.api.machinesets import MachineDeployment
from capa_py.api.tinkerbell import Hardware
from capa_py.api.tinkerbell_capi import HARDWARE_OWNER_NAME_LABEL, TinkerbellMachine
from capa_py.store.sqlite import SQLiteStore
from controllers import needs_aws
from tests.cli.cli_support import Cli
from tests.cli.conftest import cli, state  # noqa: F401 - the capa CLI fixtures
from tests.tinkerbell.capt_world import machine_deployment_manifests
from tests.tinkerbell.test_capt_cli import _table, agents


def test_a_bare_metal_machine_deployment_provisions_scales_and_frees_its_hardware(
    cli: Cli,  # noqa: F811
    state: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "lab.yaml"
    manifest.write_text(yaml.safe_dump_all(machine_deployment_manifests(replicas=2)))
    assert not needs_aws(load_manifests([manifest])), "a bare-metal MachineDeployment needs no AWS"
    with agents(state):
        result = cli("apply", "-f", str(manifest), "--timeout", "60s")
    assert result.exit_code == 0, str(result)

    deployments = _table(cli("get", "machinedeployments").stdout)
    assert [(d["NAME"], d["REPLICAS"], d["READY"], d["UPDATED"], d["PHASE"]) for d in deployments] == [
        ("lab-workers", "2", "2", "2", "Running")
    ]
    tms = {row["NAME"]: row for row in _table(cli("get", "tinkerbellmachines").stdout)}
    workers = {name: row for name, row in tms.items() if name.startswith("lab-workers-")}
    assert len(workers) == 2
    assert {row["READY"] for row in workers.values()} == {"true"}
    assert {row["HARDWARE"] for row in workers.values()} == {"lab-4", "lab-5"}, "rack b preferred"

    manifest.write_text(yaml.safe_dump_all(machine_deployment_manifests(replicas=1)))
    with agents(state):
        scaled = cli("apply", "-f", str(manifest), "--timeout", "60s")
    assert scaled.exit_code == 0, str(scaled)
    store = SQLiteStore(state)
    try:
        left = [m for m in store.list(TinkerbellMachine) if m.name.startswith("lab-workers-")]
        assert len(left) == 1
        claimed = {h.name for h in store.list(Hardware) if HARDWARE_OWNER_NAME_LABEL in h.metadata.labels}
        assert claimed == {"lab-1", left[0].spec.hardware_name}, "the removed worker's Hardware is free"
        assert store.get(MachineDeployment, "lab-workers", "default").status.replicas == 1
    finally:
        store.close()

    deleted = cli("delete", "cluster", "lab", "--wait", "--timeout", "60s")
    assert deleted.exit_code == 0, str(deleted)
    store = SQLiteStore(state)
    try:
        assert list(store.list(MachineDeployment)) == []
        assert list(store.list(TinkerbellMachine)) == []
        assert not [h.name for h in store.list(Hardware) if HARDWARE_OWNER_NAME_LABEL in h.metadata.labels]
    finally:
        store.close()
