"""Two ``capa controller --leader-elect`` processes on a real API server's ``coordination.k8s.io`` Lease.

A control plane of its own, ``capa manifests crds`` and ``rbac`` applied with kubectl, both controllers
authenticated as the ServiceAccount the RBAC binds, a moto server as AWS. The leader is SIGKILLed in the
middle of the quick start's create (its workers a MachineDeployment, which this API server stores without
Cluster API's admission defaults: no mutating webhook; moto has the cluster's VPC, not yet everything); the
other process takes the Lease over once its duration has passed and finishes the create with exactly one of
every AWS resource and no orphan; kubectl then deletes the example and nothing is left in moto.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.manifests.rbac import NAMESPACE, SERVICE_ACCOUNT
from capa_py.runtime.leader import STORE_LEASE_NAME, STORE_LEASE_NAMESPACE
from tests.e2e.e2e_support import (
    CLUSTER_TAG,
    QUICK_START,
    MotoInspector,
    expected_counts,
    problems_with_cluster,
    recorded_ids,
)
from tests.e2e.test_controller_mode import Background
from tests.peers.cluster import running
from tests.peers.fixtures import require_go
from tests.realkube.realkube_support import (
    CONTROLLER_USER,
    Kubectl,
    audited_requests,
    install,
    kubectl_binary,
    start_controller,
    wait_until,
)

LEASE_SECONDS = 4


@pytest.fixture
def processes() -> Iterator[list[Background]]:
    started: list[Background] = []
    yield started
    for process in started:
        process.stop(signal.SIGKILL, timeout=10)


def test_the_other_controller_takes_the_lease_over_and_finishes_a_create_the_killed_leader_began(
    tmp_path: Path, aws: str, inspector: MotoInspector, processes: list[Background]
) -> None:
    require_go()
    kubectl_binary()
    with running(directory=tmp_path / "cluster", controller_manager=False) as cluster:
        kubectl = Kubectl(cluster.admin_kubeconfig, tmp_path / "kubectl-home")
        install(kubectl, tmp_path, ["crds"], ["rbac"])
        account = cluster.service_account_kubeconfig(tmp_path / "sa.kubeconfig", NAMESPACE, SERVICE_ACCOUNT)
        baseline = inspector.inventory().counts("total")
        lease = ("--leader-elect", "--leader-elect-lease-duration", f"{LEASE_SECONDS}s")
        for name in ("controller-a", "controller-b"):
            processes.append(start_controller(name, account, aws, tmp_path, *lease))
        leader = wait_until(
            lambda: next((p for p in processes if any("leading:" in line for line in p.lines)), None),
            "a leader",
            timeout=30,
        )
        follower = next(p for p in processes if p is not leader)
        assert not any("leading:" in line for line in follower.lines), "two leaders at once"
        holder = kubectl.json("get", "lease", "-n", STORE_LEASE_NAMESPACE, STORE_LEASE_NAME)["spec"]
        assert holder["holderIdentity"], holder

        kubectl.run("apply", "-f", str(QUICK_START))
        owned = [{"Name": f"tag:{CLUSTER_TAG}", "Values": ["owned"]}]
        wait_until(
            lambda: inspector.ec2.describe_vpcs(Filters=owned)["Vpcs"],
            "the leader's VPC",
            timeout=60,
            interval=0.02,
        )
        leader.stop(signal.SIGKILL)
        expected = expected_counts(QUICK_START)
        at_kill = inspector.inventory().counts("tagged")
        assert at_kill != expected, f"the leader had finished before it was killed: {at_kill}"

        follower.wait_for_line(r"leading:", timeout=LEASE_SECONDS * 4 + 30)
        new_holder = kubectl.json("get", "lease", "-n", STORE_LEASE_NAMESPACE, STORE_LEASE_NAME)["spec"]
        assert new_holder["holderIdentity"] != holder["holderIdentity"], new_holder
        assert int(new_holder.get("leaseTransitions") or 0) >= 1, new_holder
        kubectl.run(
            "wait", "--for=condition=Ready", "awscluster/demo", "cluster/demo", "--timeout=180s", timeout=200
        )

        def machines_ready() -> bool:
            machines = kubectl.json("get", "awsmachines")["items"]
            ready = [m for m in machines if m.get("status", {}).get("ready")]
            return len(ready) == len(machines) == expected["instance"]  # the deployment's clones included

        wait_until(machines_ready, "every AWSMachine ready after the takeover")
        objects = kubectl.json("get", "awsclusters,awsmachines")["items"]
        problems = problems_with_cluster(inspector.inventory(), expected, baseline, recorded_ids(objects))
        assert not problems, "\n".join(problems)

        kubectl.run("delete", "-f", str(QUICK_START), "--timeout=180s", timeout=200)
        left = inspector.inventory().counts("tagged")
        assert not any(left.values()), f"left in AWS after the delete: {left}"
        assert follower.stop(signal.SIGTERM) == 0, follower.report()
        refused = [r for r in audited_requests(cluster, CONTROLLER_USER) if r.code in (401, 403)]
        assert not refused, f"requests the RBAC refused: {refused}"
