"""``capa apply`` under faults: a throttling storm, lost responses, a bad AMI, and no credentials at all.

Faults are injected inside the capa process by ``tests/harness/crashing_capa.py`` (botocore hooks from
``tests/harness/faults.py``); capa itself knows nothing about them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.e2e_support import (
    EXAMPLE,
    Capa,
    MotoInspector,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
)
from tests.harness.faults import FAIL_OP, FAULT_LOG, LOSE_RESPONSE, SEED, THROTTLE_RATE

BAD_AMI = "ami-0000000000000000f"
THROTTLING = ("RequestLimitExceeded", "Throttling")
# Every create capa makes for the example cluster (between them, every strategy path).
CREATES = (
    "CreateVpc",
    "CreateSubnet",
    "CreateInternetGateway",
    "AttachInternetGateway",
    "AllocateAddress",
    "CreateNatGateway",
    "CreateRouteTable",
    "CreateRoute",
    "AssociateRouteTable",
    "CreateSecurityGroup",
    "CreateLoadBalancer",
    "CreateTargetGroup",
    "CreateListener",
    "RunInstances",
    "RegisterTargets",
)


def _converged_without_duplicates(
    inspector: MotoInspector, baseline: dict[str, int], run_document: dict[str, Any]
) -> list[str]:
    """What is wrong in moto after an apply, judged against the statuses the apply printed (``-o json``
    prints the final objects as ``capa get -o json`` does)."""
    owners = [o for o in run_document["objects"] if o["kind"] in ("AWSCluster", "AWSMachine")]
    assert len(owners) == 4, f"apply -o json should print 1 AWSCluster and 3 AWSMachines, got {len(owners)}"
    return problems_with_cluster(inspector.inventory(), expected_counts(), baseline, recorded_ids(owners))


@pytest.mark.slow(minutes=2)
@pytest.mark.timeout(600)
def test_throttling_storm_on_40_percent_of_calls_still_converges_to_exactly_one_of_everything(
    capa: Capa, inspector: MotoInspector, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = inspector.inventory().counts("total")
    run = capa.run(
        "apply", "-f", str(EXAMPLE), "--timeout", "5m", "-o", "json",
        faults={THROTTLE_RATE: "0.4", SEED: "20240611"},
        timeout=420,
    )  # fmt: skip
    assert run.returncode == 0, f"apply under a 40% throttling storm did not converge:\n{run}"
    document = run.json()
    calls = document["awsCalls"]
    throttled = {code: calls["byOutcome"].get(code, 0) for code in THROTTLING}
    absorbed = sum(throttled.values())
    with capsys.disabled():
        print(
            f"\nthrottling storm: {absorbed} throttled calls absorbed ({throttled}) of {calls['total']} "
            f"calls ({calls['mutating']} mutating) in {document['elapsedSeconds']}s"
        )
    assert throttled["RequestLimitExceeded"] > 0, f"no call was throttled; the fault did not work: {calls}"
    share = absorbed / calls["total"]
    assert 0.25 < share < 0.55, f"{share:.0%} of calls throttled, expected about 40%: {calls}"
    problems = _converged_without_duplicates(inspector, baseline, document)
    recorded = recorded_ids(capa.get("awsclusters") + capa.get("awsmachines"))
    assert set(recorded) == set(recorded_ids(document["objects"])), "capa get and apply -o json disagree"
    assert not problems, "after the throttling storm:\n" + "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("operation", CREATES)
def test_lost_response_of_a_create_is_recovered_without_a_duplicate(
    operation: str, capa: Capa, inspector: MotoInspector, tmp_path: Path
) -> None:
    """The first ``operation`` call reaches AWS and succeeds, but capa sees a read timeout instead of the
    answer: the outcome is unknown to capa, which must neither repeat it blindly nor give up."""
    baseline = inspector.inventory().counts("total")
    log = tmp_path / "faults.jsonl"
    run = capa.run(
        "apply", "-f", str(EXAMPLE), "--timeout", "2m", "-o", "json",
        faults={LOSE_RESPONSE: operation, FAULT_LOG: str(log)},
    )  # fmt: skip
    lost = [json.loads(line)["operation"] for line in log.read_text().splitlines()] if log.exists() else []
    assert lost, f"the fault never fired: no {operation} call succeeded:\n{run}"
    assert run.returncode == 0, f"apply after the lost {operation} response did not converge:\n{run}"
    problems = _converged_without_duplicates(inspector, baseline, run.json())
    assert not problems, f"after the lost {operation} response:\n" + "\n".join(problems)


def test_server_errors_on_creates_that_never_reached_aws_are_retried_to_exactly_one(
    capa: Capa, inspector: MotoInspector, tmp_path: Path
) -> None:
    """5xx answers to creates (refused before AWS acted): an unknown outcome for capa, which must not
    repeat a create blindly in the same call, yet must get there on a later reconcile."""
    baseline = inspector.inventory().counts("total")
    log = tmp_path / "faults.jsonl"
    injected = "CreateVpc:InternalError:2,CreateNatGateway:ServiceUnavailable:1,RunInstances:InternalError:1"
    run = capa.run(
        "apply", "-f", str(EXAMPLE), "--timeout", "2m", "-o", "json",
        faults={FAIL_OP: injected, FAULT_LOG: str(log)},
    )  # fmt: skip
    assert run.returncode == 0, f"apply with 5xx answers to creates did not converge:\n{run}"
    errors = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(errors) == 4, f"expected 4 injected errors, the log has {errors}"
    outcomes = run.json()["awsCalls"]["byOutcome"]
    assert outcomes.get("InternalError") == 3, f"capa should have counted the 5xx answers: {outcomes}"
    assert outcomes.get("ServiceUnavailable") == 1, f"capa should have counted the 5xx answers: {outcomes}"
    problems = _converged_without_duplicates(inspector, baseline, run.json())
    assert not problems, "after 5xx answers to creates:\n" + "\n".join(problems)


def _manifest_with_bad_ami(path: Path) -> Path:
    """The example's cluster with one machine only, a worker whose AMI does not exist."""
    documents = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    keep = []
    for doc in documents:
        name = doc["metadata"]["name"]
        if doc["kind"] in ("Machine", "AWSMachine") and name != "demo-worker-0":
            continue
        if doc["kind"] == "AWSMachine":
            doc["spec"]["ami"]["id"] = BAD_AMI
        keep.append(doc)
    path.write_text(yaml.safe_dump_all(keep, sort_keys=False))
    return path


