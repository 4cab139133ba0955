"""Every AWSMachine spec field takes effect on the instance the controller launches, read back from moto:
key pair, instance profile, public address, root volume (size, type, IOPS, encryption); and the mutable
fields (additional tags, additional security groups) reach the running instance when they change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from capa_py.api.aws import AWSCluster, AWSMachine, AWSResourceReference, SpotMarketOptions, Volume
from capa_py.api.cluster import Machine
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.operations import apply_objects
from tests.controllers.conftest import Harness

WORKER = "demo-worker-0"


def _instance(harness: Harness, name: str = WORKER) -> dict[str, Any]:
    instance_id = harness.store.get(AWSMachine, name, "default").status.instance_id
    assert instance_id, f"{name} has no instance recorded"
    reservations = harness.aws.ec2.call("DescribeInstances", InstanceIds=[instance_id])["Reservations"]
    return dict(reservations[0]["Instances"][0])


def _root_volume(harness: Harness, instance: dict[str, Any]) -> dict[str, Any]:
    volume_id = next(
        m["Ebs"]["VolumeId"]
        for m in instance["BlockDeviceMappings"]
        if m["DeviceName"] == instance["RootDeviceName"]
    )
    return dict(harness.aws.ec2.call("DescribeVolumes", VolumeIds=[volume_id])["Volumes"][0])


def _worker(objects: list[KubeObject]) -> AWSMachine:
    machine = next(o for o in objects if isinstance(o, AWSMachine) and o.name == WORKER)
    assert isinstance(machine, AWSMachine)
    return machine


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if not isinstance(o, Secret)]


def _with_everything(objects: list[KubeObject]) -> list[KubeObject]:
    for obj in objects:
        if isinstance(obj, AWSCluster):
            obj.spec.ssh_key_name = "cluster-key"  # the default for machines that name none
        if isinstance(obj, Machine) and obj.name == "demo-worker-1":
            obj.spec.failure_domain = "us-east-1b"
    spec = _worker(objects).spec
    spec.ssh_key_name = "admin"
    spec.iam_instance_profile = "nodes"
    spec.public_ip = True
    spec.root_volume = Volume(size=20, type="gp3", iops=4000, encrypted=True)
    return objects


def test_machine_launch_fields_reach_the_instance(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    harness.aws.ec2.call("CreateKeyPair", KeyName="admin")
    harness.aws.ec2.call("CreateKeyPair", KeyName="cluster-key")
    profile_arn = harness.aws.client("iam").call("CreateInstanceProfile", InstanceProfileName="nodes")[
        "InstanceProfile"
    ]["Arn"]
    objects = _targets(harness.apply(_with_everything(example())))
    result = harness.converge(objects)
    assert result.converged, f"not converged: {result.states}"

    instance = _instance(harness)
    assert instance.get("KeyName") == "admin", instance.get("KeyName")
    assert instance.get("IamInstanceProfile", {}).get("Arn") == profile_arn, instance.get(
        "IamInstanceProfile"
    )
    assert instance.get("PublicIpAddress"), "spec.publicIP: true launched an instance without a public IP"
    public_subnets = {
        s.id for s in harness.store.get(AWSCluster, "demo", "default").status.network.subnets if s.is_public
    }
    assert instance["SubnetId"] in public_subnets, "a machine with publicIP: true is not in a public subnet"
    volume = _root_volume(harness, instance)
    found = {k: volume.get(k) for k in ("Size", "VolumeType", "Iops", "Encrypted")}
    assert found == {"Size": 20, "VolumeType": "gp3", "Iops": 4000, "Encrypted": True}, found

    # Another worker, without those fields: the cluster's key, no public address, a private subnet in its
    # failure domain.
    other = _instance(harness, "demo-worker-1")
    assert other.get("KeyName") == "cluster-key", other.get("KeyName")
    assert not other.get("IamInstanceProfile"), other.get("IamInstanceProfile")
    assert not other.get("PublicIpAddress"), other.get("PublicIpAddress")
    assert other["SubnetId"] not in public_subnets
    assert other["Placement"]["AvailabilityZone"] == "us-east-1b", other["Placement"]


def test_additional_tags_and_security_groups_changes_reach_the_running_instance(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(example()))
    assert harness.converge(objects).converged
    before = _instance(harness)
    vpc_id = harness.store.get(AWSCluster, "demo", "default").status.network.vpc_id
    extra = harness.aws.ec2.call(
        "CreateSecurityGroup", GroupName="monitoring", Description="monitoring", VpcId=vpc_id
    )["GroupId"]

    changed = example()
    spec = _worker(changed).spec
    spec.additional_tags = {"role": "batch"}
    spec.additional_security_groups = [AWSResourceReference(id=extra)]
    outcomes = {a.object.ref(): a.outcome for a in apply_objects(harness.store, changed)}
    assert outcomes[f"AWSMachine default/{WORKER}"] == "configured", outcomes
    assert harness.converge(objects).converged

    after = _instance(harness)
    assert after["InstanceId"] == before["InstanceId"], "a mutable change replaced the instance"
    tags = {t["Key"]: t["Value"] for t in after.get("Tags", [])}
    assert tags.get("role") == "batch", tags
    groups = {g["GroupId"] for g in after["SecurityGroups"]}
    assert extra in groups, f"the additional security group is not on the instance: {groups}"
    assert {g["GroupId"] for g in before["SecurityGroups"]} < groups, "the cluster's groups were lost"


def test_a_machine_naming_a_subnet_is_launched_in_it(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply([o for o in example() if not isinstance(o, Machine | AWSMachine)]))
    assert harness.converge(objects).converged
    subnets = harness.store.get(AWSCluster, "demo", "default").status.network.subnets
    chosen = next(s for s in subnets if s.is_public and s.availability_zone == "us-east-1c")
    machines = [o for o in example() if isinstance(o, Machine | AWSMachine) and o.name == WORKER]
    _worker(machines).spec.subnet = AWSResourceReference(id=chosen.id)
    stored = harness.apply(machines)
    assert harness.converge(stored).converged
    assert _instance(harness)["SubnetId"] == chosen.id


def test_a_machine_whose_tags_with_the_clusters_exceed_the_aws_limit_is_not_launched(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """Objects that arrive one by one (kubectl, a controller) pass the per-object check; the controller
    refuses the merge before launching: before, RunInstances failed at AWS with a tag limit error on each
    retry. Once the machine's tags are cut, it launches."""
    objects = example()
    for obj in objects:
        if isinstance(obj, AWSCluster):
            obj.spec.additional_tags = {f"cluster-{i}": "x" for i in range(30)}
    _worker(objects).spec.additional_tags = {f"machine-{i}": "x" for i in range(20)}
    applied = _targets(harness.apply(objects))
    others = [o for o in applied if not (isinstance(o, AWSMachine | Machine) and o.name == WORKER)]
    converged = harness.converge(others)
    assert converged.converged, converged.states

    worker = harness.store.get(AWSMachine, WORKER, "default")
    assert worker.status.instance_id is None, "the machine was launched"
    ready = next(c for c in worker.status.conditions if c.type == "InstanceReady")
    assert (ready.status, ready.reason) == ("False", "InvalidTags"), ready
    assert ready.message is not None
    assert "spec.additionalTags: 50 additional tags with its AWSCluster's" in ready.message, ready.message
    named = [
        i
        for r in harness.aws.ec2.call("DescribeInstances")["Reservations"]
        for i in r["Instances"]
        if {"Key": "Name", "Value": WORKER} in i.get("Tags", [])
    ]
    assert named == [], named

    fixed = example()
    for obj in fixed:
        if isinstance(obj, AWSCluster):
            obj.spec.additional_tags = {f"cluster-{i}": "x" for i in range(30)}
    _worker(fixed).spec.additional_tags = {f"machine-{i}": "x" for i in range(14)}
    harness.apply(fixed)
    assert harness.converge(applied).converged
    assert harness.store.get(AWSMachine, WORKER, "default").status.instance_id


