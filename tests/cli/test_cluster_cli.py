"""``capa cluster create|upgrade|delete``: the plan, and every refusal that happens before a workflow runs
(exit 2 for what the user must fix, 1 for a management cluster that does not answer)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import yaml

from tests.cli.cli_support import Cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

MANAGEMENT_CREATE_PLAN = [
    "Pre Create",
    "Create Bootstrap Cluster",
    "Install Bootstrap Components",
    "Create Management Cluster",
    "Install Networking",
    "Install Management Components",
    "Pivot to Management",
    "Install Cluster Configuration",
    "Delete Bootstrap Cluster",
    "Post Create",
]


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """The example cluster files with the files they name in place (the stand-in kubeconfigs are written by
    the walkthrough, so here they are placeholders): loading them with their files checked succeeds."""
    root = tmp_path / "examples"
    shutil.copytree(EXAMPLES / "clusters", root / "clusters")
    shutil.copytree(EXAMPLES / "cni", root / "cni")
    (root / "clusters" / "stand-in").mkdir()
    for name in ("mgmt", "work"):
        (root / "clusters" / "stand-in" / f"{name}.kubeconfig").write_text("{}\n", encoding="utf-8")
    return root / "clusters"


def state_dir_contents(state: Path) -> list[str]:
    return sorted(str(p.relative_to(state.parent)) for p in state.parent.rglob("*"))


def numbered_tasks(text: str) -> list[str]:
    tasks: list[str] = []
    for line in text.splitlines():
        number, _, rest = line.strip().partition(". ")
        if number.isdigit():
            assert int(number) == len(tasks) + 1, f"plan numbering skips at {line!r}"
            tasks.append(rest.split(" — ")[0])
    return tasks


def test_plan_of_a_management_create_lists_the_tasks_and_writes_nothing(cli: Cli, state: Path) -> None:
    before = state_dir_contents(state)
    # The stand-in kubeconfig the example names does not exist: a plan reads none of the files.
    result = cli(
        "cluster", "create", "-f", str(EXAMPLES / "clusters" / "mgmt.yaml"), "--management", "--plan"
    )
    assert result.exit_code == 0, result
    assert result.stdout.startswith("management create:"), result
    assert numbered_tasks(result.stdout) == MANAGEMENT_CREATE_PLAN, result
    assert "after:  ClusterFiles.write" in result.stdout, "the cluster-files hook is shown after Post Create"
    assert "on error: Handle Error" in result.stdout
    assert state_dir_contents(state) == before, "a plan wrote under the state dir"


@pytest.mark.parametrize(
    ("fmt", "opening", "task_line"),
    [
        ("mermaid", "flowchart TD", '["Install capa-py Components"]'),
        ("dot", "digraph", "Install capa-py Components"),
    ],
)
def test_plan_as_a_graph(cli: Cli, state: Path, fmt: str, opening: str, task_line: str) -> None:
    kubeconfig = state.parent / "absent-management.kubeconfig"  # a plan does not reach the cluster
    result = cli(
        "cluster",
        "create",
        "-f",
        str(EXAMPLES / "clusters" / "work.yaml"),
        "--kubeconfig",
        str(kubeconfig),
        "--plan",
        "--format",
        fmt,
    )
    assert result.exit_code == 0, result
    assert result.stdout.lstrip().startswith(opening), result
    assert task_line in result.stdout
    assert "Handle Error" in result.stdout
    assert "Create Bootstrap Cluster" not in result.stdout, "a workload plan has no bootstrap cluster"


@pytest.mark.parametrize("which", ["neither", "both"])
def test_exactly_one_of_management_and_kubeconfig(cli: Cli, state: Path, which: str) -> None:
    args = ["cluster", "delete", "-f", str(EXAMPLES / "clusters" / "mgmt.yaml"), "--plan"]
    if which == "both":
        args += ["--management", "--kubeconfig", str(state.parent / "kubeconfig")]
    result = cli(*args)
    assert result.exit_code == 2, result
    assert "--management" in result.stderr
    assert "--kubeconfig" in result.stderr


def test_a_bad_cluster_file_lists_each_problem(cli: Cli, tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / "clusters" / "mgmt.yaml").read_text(encoding="utf-8")))
    docs[0]["metadata"]["name"] = "other"
    docs[6]["spec"]["clusterName"] = "elsewhere"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    result = cli("cluster", "create", "-f", str(path), "--management", "--plan")
    assert result.exit_code == 2, result
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert lines == [
        f"error: {path}: document 1 (ClusterConfig default/other): metadata.name: "
        "must be the Cluster's name (mgmt)",
        f"error: {path}: document 7 (Machine default/mgmt-worker-0): spec.clusterName: "
        "must be the cluster's name (mgmt)",
    ], result
    assert result.stdout == ""


def test_a_file_the_config_names_must_exist_when_running(cli: Cli, state: Path) -> None:
    result = cli("cluster", "create", "-f", str(EXAMPLES / "clusters" / "mgmt.yaml"), "--management")
    assert result.exit_code == 2, result
    assert "spec.controlPlane.kubeconfigFile: no such file" in result.stderr
    assert not (state.parent / "bootstrap").exists()
    assert not (state.parent / "workflows").exists()


def test_management_upgrade_needs_the_clusters_kubeconfig(cli: Cli, state: Path, examples: Path) -> None:
    result = cli("cluster", "upgrade", "-f", str(examples / "mgmt.yaml"), "--management")
    assert result.exit_code == 2, result
    expected = state.parent / "clusters" / "mgmt" / "kubeconfig"
    assert f"no kubeconfig of management cluster mgmt at {expected}" in result.stderr.replace("\n", ""), (
        result
    )


def test_a_management_cluster_that_does_not_answer(cli: Cli, tmp_path: Path, examples: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    kubeconfig = tmp_path / "unanswered.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "m", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "m", "user": {}}],
                "contexts": [{"name": "m", "context": {"cluster": "m", "user": "m"}}],
                "current-context": "m",
            }
        ),
        encoding="utf-8",
    )
    result = cli("cluster", "create", "-f", str(examples / "work.yaml"), "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 1, result
    assert "--kubeconfig: the server does not answer" in result.stderr.replace("\n", ""), result
    assert not (tmp_path / "workflows").exists(), "nothing ran"


@pytest.mark.parametrize(
    ("option", "value", "named"), [("-o", "bad", "-o/--output"), ("--format", "svg", "--format")]
)
def test_an_unknown_output_or_format(cli: Cli, option: str, value: str, named: str) -> None:
    result = cli(
        "cluster", "create", "-f", str(EXAMPLES / "clusters" / "mgmt.yaml"), "--management", option, value
    )
    assert result.exit_code == 2, result
    assert named in result.stderr