def test_bad_ami_fails_the_machine_with_an_error_condition_and_no_retry_storm(
    capa: Capa, tmp_path: Path
) -> None:
    manifest = _manifest_with_bad_ami(tmp_path / "bad-ami.yaml")
    run = capa.run("apply", "-f", str(manifest), "--timeout", "2m", "-o", "json")
    assert run.returncode == 1, f"apply of a machine with an unknown AMI should exit 1:\n{run}"
    document = run.json()
    assert document["states"].get("AWSMachine default/demo-worker-0") == "failed", document["states"]
    assert f"spec.ami.id: {BAD_AMI} does not exist" in run.stderr, f"the error must name the AMI:\n{run}"

    machine = next(o for o in capa.get("awsmachines") if o["metadata"]["name"] == "demo-worker-0")
    status = machine["status"]
    assert status.get("failureReason"), f"the AWSMachine has no failureReason: {status}"
    assert BAD_AMI in (status.get("failureMessage") or ""), f"failureMessage should name the AMI: {status}"
    condition = next((c for c in status.get("conditions", []) if c["type"] == "InstanceReady"), None)
    assert condition is not None, f"no InstanceReady condition: {status.get('conditions')}"
    assert condition["status"] == "False", f"InstanceReady should be False: {condition}"
    assert condition.get("severity") == "Error", f"InstanceReady should have severity Error: {condition}"
    assert status.get("ready") is not True

    by_op = document["awsCalls"]["byOperation"]
    launches = by_op.get("ec2:DescribeImages", 0) + by_op.get("ec2:RunInstances", 0)
    assert launches <= 3, (
        f"{launches} DescribeImages/RunInstances calls for one machine with a bad AMI: a retry storm "
        f"({by_op})"
    )


def test_a_corrected_ami_applied_after_the_failure_converges(capa: Capa, tmp_path: Path) -> None:
    manifest = _manifest_with_bad_ami(tmp_path / "bad-ami.yaml")
    failed = capa.run("apply", "-f", str(manifest), "--timeout", "2m", "-o", "json")
    assert failed.returncode == 1, f"the bad AMI should fail first:\n{failed}"
    fixed = capa.run("apply", "-f", str(EXAMPLE), "--timeout", "2m", "-o", "json")
    assert fixed.returncode == 0, f"re-applying the example's AMI should converge, not stay failed:\n{fixed}"
    machine = next(o for o in capa.get("awsmachines") if o["metadata"]["name"] == "demo-worker-0")
    assert machine["status"].get("ready") is True
    assert not machine["status"].get("failureReason"), "the failure must be cleared once the machine is ready"


def test_no_credentials_and_no_endpoint_exits_1_naming_aws_endpoint_local(tmp_path: Path) -> None:
    home = tmp_path / "empty-home"
    home.mkdir()
    capa = Capa(state=tmp_path / "state.db", endpoint=None, home=home)
    env = {k: v for k, v in capa.env().items() if not k.startswith("AWS_")}
    env.update({"HOME": str(home), "AWS_EC2_METADATA_DISABLED": "true"})
    run = capa.run("apply", "-f", str(EXAMPLE), "--timeout", "1m", env=env, timeout=60)
    assert run.returncode == 1, f"apply without credentials or endpoint should exit 1:\n{run}"
    assert "--aws-endpoint local" in run.stderr, f"the error should name --aws-endpoint local:\n{run}"
    assert "Traceback" not in run.stderr, f"a traceback instead of an error message:\n{run}"
    left = {kind: capa.get(kind) for kind in ("clusters", "awsclusters", "machines", "awsmachines")}
    assert not any(left.values()), f"a failed apply without credentials stored objects: {left}"
