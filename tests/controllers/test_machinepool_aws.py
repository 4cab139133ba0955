"""A MachinePool of AWS workers (examples/aws-cluster-machinepool.yaml) on the embedded store, against moto:
the AWSMachinePool becomes a launch template and an Auto Scaling group of ``spec.replicas`` instances;
scaling the MachinePool scales the group; a changed launch template makes one new version the group moves
to; deleting the Cluster deletes the group (waiting for its instances) and then the template. moto's Auto
Scaling launches real (emulated) EC2 instances, so what runs is checked in EC2 itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capa_app.audit import AuditClass, AuditOptions, DeletionSettings, delete_leaks, plan_deletion, run_audit
from capa_py.api.cluster import Cluster
from capa_py.api.core import Secret
from capa_py.api.loader import load_manifests
from capa_py.api.machinepool import AWSMachinePool, MachinePool
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import call_scope
from capa_py.store.helpers import retry_on_conflict
from controllers.run import converge
from controllers.services import machinepool
from controllers.services.machinepool import clamp
from tests.controllers.conftest import Harness
from tests.harness.moto_autoscaling import set_refresh_status

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machinepool.yaml"
NS = "default"


def _objects() -> list[KubeObject]:
    return load_manifests([EXAMPLE])


def _targets(stored: list[KubeObject]) -> list[KubeObject]:
    return [o for o in stored if not isinstance(o, Secret)]


def _groups(h: Harness) -> dict[str, dict[str, Any]]:
    pages = h.aws.autoscaling.pages("DescribeAutoScalingGroups", "AutoScalingGroups")
    return {g["AutoScalingGroupName"]: g for g in pages}


def _templates(h: Harness) -> dict[str, dict[str, Any]]:
    found = h.aws.ec2.call("DescribeLaunchTemplates")["LaunchTemplates"]
    return {t["LaunchTemplateId"]: t for t in found}


def _running(h: Harness) -> dict[str, dict[str, str]]:
    pages = h.aws.ec2.pages("DescribeInstances", "Reservations")
    return {
        i["InstanceId"]: {t["Key"]: t["Value"] for t in i.get("Tags", [])}
        for r in pages
        for i in r["Instances"]
        if i["State"]["Name"] in ("pending", "running")
    }


def _scale(h: Harness, replicas: int) -> MachinePool:
    def change(p: MachinePool) -> None:
        p.spec.replicas = replicas

    return retry_on_conflict(h.store, h.store.get(MachinePool, "pool-workers", NS), change)


def _finish_refreshes(h: Harness) -> None:
    """Play AWS finishing every refresh the pool starts (the test server's refreshes wait for this)."""
    for group in _groups(h):
        for refresh in h.aws.autoscaling.call("DescribeInstanceRefreshes", AutoScalingGroupName=group)[
            "InstanceRefreshes"
        ]:
            if refresh["Status"] == "Pending":
                set_refresh_status(
                    h.server.url, "us-east-1", group, refresh["InstanceRefreshId"], "Successful"
                )


def test_a_machine_pool_launches_scales_and_goes_with_its_cluster(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    targets = _targets(h.apply(_objects()))
    up = h.converge(targets, timeout=120)
    assert up.converged, up.states

    infra = h.store.get(AWSMachinePool, "pool-workers", NS)
    groups = _groups(h)
    assert list(groups) == ["default-pool-workers"], "one group, named after the pool"
    group = groups["default-pool-workers"]
    assert (group["MinSize"], group["MaxSize"], group["DesiredCapacity"]) == (1, 4, 2)
    assert group["LaunchTemplate"]["LaunchTemplateId"] == infra.status.launch_template_id
    assert infra.status.launch_template_version == "1", "the template's first version holds the launch data"
    assert len(_templates(h)) == 1
    instances = {i["InstanceId"] for i in group["Instances"]}
    assert len(instances) == 2
    assert instances <= set(_running(h)), "the group's instances run in EC2"
    tags = _running(h)[next(iter(instances))]
    assert tags["sigs.k8s.io/cluster-api-provider-aws/cluster/pool"] == "owned", "tags propagate at launch"
    assert tags["team"] == "platform"
    assert sorted(i.rpartition("/")[2] for i in infra.spec.provider_id_list) == sorted(instances)
    assert (infra.status.ready, infra.status.replicas) == (True, 2)
    assert sorted(r for r in infra.status.resources) == ["autoscaling-group", "launch-template"]
    pool = h.store.get(MachinePool, "pool-workers", NS)
    assert (pool.status.phase, pool.status.replicas, pool.status.infrastructure_ready) == ("Running", 2, True)
    assert pool.spec.provider_id_list == infra.spec.provider_id_list

    with call_scope() as calls:
        again = h.converge(targets, timeout=60)
    assert again.converged
    assert "ec2:CreateLaunchTemplateVersion" not in calls.mutating_operations(), "unchanged data: no version"
    assert "autoscaling:UpdateAutoScalingGroup" not in calls.mutating_operations()
    assert "autoscaling:DescribeInstanceRefreshes" not in calls.by_operation(), "no refresh to look at"

    scaled = h.converge([_scale(h, 3)], timeout=60)
    assert scaled.converged, scaled.states
    assert _groups(h)["default-pool-workers"]["DesiredCapacity"] == 3
    assert h.store.get(AWSMachinePool, "pool-workers", NS).status.replicas == 3

    def bigger(p: AWSMachinePool) -> None:
        p.spec.aws_launch_template.instance_type = "t3.large"

    changed = retry_on_conflict(h.store, h.store.get(AWSMachinePool, "pool-workers", NS), bigger)
    monkeypatch.setattr(machinepool, "REFRESH_POLL", 0.2)  # the running refresh is looked at again soon
    moved = converge(h.store, h.controllers(), [changed], timeout=60, on_tick=lambda _: _finish_refreshes(h))
    assert moved.converged, moved.states
    (refresh,) = h.aws.autoscaling.call(
        "DescribeInstanceRefreshes", AutoScalingGroupName="default-pool-workers"
    )["InstanceRefreshes"]
    assert refresh["DesiredConfiguration"]["LaunchTemplate"]["Version"] == "2", "the instances are replaced"
    infra = h.store.get(AWSMachinePool, "pool-workers", NS)
    assert infra.status.launch_template_version == "2"
    group = _groups(h)["default-pool-workers"]
    assert str(group["LaunchTemplate"]["Version"]) == "2"
    versions = h.aws.ec2.call(
        "DescribeLaunchTemplateVersions", LaunchTemplateId=infra.status.launch_template_id
    )["LaunchTemplateVersions"]
    assert sorted(v["VersionNumber"] for v in versions) == [1, 2]
    assert (
        next(v for v in versions if v["VersionNumber"] == 2)["LaunchTemplateData"]["InstanceType"]
        == "t3.large"
    )

    h.store.delete(Cluster, "pool", NS)
    gone = h.converge(targets, goal="gone", timeout=120)
    assert gone.converged, gone.states
    assert _groups(h) == {}
    assert _templates(h) == {}
    assert not set(_running(h)) & instances, "the group's instances were terminated with it"


def test_a_pool_without_an_image_or_version_is_refused_before_anything_is_built(harness: Harness) -> None:
    h = harness
    objects = _objects()
    for obj in objects:
        if isinstance(obj, AWSMachinePool):
            obj.spec.aws_launch_template.ami.id = None
        if isinstance(obj, MachinePool):
            obj.spec.template.spec.version = None
    stored = h.apply(objects)
    h.converge([o for o in stored if o.KIND in ("Cluster", "AWSCluster")], timeout=120)
    h.converge([o for o in stored if isinstance(o, AWSMachinePool)], timeout=10)

    infra = h.store.get(AWSMachinePool, "pool-workers", NS)
    ready = next(c for c in infra.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "MissingAMI")
    assert _groups(h) == {}
    assert _templates(h) == {}


def test_the_desired_capacity_is_the_pools_replicas_within_min_and_max() -> None:
    assert [clamp(n, 1, 4) for n in (0, 1, 3, 4, 9)] == [1, 1, 3, 4, 4]


FAST_DELETES = DeletionSettings(
    dependency_timeout=3.0, wait_timeout=20.0, poll_interval=0.05, max_poll_interval=0.2
)


def test_the_audit_sees_a_pool_as_managed_and_deletes_a_lost_one_group_before_template(
    harness: Harness,
) -> None:
    """While the pool's records exist, its group and template are managed and its instances go with the
    group; once the records are lost, both are orphans and ``capa audit --delete`` removes the group (and
    its instances) before the template."""
    h = harness
    targets = _targets(h.apply(_objects()))
    up = h.converge(targets, timeout=120)
    assert up.converged, up.states
    options = AuditOptions(clusters=frozenset({"pool"}))
    rows = {(r.kind, r.id): r.classification for r in run_audit(h.store, h.pool, options).rows}
    infra = h.store.get(AWSMachinePool, "pool-workers", NS)
    assert rows[("autoscaling-group", "default-pool-workers")] == AuditClass.MANAGED
    assert rows[("launch-template", infra.status.launch_template_id)] == AuditClass.MANAGED
    assert not [key for key in rows if key[0] == "instance"], "a live group's instances go with it"

    def lose_records(o: AWSMachinePool) -> None:
        o.status.resources = {}

    retry_on_conflict(h.store, infra, lose_records, status=True)
    report = run_audit(h.store, h.pool, options)
    leaks = {(r.kind, r.id): r.classification for r in report.rows}
    assert leaks[("autoscaling-group", "default-pool-workers")] == AuditClass.ORPHAN_UNRECORDED
    assert leaks[("launch-template", infra.status.launch_template_id)] == AuditClass.ORPHAN_UNRECORDED
    order = [(step.row.kind, step.row.id) for step in plan_deletion(report).steps]
    assert order.index(("autoscaling-group", "default-pool-workers")) < order.index(
        ("launch-template", infra.status.launch_template_id)
    )
    deletion = delete_leaks(report, h.store, h.pool, FAST_DELETES)
    assert not deletion.failed, deletion.failed
    assert _groups(h) == {}
    assert _templates(h) == {}


def test_a_machine_pool_acts_with_its_clusters_identity(harness: Harness) -> None:
    """A cluster built in another account through a role identity has its machine pool there too: the launch
    template and the Auto Scaling group are made with the identity's credentials, never the controller's."""
    from tests.controllers.test_identities import account_client, role_identity, with_identity

    h = harness
    objects = with_identity(_objects(), "AWSClusterRoleIdentity", "workload")
    targets = _targets(h.apply([role_identity(), *objects]))
    targets = [o for o in targets if o.KIND != "AWSClusterRoleIdentity"]
    up = h.converge(targets, timeout=120)
    assert up.converged, up.states

    second = account_client(h, "222222222222", "autoscaling").describe_auto_scaling_groups()
    assert [g["AutoScalingGroupName"] for g in second["AutoScalingGroups"]] == ["default-pool-workers"]
    assert _groups(h) == {}, "nothing of the pool in the controller's own account"
    assert _templates(h) == {}
    templates = account_client(h, "222222222222").describe_launch_templates()["LaunchTemplates"]
    infra = h.store.get(AWSMachinePool, "pool-workers", NS)
    assert [t["LaunchTemplateId"] for t in templates] == [infra.status.launch_template_id]

    h.store.delete(Cluster, "pool", NS)
    gone = h.converge(targets, goal="gone", timeout=120)
    assert gone.converged, gone.states
    left = account_client(h, "222222222222", "autoscaling").describe_auto_scaling_groups()
    assert left["AutoScalingGroups"] == []
