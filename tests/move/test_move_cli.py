"""``capa move``: to another SQLite file (``--to-state``) or an API server (``--to-kubeconfig``, here
``capa serve`` in a process of its own, read back with kubectl); bad flags are exit 2 naming the flag, an
unreachable target exit 1 with nothing paused."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from capa_py.api.cluster import Cluster
from capa_py.api.tinkerbell import Hardware
from capa_py.move import MOVED_FROM_UID
from capa_py.store.sqlite import SQLiteStore
from tests.cli.cli_support import Cli
from tests.cli.served import bare_kubeconfig as kubeconfig_for
from tests.move.scenario import populate

SOURCE_KINDS = ("clusters", "machines", "tinkerbellmachines", "awsmachines", "hardware", "workflows")


@pytest.fixture
def populated(state: Path) -> Path:
    store = SQLiteStore(state)
    populate(store)
    store.close()
    return state


def test_move_to_state_prints_what_moved_per_kind_and_empties_the_source(
    cli: Cli, populated: Path, tmp_path: Path
) -> None:
    result = cli("move", "--to-state", str(tmp_path / "b.db"), "--cluster", "lab")

    assert result.exit_code == 0, str(result)
    assert "TinkerbellMachine: 3" in result.stdout
    assert "Hardware: 1" in result.stdout
    assert "moved 16 objects of 1 clusters" in result.stdout
    target = SQLiteStore(tmp_path / "b.db")
    source = SQLiteStore(populated)
    try:
        assert [c.name for c in target.list(Cluster)] == ["lab"]
        assert [c.name for c in source.list(Cluster)] == ["demo"]
    finally:
        target.close()
        source.close()


def test_dry_run_prints_the_graph_and_moves_nothing(cli: Cli, populated: Path, tmp_path: Path) -> None:
    result = cli("move", "--to-state", str(tmp_path / "b.db"), "--cluster", "demo", "--dry-run")

    assert result.exit_code == 0, str(result)
    assert "AWSMachine default/demo-worker-1" in result.stdout
    assert "10 objects would move (dry run)" in result.stdout
    source = SQLiteStore(populated)
    try:
        assert not any(c.spec.paused for c in source.list(Cluster))
    finally:
        source.close()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((), "--to-kubeconfig"),
        (("--to-state", "X", "--to-kubeconfig", "Y"), "--to-state"),
    ],
)
def test_the_target_flags_must_name_exactly_one_target(
    cli: Cli, populated: Path, tmp_path: Path, args: tuple[str, ...], named: str
) -> None:
    result = cli("move", *(str(tmp_path / a) if a in "XY" else a for a in args))

    assert result.exit_code == 2, str(result)
    assert named in result.stderr


def test_moving_to_the_source_itself_is_exit_2(cli: Cli, populated: Path) -> None:
    result = cli("move", "--to-state", str(populated))

    assert result.exit_code == 2, str(result)
    assert "--to-state" in result.stderr
    assert "source" in result.stderr


def test_a_cluster_that_does_not_exist_is_exit_2_and_creates_no_target(
    cli: Cli, populated: Path, tmp_path: Path
) -> None:
    """Before, the move printed "moved 0 objects of 0 clusters", exited 0 and created the target store."""
    target = tmp_path / "b.db"
    result = cli("move", "--to-state", str(target), "--cluster", "nowhere")

    assert result.exit_code == 2, str(result)
    assert "error: --cluster: cluster default/nowhere is neither in the source store" in result.stderr, str(
        result
    )
    assert not target.exists(), "the refused move created the target store"
    source = SQLiteStore(populated)
    try:
        assert sorted(c.name for c in source.list(Cluster)) == ["demo", "lab"]
        assert not any(c.spec.paused for c in source.list(Cluster))
    finally:
        source.close()


def test_a_cluster_that_does_not_exist_is_exit_2_with_an_existing_target_left_as_it_was(
    cli: Cli, populated: Path, tmp_path: Path
) -> None:
    moved = cli("move", "--to-state", str(tmp_path / "b.db"), "--cluster", "lab")
    assert moved.exit_code == 0, str(moved)
    before = (tmp_path / "b.db").read_bytes()

    again = cli("move", "--to-state", str(tmp_path / "b.db"), "--cluster", "lab")  # complete: changes nothing
    assert again.exit_code == 0, str(again)
    assert "moved 0 objects of 0 clusters" in again.stdout
    result = cli("move", "--to-state", str(tmp_path / "b.db"), "--cluster", "nowhere")

    assert result.exit_code == 2, str(result)
    assert "--cluster: cluster default/nowhere is neither in the source store" in result.stderr, str(result)
    target = SQLiteStore(tmp_path / "b.db")
    try:
        assert [(c.name, c.spec.paused) for c in target.list(Cluster)] == [("lab", False)]
    finally:
        target.close()
    assert (tmp_path / "b.db").read_bytes() == before


def test_a_to_kubeconfig_that_cannot_be_used_is_exit_2(cli: Cli, populated: Path, tmp_path: Path) -> None:
    result = cli("move", "--to-kubeconfig", str(tmp_path / "missing"))

    assert result.exit_code == 2, str(result)
    assert "--to-kubeconfig" in result.stderr


def test_an_unreachable_target_is_exit_1_before_anything_is_paused(
    cli: Cli, populated: Path, tmp_path: Path, closed_endpoint: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig_for(closed_endpoint)))

    result = cli("move", "--to-kubeconfig", str(path))

    assert result.exit_code == 1, str(result)
    assert "unreachable" in result.stderr
    assert "Traceback" not in result.stderr
    source = SQLiteStore(populated)
    try:
        assert not any(c.spec.paused for c in source.list(Cluster))
    finally:
        source.close()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_move_to_capa_serve_is_seen_by_kubectl_with_remapped_owner_references(
    cli: Cli, populated: Path, served: Path
) -> None:
    result = cli("move", "--to-kubeconfig", str(served))

    assert result.exit_code == 0, str(result)

    def kubectl(*args: str) -> dict:  # type: ignore[type-arg]
        out = subprocess.run(
            ["kubectl", "--kubeconfig", str(served), *args, "-o", "json"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    clusters = kubectl("get", "clusters", "-n", "default")["items"]
    assert sorted(c["metadata"]["name"] for c in clusters) == ["demo", "lab"]
    assert all(not c["spec"].get("paused") for c in clusters)
    machine = kubectl("get", "tinkerbellmachine", "lab-cp-0", "-n", "default")
    workflow = kubectl("get", "workflow", "lab-cp-0", "-n", "default")
    assert workflow["metadata"]["ownerReferences"][0]["uid"] == machine["metadata"]["uid"]
    assert MOVED_FROM_UID in machine["metadata"]["annotations"]
    assert kubectl("get", "secret", "lab-kubeconfig", "-n", "default")["metadata"]["name"] == "lab-kubeconfig"
    source = SQLiteStore(populated)
    try:
        assert source.list(Cluster) == []
    finally:
        source.close()


def test_move_from_capa_serve_to_a_state_file_empties_the_served_store(
    cli: Cli, served: Path, tmp_path: Path
) -> None:
    from capa_py.store.kube import KubeStore

    remote = KubeStore.from_kubeconfig(served)
    try:
        populate(remote)
        result = cli("--kubeconfig", str(served), "move", "--to-state", str(tmp_path / "b.db"))

        assert result.exit_code == 0, str(result)
        assert "moved 26 objects of 2 clusters" in result.stdout
        assert remote.list(Cluster) == []
        assert [h.name for h in remote.list(Hardware) if h.name == "machine1"] == []
    finally:
        remote.close()
    target = SQLiteStore(tmp_path / "b.db")
    try:
        assert sorted(c.name for c in target.list(Cluster)) == ["demo", "lab"]
        assert target.get(Hardware, "machine1", "default").metadata.annotations[MOVED_FROM_UID]
    finally:
        target.close()
