"""``capa get machinedeployments`` / ``machinesets``: Cluster API's columns, in Cluster API's order."""

from __future__ import annotations

from pathlib import Path

import yaml

from capa_py.api.cluster import Cluster
from capa_py.runtime.queue import ObjectKey
from capa_py.store.sqlite import SQLiteStore
from controllers.machinesets import MachineDeploymentController
from tests.cli.cli_support import Cli
from tests.machinesets.world import deployment, template


def test_get_prints_machine_deployments_and_sets_as_cluster_api_does(
    cli: Cli, state: Path, tmp_path: Path
) -> None:
    manifest = tmp_path / "workers.yaml"
    documents = [
        Cluster.from_dict({"metadata": {"name": "c1", "namespace": "default"}}).to_dict(),
        template("workers-a").to_dict(),
        deployment(replicas=2).to_dict(),
    ]
    manifest.write_text(yaml.safe_dump_all(documents))
    applied = cli("apply", "-f", str(manifest), "--no-wait")
    assert applied.exit_code == 0, str(applied)
    assert "machinedeployment/workers created" in applied.stdout, str(applied)

    table = cli("get", "machinedeployments")
    assert table.exit_code == 0, str(table)
    header, row = table.stdout.splitlines()[:2]
    assert header.split() == [
        "NAME",
        "CLUSTER",
        "REPLICAS",
        "READY",
        "UPDATED",
        "UNAVAILABLE",
        "PHASE",
        "AGE",
        "VERSION",
    ]
    cells = row.split()
    assert (cells[0], cells[1], cells[-1]) == ("workers", "c1", "v1.30.1"), row
    wide = cli("get", "md", "-o", "wide")
    assert wide.stdout.splitlines()[0].split()[:4] == ["NAME", "CLUSTER", "DESIRED", "REPLICAS"], wide.stdout
    assert wide.stdout.splitlines()[1].split()[2] == "2", wide.stdout

    store = SQLiteStore(state)
    try:
        MachineDeploymentController(store).reconcile(ObjectKey("MachineDeployment", "default", "workers"))
    finally:
        store.close()
    sets = cli("get", "machinesets")
    assert sets.exit_code == 0, str(sets)
    header, row = sets.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "CLUSTER", "REPLICAS", "READY", "AVAILABLE", "AGE", "VERSION"]
    assert row.split()[0].startswith("workers-"), row
    md_row = cli("get", "md").stdout.splitlines()[1].split()
    assert md_row[6] == "ScalingUp", md_row