def test_a_spot_machine_is_launched_as_a_one_time_spot_instance_at_its_price(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    launches: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        launches.append(params)

    harness.aws.ec2.raw.meta.events.register("provide-client-params.ec2.RunInstances", record)
    objects = example()
    _worker(objects).spec.spot_market_options = SpotMarketOptions(max_price="0.05")
    objects = _targets(harness.apply(objects))
    assert harness.converge(objects).converged

    asked = [p.get("InstanceMarketOptions") for p in launches if "InstanceMarketOptions" in p]
    assert asked == [
        {
            "MarketType": "spot",
            "SpotOptions": {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
                "MaxPrice": "0.05",
            },
        }
    ], f"one spot launch expected, for {WORKER} only: {asked}"
    assert _instance(harness).get("InstanceLifecycle") == "spot"
    assert _instance(harness, "demo-worker-1").get("InstanceLifecycle") is None


def test_an_interrupted_spot_instance_is_replaced_by_another_spot_instance(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    objects = example()
    _worker(objects).spec.spot_market_options = SpotMarketOptions()
    objects = _targets(harness.apply(objects))
    assert harness.converge(objects).converged
    interrupted = _instance(harness)["InstanceId"]
    # What AWS does to a one-time Spot Instance it interrupts (interruption behaviour "terminate").
    harness.aws.ec2.call("TerminateInstances", InstanceIds=[interrupted])

    assert harness.converge(objects).converged
    replacement = _instance(harness)
    assert replacement["InstanceId"] != interrupted
    assert replacement.get("InstanceLifecycle") == "spot"
    assert replacement["State"]["Name"] == "running"
