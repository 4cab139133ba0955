"""Applies refused before any change, and deletes of what is already gone (no AWS needed).

* a cluster name is unique per store and region: a second ``demo`` in another namespace, in the store or in
  the same manifest, exits 2 naming the clash, with zero AWS calls and the store unchanged;
* ``delete -f`` re-run after a partial delete is success and says what was already deleted; ``delete -f``
  of a manifest none of whose objects exist, and ``delete KIND NAME`` of a missing object, stay errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.aws.accounting import PROCESS_COUNTER
from tests.cli.cli_support import Cli
from tests.e2e.e2e_support import EXAMPLE, QUICK_START

KINDS = ("clusters", "machines", "awsclusters", "awsmachines", "secrets")


def _snapshot(cli: Cli) -> dict[str, Any]:
    snapshot = {}
    for kind in KINDS:
        result = cli("get", kind, "-A", "-o", "json")
        assert result.exit_code == 0, str(result)
        snapshot[kind] = json.loads(result.stdout)["items"]
    return snapshot


def _other_demo(tmp_path: Path, namespace: str = "other", name: str = "other-demo.yaml") -> Path:
    """The example's Cluster and AWSCluster named ``demo`` in ``namespace``, declaring VPC 10.1.0.0/16."""
    documents = [
        d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] in ("Cluster", "AWSCluster")
    ]
    for doc in documents:
        doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "AWSCluster":
            doc["spec"]["network"]["vpc"]["cidrBlock"] = "10.1.0.0/16"
            for subnet in doc["spec"]["network"]["subnets"]:
                subnet["cidrBlock"] = subnet["cidrBlock"].replace("10.0.", "10.1.", 1)
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def test_a_second_cluster_of_the_same_name_and_region_in_another_namespace_exits_2_before_any_change(
    cli: Cli, tmp_path: Path, closed_endpoint: str
) -> None:
    assert cli("apply", "-f", str(EXAMPLE), "--no-wait").exit_code == 0
    before = _snapshot(cli)
    calls = PROCESS_COUNTER.total()

    result = cli(
        "apply", "-f", str(_other_demo(tmp_path)), "--aws-endpoint", closed_endpoint, "--timeout", "5s"
    )
    assert result.exit_code == 2, f"a second cluster named demo in us-east-1 should exit 2:\n{result}"
    assert "cluster default/demo already uses the name demo in us-east-1 in this store" in result.stderr, str(
        result
    )
    assert "other/demo" in result.stderr, f"the refused cluster is not named:\n{result}"
    assert PROCESS_COUNTER.total() == calls, "the refused apply made AWS calls"
    assert _snapshot(cli) == before, "the refused apply changed the store"


def test_two_clusters_of_the_same_name_in_one_manifest_exit_2_and_store_nothing(
    cli: Cli, tmp_path: Path, closed_endpoint: str
) -> None:
    both = tmp_path / "both.yaml"
    both.write_text(EXAMPLE.read_text() + "\n---\n" + _other_demo(tmp_path).read_text())
    calls = PROCESS_COUNTER.total()

    result = cli("apply", "-f", str(both), "--no-wait")
    assert result.exit_code == 2, f"two clusters named demo in one manifest should exit 2:\n{result}"
    assert "cluster default/demo already uses the name demo in us-east-1 in this manifest" in result.stderr, (
        str(result)
    )
    assert PROCESS_COUNTER.total() == calls, "the refused apply made AWS calls"
    assert not any(_snapshot(cli).values()), "the refused apply stored objects"


def test_the_same_cluster_name_in_another_region_or_reapplied_in_its_namespace_is_accepted(
    cli: Cli, tmp_path: Path
) -> None:
    assert cli("apply", "-f", str(EXAMPLE), "--no-wait").exit_code == 0
    again = cli("apply", "-f", str(EXAMPLE), "--no-wait")
    assert again.exit_code == 0, f"re-applying the same cluster is not a clash:\n{again}"

    elsewhere = _other_demo(tmp_path)
    text = elsewhere.read_text().replace("us-east-1", "eu-west-1")
    elsewhere.write_text(text)
    result = cli("apply", "-f", str(elsewhere), "--no-wait")
    assert result.exit_code == 0, f"demo in eu-west-1 does not clash with demo in us-east-1:\n{result}"


# -- delete of what is already gone ------------------------------------------------------------------------
def test_delete_file_rerun_after_a_partial_delete_reports_already_deleted_and_deletes_the_rest(
    cli: Cli,
) -> None:
    assert cli("apply", "-f", str(EXAMPLE), "--no-wait").exit_code == 0
    assert cli("delete", "secret", "demo-bootstrap").exit_code == 0

    result = cli("delete", "-f", str(EXAMPLE))
    assert result.exit_code == 0, f"delete -f after a partial delete should succeed:\n{result}"
    assert "secret/demo-bootstrap already deleted" in result.stdout, str(result)
    assert "awscluster/demo deleted" in result.stdout, str(result)
    assert not any(_snapshot(cli).values()), "objects left after delete -f"


