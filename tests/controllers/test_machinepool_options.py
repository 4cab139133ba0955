"""A machine pool's mixed instances policy and lifecycle hooks (CAPA's ``mixedInstancesPolicy`` and
``lifecycleHooks``), against moto over HTTP.

moto stores a group's ``MixedInstancesPolicy`` and reports it in ``DescribeAutoScalingGroups`` (an update
that leaves the policy out drops it there, where AWS keeps it: the pool sends it with every update). moto
launches only the On-Demand part of a group (no Spot), so the policies here keep every instance On-Demand
(``onDemandPercentageAboveBaseCapacity`` 100) for the pool to become ready. moto
5.2.5 drops a lifecycle hook's ``NotificationTargetARN``, ``RoleARN`` and ``NotificationMetadata`` and
answers fixed example ARNs: the test server keeps what the request gave
(``tests/harness/moto_autoscaling.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capa_py.api.loader import ManifestError, load_manifests
from capa_py.api.machinepool import (
    AWSLifecycleHook,
    AWSMachinePool,
    InstancesDistribution,
    InstanceTypeOverride,
    MachinePool,
    MixedInstancesPolicy,
)
from capa_py.aws.accounting import call_scope
from capa_py.runtime.queue import ObjectKey
from capa_py.store.helpers import retry_on_conflict
from controllers.awsmachinepool import AWSMachinePoolController
from tests.controllers.conftest import Harness

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machinepool.yaml"
NS = "default"
GROUP = "default-pool-workers"
KEY = ObjectKey("AWSMachinePool", NS, "pool-workers")
UPDATE = "autoscaling:UpdateAutoScalingGroup"
PUT, DELETE, DESCRIBE = (
    "autoscaling:PutLifecycleHook",
    "autoscaling:DeleteLifecycleHook",
    "autoscaling:DescribeLifecycleHooks",
)
QUEUE = "arn:aws:sqs:us-east-1:123456789012:drain"
ROLE = "arn:aws:iam::123456789012:role/hooks"


def _apply(h: Harness, change: Any) -> list[Any]:
    objects = load_manifests([EXAMPLE])
    for obj in objects:
        if isinstance(obj, AWSMachinePool):
            change(obj)
    return [o for o in h.apply(objects) if o.KIND != "Secret"]


def _group(h: Harness) -> dict[str, Any]:
    (group,) = h.aws.autoscaling.call("DescribeAutoScalingGroups", AutoScalingGroupNames=[GROUP])[
        "AutoScalingGroups"
    ]
    return dict(group)


def _edit(h: Harness, change: Any) -> AWSMachinePool:
    return retry_on_conflict(h.store, h.store.get(AWSMachinePool, "pool-workers", NS), change)


def _pool_controller(h: Harness) -> AWSMachinePoolController:
    return next(c for c in h.controllers() if isinstance(c, AWSMachinePoolController))


def test_a_mixed_instances_policy_goes_to_the_group_and_a_change_updates_it(harness: Harness) -> None:
    h = harness

    def mixed(p: AWSMachinePool) -> None:
        p.spec.mixed_instances_policy = MixedInstancesPolicy(
            instances_distribution=InstancesDistribution(
                on_demand_base_capacity=1,
                spot_allocation_strategy="capacity-optimized",
            ),
            overrides=[
                InstanceTypeOverride(instance_type="t3.medium"),
                InstanceTypeOverride(instance_type="t3.large"),
            ],
        )

    targets = _apply(h, mixed)
    up = h.converge(targets, timeout=120)
    assert up.converged, up.states
    infra = h.store.get(AWSMachinePool, "pool-workers", NS)
    group = _group(h)
    policy = group["MixedInstancesPolicy"]
    assert policy["InstancesDistribution"] == {
        "OnDemandAllocationStrategy": "prioritized",
        "OnDemandBaseCapacity": 1,
        "OnDemandPercentageAboveBaseCapacity": 100,
        "SpotAllocationStrategy": "capacity-optimized",
    }
    assert [o["InstanceType"] for o in policy["LaunchTemplate"]["Overrides"]] == ["t3.medium", "t3.large"]
    spec = policy["LaunchTemplate"]["LaunchTemplateSpecification"]
    assert (spec["LaunchTemplateId"], spec["Version"]) == (infra.status.launch_template_id, "1")
    assert "LaunchTemplate" not in group, "AWS takes the template or the policy, not both"

    with call_scope() as calls:
        again = h.converge(targets, timeout=60)
    assert again.converged
    assert UPDATE not in calls.by_operation(), "the policy as AWS reports it is the pool's: no update"

    def more_spot(p: AWSMachinePool) -> None:
        assert p.spec.mixed_instances_policy is not None
        assert p.spec.mixed_instances_policy.instances_distribution is not None
        p.spec.mixed_instances_policy.instances_distribution.on_demand_base_capacity = 2
        p.spec.mixed_instances_policy.overrides.append(InstanceTypeOverride(instance_type="t3.xlarge"))

    with call_scope() as calls:
        changed = h.converge([_edit(h, more_spot)], timeout=60)
    assert changed.converged, changed.states
    assert calls.by_operation().get(UPDATE) == 1
    policy = _group(h)["MixedInstancesPolicy"]
    assert policy["InstancesDistribution"]["OnDemandBaseCapacity"] == 2
    assert [o["InstanceType"] for o in policy["LaunchTemplate"]["Overrides"]] == [
        "t3.medium",
        "t3.large",
        "t3.xlarge",
    ]

    def scale(p: MachinePool) -> None:
        p.spec.replicas = 3

    pool = retry_on_conflict(h.store, h.store.get(MachinePool, "pool-workers", NS), scale)
    scaled = h.converge([pool], timeout=60)
    assert scaled.converged, scaled.states
    group = _group(h)
    assert group["DesiredCapacity"] == 3
    assert group["MixedInstancesPolicy"]["InstancesDistribution"]["OnDemandBaseCapacity"] == 2


def test_a_bad_mixed_instances_policy_is_refused_naming_the_field(tmp_path: Path) -> None:
    policy = (
        "  mixedInstancesPolicy:\n    instancesDistribution:\n"
        "      onDemandPercentageAboveBaseCapacity: 101\n"
        "    overrides:\n    - instanceType: t3.gigantic\n"
    )
    path = tmp_path / "pool.yaml"
    path.write_text(EXAMPLE.read_text().replace("  minSize: 1\n", "  minSize: 1\n" + policy))
    with pytest.raises(ManifestError) as refused:
        load_manifests([path])
    assert "spec.mixedInstancesPolicy.instancesDistribution.onDemandPercentageAboveBaseCapacity" in str(
        refused.value
    )
    (pool,) = [o for o in load_manifests([EXAMPLE]) if isinstance(o, AWSMachinePool)]
    pool.spec.mixed_instances_policy = MixedInstancesPolicy(
        overrides=[InstanceTypeOverride(instance_type="t3.gigantic")]
    )
    issues = {i.path: i.message for i in pool.semantic_issues()}
    assert "t3.gigantic" in issues["spec.mixedInstancesPolicy.overrides[0].instanceType"]


def test_lifecycle_hooks_converge_with_a_call_only_where_something_differs(harness: Harness) -> None:
    h = harness
    drain = AWSLifecycleHook(
        name="drain",
        lifecycle_transition="autoscaling:EC2_INSTANCE_TERMINATING",
        notification_target_arn=QUEUE,
        role_arn=ROLE,
        heartbeat_timeout="5m",
        default_result="CONTINUE",
        notification_metadata="pool-workers",
    )
    warm = AWSLifecycleHook(name="warm", lifecycle_transition="autoscaling:EC2_INSTANCE_LAUNCHING")

    def hooks(p: AWSMachinePool) -> None:
        p.spec.lifecycle_hooks = [drain, warm]

    targets = _apply(h, hooks)
    up = h.converge(targets, timeout=120)
    assert up.converged, up.states
    found = {
        x["LifecycleHookName"]: x
        for x in h.aws.autoscaling.call("DescribeLifecycleHooks", AutoScalingGroupName=GROUP)[
            "LifecycleHooks"
        ]
    }
    assert set(found) == {"drain", "warm"}
    assert found["drain"]["LifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING"
    assert (found["drain"]["NotificationTargetARN"], found["drain"]["RoleARN"]) == (QUEUE, ROLE)
    assert (found["drain"]["HeartbeatTimeout"], found["drain"]["DefaultResult"]) == (300, "CONTINUE")
    assert found["drain"]["NotificationMetadata"] == "pool-workers"
    assert (found["warm"]["HeartbeatTimeout"], found["warm"]["DefaultResult"]) == (3600, "ABANDON")
    assert h.store.get(AWSMachinePool, "pool-workers", NS).status.lifecycle_hooks == ["drain", "warm"]

    controller = _pool_controller(h)
    with call_scope() as calls:
        controller.reconcile(KEY)
    counts = calls.by_operation()
    assert (counts.get(DESCRIBE), counts.get(PUT, 0), counts.get(DELETE, 0)) == (1, 0, 0), "steady: one look"

    def change(p: AWSMachinePool) -> None:
        p.spec.lifecycle_hooks = [drain.model_copy(update={"heartbeat_timeout": "10m"})]

    _edit(h, change)
    with call_scope() as calls:
        controller.reconcile(KEY)
    counts = calls.by_operation()
    assert (counts.get(PUT), counts.get(DELETE)) == (1, 1), "drain changed, warm no longer declared"
    found = {
        x["LifecycleHookName"]: x
        for x in h.aws.autoscaling.call("DescribeLifecycleHooks", AutoScalingGroupName=GROUP)[
            "LifecycleHooks"
        ]
    }
    assert list(found) == ["drain"]
    assert found["drain"]["HeartbeatTimeout"] == 600

    def none(p: AWSMachinePool) -> None:
        p.spec.lifecycle_hooks = []

    _edit(h, none)
    controller.reconcile(KEY)
    assert (
        h.aws.autoscaling.call("DescribeLifecycleHooks", AutoScalingGroupName=GROUP)["LifecycleHooks"] == []
    )
    with call_scope() as calls:
        controller.reconcile(KEY)
    assert DESCRIBE not in calls.by_operation(), "no hook declared, none put: no call"


def test_bad_lifecycle_hooks_are_refused_naming_the_field() -> None:
    (pool,) = [o for o in load_manifests([EXAMPLE]) if isinstance(o, AWSMachinePool)]
    pool.spec.lifecycle_hooks = [
        AWSLifecycleHook(
            name="drain",
            lifecycle_transition="autoscaling:EC2_INSTANCE_TERMINATING",
            heartbeat_timeout="3h",
            notification_target_arn=QUEUE,
        ),
        AWSLifecycleHook(name="drain", lifecycle_transition="autoscaling:EC2_INSTANCE_LAUNCHING"),
    ]
    issues = {i.path: i.message for i in pool.semantic_issues()}
    assert "30s to 2h" in issues["spec.lifecycleHooks[0].heartbeatTimeout"]
    assert "together" in issues["spec.lifecycleHooks[0].roleARN"]
    assert "more than once" in issues["spec.lifecycleHooks[1].name"]
