"""Apply and delete flows that finish or say why, through the real CLI over the test's moto server.

* applying over objects being deleted waits for the deletion, then creates them anew (or refuses with
  ``--no-recreate``);
* ``delete -f --wait`` re-run after a delete that did not finish tears down what is left;
* an apply whose every remaining object is blocked on something that cannot change by itself exits 1 with
  the reason, long before its timeout.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.aws import AWSCluster
from capa_py.store import open_store
from capa_py.store.errors import NotFound
from tests.e2e.e2e_support import (
    CRASHING_CAPA,
    EXAMPLE,
    Capa,
    MotoInspector,
    Run,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
    wait_for,
)
from tests.harness.faults import FAIL_OP

pytestmark = pytest.mark.slow(minutes=4)

KINDS = ("clusters", "machines", "awsclusters", "awsmachines", "secrets")
LONG = ("--timeout", "10m")
# Every command here must return long before its own --timeout of 10 minutes.
RETURNS_WITHIN = 240.0


def _apply(capa: Capa) -> None:
    run = capa.ok("apply", "-f", str(EXAMPLE), "--timeout", "3m", "-o", "json")
    assert run.json()["converged"] is True, f"apply exited 0 but did not converge:\n{run}"


def _uids(capa: Capa) -> dict[str, str]:
    return {
        f"{obj['kind']}/{obj['metadata']['name']}": obj["metadata"]["uid"]
        for kind in KINDS
        for obj in capa.get(kind)
    }


def _deleting(capa: Capa) -> list[str]:
    return [
        f"{obj['kind']}/{obj['metadata']['name']}"
        for kind in KINDS
        for obj in capa.get(kind)
        if obj["metadata"].get("deletionTimestamp")
    ]


def _snapshot(capa: Capa) -> dict[str, list[dict[str, Any]]]:
    return {kind: capa.get(kind) for kind in KINDS}


# -- delete, then apply ---------------------------------------------------------------------------------
def test_apply_after_a_delete_without_wait_waits_for_the_deletion_then_creates_anew_and_converges(
    capa: Capa, inspector: MotoInspector
) -> None:
    baseline = inspector.inventory().counts("total")
    _apply(capa)
    before = _uids(capa)
    capa.ok("delete", "-f", str(EXAMPLE))
    assert _deleting(capa), "delete without --wait left no object marked for deletion; the test is void"

    run = capa.run("apply", "-f", str(EXAMPLE), *LONG, "-o", "json", timeout=RETURNS_WITHIN)
    assert run.returncode == 0, f"apply over objects being deleted did not succeed:\n{run}"
    document = run.json()
    assert document["converged"] is True, f"apply did not converge:\n{run}"
    assert set(document["states"].values()) == {"ready"}, f"states: {document['states']}\n{run}"
    for name in ("awscluster/demo", "cluster/demo", "awsmachine/demo-worker-0"):
        assert f"{name} is being deleted; waiting for that to finish, then creating it again" in run.stderr, (
            f"apply did not say it waits for {name} to be deleted:\n{run}"
        )

    after = _uids(capa)
    assert set(after) == set(before), f"objects differ after re-creation: {sorted(before)} vs {sorted(after)}"
    kept = [ref for ref in before if before[ref] == after[ref] and not ref.startswith("Secret/")]
    assert not kept, f"objects were not created anew (same uid as before the delete): {kept}"
    assert not _deleting(capa), f"objects still marked for deletion: {_deleting(capa)}"

    recorded = recorded_ids(capa.get("awsclusters") + capa.get("awsmachines"))
    problems = problems_with_cluster(inspector.inventory(), expected_counts(), baseline, recorded)
    assert not problems, "after delete then apply:\n" + "\n".join(problems)


def test_apply_no_recreate_refuses_objects_being_deleted_and_changes_nothing(
    capa: Capa, inspector: MotoInspector
) -> None:
    _apply(capa)
    capa.ok("delete", "-f", str(EXAMPLE))
    store_before = _snapshot(capa)
    aws_before = inspector.inventory().tagged

    run = capa.run("apply", "-f", str(EXAMPLE), "--no-recreate", *LONG, timeout=RETURNS_WITHIN)
    assert run.returncode == 1, f"apply --no-recreate over objects being deleted should exit 1:\n{run}"
    for name in ("awscluster/demo", "cluster/demo", "machine/demo-worker-1"):
        assert name in run.stderr, f"the refusal does not name {name}:\n{run}"
    assert "being deleted" in run.stderr, str(run)
    assert _snapshot(capa) == store_before, "apply --no-recreate changed the store"
    assert inspector.inventory().tagged == aws_before, "apply --no-recreate changed AWS"


# -- delete re-run ----------------------------------------------------------------------------------------
def test_delete_wait_rerun_after_a_delete_without_wait_tears_everything_down(
    capa: Capa, inspector: MotoInspector
) -> None:
    _apply(capa)
    first = capa.ok("delete", "-f", str(EXAMPLE))
    assert "secret/demo-bootstrap deleted" in first.stdout, str(first)

    run = capa.run("delete", "-f", str(EXAMPLE), "--wait", *LONG, timeout=RETURNS_WITHIN)
    assert run.returncode == 0, f"delete --wait after a delete without --wait failed:\n{run}"
    assert "secret/demo-bootstrap already deleted" in run.stdout, str(run)

    left = {kind: ids for kind, ids in inspector.inventory().tagged.items() if ids}
    assert not left, f"resources still tagged with the cluster after the re-run delete --wait: {left}"
    remaining = {kind: [o["metadata"]["name"] for o in objs] for kind, objs in _snapshot(capa).items()}
    assert not any(remaining.values()), f"objects left in the store: {remaining}"


# -- blocked applies --------------------------------------------------------------------------------------
def _exits_1_blocked(run: Run, reason: str) -> None:
    assert run.returncode == 1, f"a blocked apply should exit 1:\n{run}"
    assert reason in run.stderr, f"the blocking reason {reason} is not reported:\n{run}"
    assert "not ready after" not in run.stderr, f"apply waited out its timeout:\n{run}"


def test_apply_exits_1_when_its_objects_are_deleted_by_another_process(capa: Capa, tmp_path: Path) -> None:
    argv = ["--state", str(capa.state), "apply", "-f", str(EXAMPLE), *LONG, "--aws-endpoint"]
    assert capa.endpoint is not None
    # Every CreateVpc answered as throttled: the apply keeps retrying and cannot converge before the delete
    # lands, however slowly the delete's process starts on a loaded machine.
    background = subprocess.Popen(
        [sys.executable, *CRASHING_CAPA, *argv, capa.endpoint],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=capa.env({FAIL_OP: "CreateVpc:RequestLimitExceeded"}),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    try:

        def stored() -> bool:
            with open_store(capa.state) as store:
                try:
                    store.get(AWSCluster, "demo", "default")
                except NotFound:
                    return False
                return True

        assert wait_for(stored, timeout=60), "the background apply never stored the AWSCluster"
        capa.ok("delete", "-f", str(EXAMPLE))
        out, err = background.communicate(timeout=RETURNS_WITHIN)
    finally:
        if background.poll() is None:
            background.kill()
            background.wait()
    run = Run(argv, background.returncode, out, err, 0.0)
    _exits_1_blocked(run, "BeingDeleted")
    assert "error: AWSCluster default/demo: BeingDeleted" in run.stderr, str(run)


def test_apply_exits_1_when_the_aws_endpoint_does_not_answer(tmp_path: Path) -> None:
    # A port bound but not listening refuses connections, and stays ours for the whole test.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        capa = Capa(state=tmp_path / "state.db", endpoint=f"http://127.0.0.1:{sock.getsockname()[1]}")
        run = capa.run("apply", "-f", str(EXAMPLE), *LONG, timeout=RETURNS_WITHIN)
    _exits_1_blocked(run, "EndpointUnreachable")
    assert "error: AWSCluster default/demo: EndpointUnreachable" in run.stderr, str(run)
    assert "waits on awscluster/demo" in run.stderr, f"objects waiting on the AWSCluster not reported:\n{run}"


def test_apply_exits_1_when_a_machine_names_a_cluster_that_does_not_exist(capa: Capa, tmp_path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    lost = [d for d in documents if d["metadata"]["name"] in ("demo-worker-0", "demo-bootstrap")]
    for doc in lost:
        if doc["kind"] == "Machine":
            doc["spec"]["clusterName"] = "nowhere"
        doc["metadata"].setdefault("labels", {})["cluster.x-k8s.io/cluster-name"] = "nowhere"
    manifest = tmp_path / "lost.yaml"
    manifest.write_text(yaml.safe_dump_all(lost, sort_keys=False))

    run = capa.run("apply", "-f", str(manifest), "--region", "us-east-1", *LONG, timeout=RETURNS_WITHIN)
    _exits_1_blocked(run, "ClusterNotFound")
    assert "error: Machine default/demo-worker-0: ClusterNotFound: cluster default/nowhere" in run.stderr, (
        str(run)
    )
    assert "error: AWSMachine default/demo-worker-0: " in run.stderr, str(run)


def test_delete_wait_exits_1_when_the_aws_endpoint_does_not_answer(capa: Capa) -> None:
    _apply(capa)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        unreachable = Capa(state=capa.state, endpoint=f"http://127.0.0.1:{sock.getsockname()[1]}")
        run = unreachable.run("delete", "-f", str(EXAMPLE), "--wait", *LONG, timeout=RETURNS_WITHIN)
    assert run.returncode == 1, f"a blocked delete --wait should exit 1:\n{run}"
    assert "EndpointUnreachable" in run.stderr, f"the blocking reason is not reported:\n{run}"
    assert "not deleted after" not in run.stderr, f"delete --wait waited out its timeout:\n{run}"