def test_delete_file_of_objects_none_of_which_exist_is_an_error_unless_ignore_not_found(cli: Cli) -> None:
    result = cli("delete", "-f", str(EXAMPLE))
    assert result.exit_code == 1, f"delete -f of nothing stored should fail as kubectl does:\n{result}"
    assert "not found" in result.stderr, str(result)
    ignored = cli("delete", "-f", str(EXAMPLE), "--ignore-not-found")
    assert ignored.exit_code == 0, str(ignored)


def test_delete_kind_name_of_a_missing_object_stays_an_error_after_a_partial_delete(cli: Cli) -> None:
    assert cli("apply", "-f", str(EXAMPLE), "--no-wait").exit_code == 0
    assert cli("delete", "secret", "demo-bootstrap").exit_code == 0
    again = cli("delete", "secret", "demo-bootstrap")
    assert again.exit_code == 1, f"delete KIND NAME of a missing object should exit 1:\n{again}"
    assert cli("delete", "secret", "demo-bootstrap", "--ignore-not-found").exit_code == 0


def _with_tags(path: Path, out: Path, cluster_tags: int, machine_tags: int) -> Path:
    """``path`` with ``cluster_tags`` tags on its AWSCluster and ``machine_tags`` other tags on each
    AWSMachine and AWSMachineTemplate, each within the per-object limit of 44."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in documents:
        if doc["kind"] == "AWSCluster":
            doc["spec"]["additionalTags"] = {f"cluster-{i}": "x" for i in range(cluster_tags)}
        elif doc["kind"] == "AWSMachine":
            doc["spec"]["additionalTags"] = {f"machine-{i}": "x" for i in range(machine_tags)}
        elif doc["kind"] == "AWSMachineTemplate":
            doc["spec"]["template"]["spec"]["additionalTags"] = {
                f"machine-{i}": "x" for i in range(machine_tags)
            }
    out.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return out


@pytest.mark.parametrize("example", [EXAMPLE, QUICK_START], ids=["machines", "machinedeployment"])
def test_machine_tags_merged_with_the_clusters_over_the_aws_limit_exit_2_before_any_change(
    cli: Cli, tmp_path: Path, example: Path
) -> None:
    """Each object's 30 and 20 tags are within the limit alone, but an instance carries both sets and
    capa-py's own: 56 tags, which AWS refuses (before, the network was built and the instance create
    failed)."""
    manifest = _with_tags(example, tmp_path / "tags.yaml", cluster_tags=30, machine_tags=20)
    before = _snapshot(cli)
    calls = PROCESS_COUNTER.total()

    result = cli("apply", "-f", str(manifest), "--no-wait")

    assert result.exit_code == 2, str(result)
    kind = "AWSMachine default/demo-control-plane-0" if example == EXAMPLE else "AWSMachineTemplate default/"
    assert kind in result.stderr, str(result)
    assert "spec.additionalTags: 50 additional tags with its AWSCluster's (20 of its own, 30 of the " in (
        result.stderr
    ), str(result)
    assert PROCESS_COUNTER.total() == calls, "the refused apply made AWS calls"
    assert _snapshot(cli) == before, "the refused apply changed the store"


def test_an_awscluster_change_is_checked_against_its_stored_machines(cli: Cli, tmp_path: Path) -> None:
    assert (
        cli("apply", "-f", str(_with_tags(EXAMPLE, tmp_path / "ok.yaml", 10, 20)), "--no-wait").exit_code == 0
    )
    before = _snapshot(cli)

    more = _with_tags(EXAMPLE, tmp_path / "more.yaml", 30, 20)
    cluster_only = tmp_path / "cluster-only.yaml"
    cluster_only.write_text(
        yaml.safe_dump_all(
            [d for d in yaml.safe_load_all(more.read_text()) if d and d["kind"] == "AWSCluster"]
        )
    )
    result = cli("apply", "-f", str(cluster_only), "--no-wait")

    assert result.exit_code == 2, str(result)
    assert "AWSMachine default/demo-control-plane-0: spec.additionalTags: 50 additional tags" in result.stderr
    assert _snapshot(cli) == before

    # Keys both set count once: the merged set is what the instance carries.
    same_keys = _with_tags(EXAMPLE, tmp_path / "same.yaml", 40, 0)
    documents = [d for d in yaml.safe_load_all(same_keys.read_text()) if d]
    for doc in documents:
        if doc["kind"] == "AWSMachine":
            doc["spec"]["additionalTags"] = {f"cluster-{i}": "y" for i in range(40)}
    same_keys.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    assert cli("apply", "-f", str(same_keys), "--no-wait").exit_code == 0
