"""A controller that dies right after each create of a machine pool — the launch template, a new template
version, the Auto Scaling group — leaves no duplicate and no orphan: the next reconcile finds the template
and the group by their tags or names, and the version by the intent written before its create (moto ignores
``ClientToken``, so on this endpoint the version is created under an intent rather than a token; the token
path is tested in tests/engine/test_engine_class4_launch_template_version.py against the token harness).

The crash is a botocore ``after-call`` hook raising :class:`SimulatedCrash` (a BaseException, so nothing
in the controller handles it): AWS did the work, the process saw no response. Reconciles are driven by
hand so that the crash unwinds in the test's own thread.
"""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.api.aws import AWSCluster
from capa_py.api.cluster import Cluster
from capa_py.api.core import Secret
from capa_py.api.machinepool import AWSMachinePool, MachinePool
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import retry_on_conflict
from controllers.awsmachinepool import AWSMachinePoolController
from controllers.core_machinepool import MachinePoolController
from tests.controllers.conftest import Harness
from tests.controllers.test_machinepool_aws import NS, _groups, _objects, _templates
from tests.engine.support import Faults, SimulatedCrash

POOL = ObjectKey("AWSMachinePool", NS, "pool-workers")
_PARTS: tuple[tuple[Any, str], ...] = (
    (Cluster, "pool"),
    (AWSCluster, "pool"),
    (MachinePool, "pool-workers"),
    (AWSMachinePool, "pool-workers"),
)


@pytest.fixture
def faults() -> Any:
    injected = Faults()
    yield injected
    injected.clear()


def _cluster_ready(h: Harness) -> tuple[AWSMachinePoolController, MachinePoolController]:
    objects = _objects()
    pool_kinds = (MachinePool, AWSMachinePool)
    cluster = h.apply([o for o in objects if not isinstance(o, pool_kinds)])
    up = h.converge([o for o in cluster if not isinstance(o, Secret)], timeout=120)
    assert up.converged, up.states
    h.apply([o for o in objects if isinstance(o, pool_kinds)])
    core = MachinePoolController(h.store, infrastructure_kinds=(AWSMachinePool,))
    core.reconcile(ObjectKey("MachinePool", NS, "pool-workers"))  # owner reference, cluster label
    return AWSMachinePoolController(h.store, h.pool, h.engine), core


def _until_ready(controller: AWSMachinePoolController, h: Harness, passes: int = 5) -> AWSMachinePool:
    for _ in range(passes):
        controller.reconcile(POOL)
        pool = h.store.get(AWSMachinePool, "pool-workers", NS)
        if pool.status.ready:
            return pool
    raise AssertionError(f"the pool did not become ready: {pool.status.conditions}")


def _versions(h: Harness, template_id: str) -> list[int]:
    items = h.aws.ec2.call("DescribeLaunchTemplateVersions", LaunchTemplateId=template_id)
    return sorted(int(v["VersionNumber"]) for v in items["LaunchTemplateVersions"])


@pytest.mark.parametrize(
    ("service", "operation"),
    [("ec2", "CreateLaunchTemplate"), ("autoscaling", "CreateAutoScalingGroup")],
)
def test_a_crash_after_creating_the_template_or_the_group_makes_no_second_one(
    harness: Harness, faults: Faults, service: str, operation: str
) -> None:
    h = harness
    controller, _ = _cluster_ready(h)
    crash = faults.crash_after(h.aws, operation, service=service)

    with pytest.raises(SimulatedCrash):
        controller.reconcile(POOL)
    assert crash.fired == 1
    faults.clear()
    pool = _until_ready(controller, h)

    assert len(_templates(h)) == 1, "one launch template"
    assert list(_groups(h)) == ["default-pool-workers"], "one Auto Scaling group"
    assert pool.status.resources["launch-template"].id == pool.status.launch_template_id
    assert pool.status.resources["autoscaling-group"].id == "default-pool-workers"
    assert _versions(h, pool.status.launch_template_id or "") == [1]

    targets = [h.store.get(kind, name, NS) for kind, name in _PARTS]
    h.store.delete(Cluster, "pool", NS)
    gone = h.converge(targets, goal="gone", timeout=120)
    assert gone.converged, gone.states
    assert (_templates(h), _groups(h)) == ({}, {}), "nothing left behind"


def test_a_crash_after_creating_a_version_adopts_it_instead_of_making_another(
    harness: Harness, faults: Faults
) -> None:
    h = harness
    controller, _ = _cluster_ready(h)
    pool = _until_ready(controller, h)
    template_id = pool.status.launch_template_id or ""

    def bigger(p: AWSMachinePool) -> None:
        p.spec.aws_launch_template.instance_type = "t3.large"

    retry_on_conflict(h.store, pool, bigger)
    crash = faults.crash_after(h.aws, "CreateLaunchTemplateVersion")
    with pytest.raises(SimulatedCrash):
        controller.reconcile(POOL)
    assert crash.fired == 1
    assert _versions(h, template_id) == [1, 2]
    crashed = h.store.get(AWSMachinePool, "pool-workers", NS)
    assert [r for r in crashed.status.intents if r.startswith("launch-template-version-")], (
        "moto ignores tokens: the version was created under an intent"
    )
    faults.clear()

    pool = _until_ready(controller, h)

    assert _versions(h, template_id) == [1, 2], "the interrupted create's version is adopted, not repeated"
    assert pool.status.launch_template_version == "2"
    assert str(_groups(h)["default-pool-workers"]["LaunchTemplate"]["Version"]) == "2"
    assert pool.status.intents == {}
