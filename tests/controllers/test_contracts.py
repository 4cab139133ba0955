"""The infrastructure kinds report to Cluster API under both contracts, and the embedded core reads either.

The AWS controllers in-process over moto (HTTP) on a real SQLite store: a converged cluster's AWSCluster and
AWSMachines carry the v1beta1 fields (``status.ready``, ``status.conditions`` with severities) and the
v1beta2 ones (``status.initialization.provisioned``, ``status.v1beta2.conditions`` as valid
``metav1.Condition``s); the embedded core becomes ready from an object reporting only the v1beta2 field.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Cluster, Machine
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import call_scope
from capa_py.runtime.manager import Manager
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.sqlite import SQLiteStore
from controllers.base import patch_status
from controllers.core import ClusterController, MachineController
from tests.controllers.conftest import Harness
from tests.harness.contracts import assert_valid_meta_conditions

TIMEOUT = 120.0


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if o.KIND != "Secret"]


def test_a_converged_cluster_reports_both_contracts(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    assert harness.converge(_targets(harness.apply(example())), timeout=TIMEOUT).converged
    infrastructure = [*harness.store.list(AWSCluster), *harness.store.list(AWSMachine)]
    assert len(infrastructure) == 4
    for obj in infrastructure:
        status = obj.to_dict()["status"]
        assert status["ready"] is True, obj.ref()
        assert status["initialization"] == {"provisioned": True}, obj.ref()
        assert any(c.get("severity") is None and c["type"] == "Ready" for c in status["conditions"])
        ready = next(c for c in assert_valid_meta_conditions(status) if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "Ready"), ready
        assert ready["observedGeneration"] == obj.metadata.generation, ready
    for machine in harness.store.list(AWSMachine):
        wire = machine.to_dict()
        assert wire["spec"]["providerID"].startswith("aws:///"), wire["spec"]
        assert wire["status"]["addresses"], wire["status"]


def test_transition_times_hold_while_statuses_hold(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """A spec edit (new generation) reconciled to the same state: every v1beta2 condition keeps its status
    and its lastTransitionTime, and now reports the new generation as observed."""
    targets = _targets(harness.apply(example()))
    assert harness.converge(targets, timeout=TIMEOUT).converged
    before = harness.store.get(AWSCluster, "demo", "default")

    def tag(o: AWSCluster) -> None:
        o.spec.additional_tags["team"] = "contracts"

    edited = retry_on_conflict(harness.store, before, tag)
    assert edited.metadata.generation == (before.metadata.generation or 0) + 1
    assert harness.converge(targets, timeout=TIMEOUT).converged
    after = harness.store.get(AWSCluster, "demo", "default")
    old = before.to_dict()["status"]["v1beta2"]["conditions"]
    new = after.to_dict()["status"]["v1beta2"]["conditions"]
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in new] == [
        (c["type"], c["status"], c["lastTransitionTime"]) for c in old
    ]
    assert {c["observedGeneration"] for c in new} == {edited.metadata.generation}


def test_a_permanent_failure_shows_in_the_v1beta2_ready_condition(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """The v1beta2 contract has no failureReason: a terminal failure is the Ready condition's reason."""
    objects = example()
    broken = next(o for o in objects if isinstance(o, AWSMachine) and o.name == "demo-worker-1")
    broken.spec.ami.id = "ami-0000000000000dead"
    harness.converge(_targets(harness.apply(objects)), timeout=TIMEOUT)
    failed = harness.store.get(AWSMachine, "demo-worker-1", "default")
    assert failed.status.failure_reason, "the broken machine never failed; the test is void"
    status = failed.to_dict()["status"]
    assert status["ready"] is False
    assert "initialization" not in status, "provisioned before it ever was ready"
    v1beta1 = next(c for c in status["conditions"] if c["type"] == "Ready")
    ready = next(c for c in assert_valid_meta_conditions(status) if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert (ready["reason"], ready["message"]) == (v1beta1["reason"], v1beta1["message"]), ready
    assert ready["reason"] == status["failureReason"], ready


def test_provisioned_is_set_once_ready_and_never_unset(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        cluster = store.create(
            AWSCluster.from_dict(
                {
                    "apiVersion": AWSCluster.API_VERSION,
                    "kind": "AWSCluster",
                    "metadata": {"name": "demo", "namespace": "default"},
                    "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}},
                }
            )
        )

        def ready(value: bool) -> Callable[[AWSCluster], None]:
            def apply(o: AWSCluster) -> None:
                o.status.ready = value

            return apply

        cluster = patch_status(store, cluster, ready(False))
        assert store.get(AWSCluster, "demo", "default").status.initialization is None
        cluster = patch_status(store, cluster, ready(True))
        assert store.get(AWSCluster, "demo", "default").to_dict()["status"]["initialization"] == {
            "provisioned": True
        }
        patch_status(store, cluster, ready(False))
        stored = store.get(AWSCluster, "demo", "default")
        assert stored.status.ready is False
        assert stored.to_dict()["status"]["initialization"] == {"provisioned": True}
    finally:
        store.close()


def _core_objects(store: SQLiteStore) -> None:
    """A Cluster and a Machine over an AWSCluster and an AWSMachine that report only the v1beta2
    contract's ``initialization.provisioned`` (``status.ready`` false, as a v1beta2-only provider leaves
    it)."""
    infra = "infrastructure.cluster.x-k8s.io/v1beta2"
    meta = {"namespace": "default"}
    store.create(
        Cluster.from_dict(
            {
                "apiVersion": Cluster.API_VERSION,
                "kind": "Cluster",
                "metadata": {"name": "demo", **meta},
                "spec": {"infrastructureRef": {"apiVersion": infra, "kind": "AWSCluster", "name": "demo"}},
            }
        )
    )
    awscluster = store.create(
        AWSCluster.from_dict(
            {
                "apiVersion": infra,
                "kind": "AWSCluster",
                "metadata": {"name": "demo", **meta},
                "spec": {
                    "region": "us-east-1",
                    "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}},
                    "controlPlaneEndpoint": {"host": "demo.example.com", "port": 6443},
                },
            }
        )
    )
    store.update_status(
        AWSCluster.from_dict({**awscluster.to_dict(), "status": {"initialization": {"provisioned": True}}})
    )
    store.create(
        Machine.from_dict(
            {
                "apiVersion": Machine.API_VERSION,
                "kind": "Machine",
                "metadata": {"name": "demo-0", **meta},
                "spec": {
                    "clusterName": "demo",
                    "bootstrap": {"dataSecretName": "demo-0-bootstrap"},
                    "infrastructureRef": {"apiVersion": infra, "kind": "AWSMachine", "name": "demo-0"},
                },
            }
        )
    )
    awsmachine = store.create(
        AWSMachine.from_dict(
            {
                "apiVersion": infra,
                "kind": "AWSMachine",
                "metadata": {"name": "demo-0", **meta},
                "spec": {
                    "instanceType": "t3.medium",
                    "ami": {"id": "ami-785db401"},
                    "providerID": "aws:///us-east-1a/i-0123456789abcdef0",
                },
            }
        )
    )
    store.update_status(
        AWSMachine.from_dict({**awsmachine.to_dict(), "status": {"initialization": {"provisioned": True}}})
    )


def test_the_embedded_core_reads_initialization_provisioned(tmp_path: Path) -> None:
    """Fails before the embedded core read the v1beta2 contract: it read ``status.ready`` only."""
    store = SQLiteStore(tmp_path / "state.db")
    try:
        _core_objects(store)
        assert store.get(AWSCluster, "demo", "default").status.ready is False
        kinds = (AWSCluster, AWSMachine)
        ClusterController(store, kinds).reconcile(ObjectKey("Cluster", "default", "demo"))
        MachineController(store, kinds).reconcile(ObjectKey("Machine", "default", "demo-0"))
        cluster = store.get(Cluster, "demo", "default")
        assert cluster.status.infrastructure_ready is True
        assert cluster.spec.control_plane_endpoint.host == "demo.example.com"
        assert cluster.status.phase == "Provisioned"
        machine = store.get(Machine, "demo-0", "default")
        assert machine.status.infrastructure_ready is True
        assert machine.spec.provider_id == "aws:///us-east-1a/i-0123456789abcdef0"
        assert machine.status.phase == "Provisioned"
    finally:
        store.close()


def test_a_running_controller_reports_its_machines_paused_and_unpaused_when_the_cluster_is(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """Pausing a Cluster changes none of its infrastructure objects, yet each must say it is left alone: the
    controllers watch their Cluster's pause transitions (before, an AWSMachine kept ``Paused`` False under a
    paused Cluster, as nothing woke it). No AWS call is made for a paused object."""
    assert harness.converge(_targets(harness.apply(example())), timeout=TIMEOUT).converged
    manager = Manager(harness.store, harness.controllers())
    infrastructure = [*harness.store.list(AWSCluster), *harness.store.list(AWSMachine)]
    keys = [ObjectKey(o.KIND, o.namespace or "", o.name) for o in infrastructure]
    steps: list[bool] = []

    def paused_as(wanted: str) -> bool:
        for kind in (AWSCluster, AWSMachine):
            for obj in harness.store.list(kind):
                condition = obj.status.paused_condition
                if condition is None or condition.status != wanted:
                    return False
        return True

    def flip(paused: bool) -> None:
        cluster = harness.store.get(Cluster, "demo", "default")
        cluster.spec.paused = paused
        harness.store.update(cluster)  # another writer's edit: the manager hears of it by its watch
        steps.append(paused)

    def until() -> bool:
        if manager.has_work(keys) or not set(keys) <= manager.reconciled_keys:
            return False  # the first pass, or a reconcile in flight
        if not steps:
            flip(True)
        elif steps == [True] and paused_as("True"):
            flip(False)
        return steps == [True, False] and paused_as("False")

    with call_scope() as calls:
        assert manager.run(until=until, timeout=TIMEOUT), f"not every object reported the pause: {steps}"
    assert steps == [True, False]
    assert paused_as("False")
    assert calls.total(mutating=True) == 0
