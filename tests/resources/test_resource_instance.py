"""EC2 instances against moto: launch parameters, tags on the instance and its volume, bootstrap data kept
secret, terminated instances treated as gone."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest

from capa_py.aws.errors import AWSError, InvalidRequest
from resources.instance import Instance
from resources.security_group import SecurityGroup, SecurityGroupDesired
from tests.resources.builders import Builder

BOOTSTRAP = (
    b"#cloud-config\nwrite_files:\n- path: /etc/kubernetes/pki/ca.key\n  content: SECRET-KEY-MATERIAL\n"
)


def test_launch_parameters_tags_and_bootstrap_data(build: Builder) -> None:
    subnet = build.subnet()
    group = SecurityGroup(build.aws).create(
        SecurityGroupDesired(subnet.attributes["vpc_id"], "alpha-node", "nodes"), None, None
    )
    build.aws.client("iam").call("CreateInstanceProfile", InstanceProfileName="alpha-nodes")
    build.aws.ec2.call("CreateKeyPair", KeyName="alpha-admin")
    desired = build.instance_desired(
        subnet.id,
        security_group_ids=(group.id,),
        iam_instance_profile="alpha-nodes",
        key_name="alpha-admin",
        root_volume_size=40,
        user_data=BOOTSTRAP,
    )
    instances = Instance(build.aws)

    created = instances.create(desired, build.tags("node-1"), "machine-uid-token")

    observed = instances.describe_by_id(created.id)
    assert observed is not None
    assert instances.is_ready(observed), f"state {observed.state}"
    assert observed.tags == build.tags("node-1")
    attributes = observed.attributes
    assert attributes["subnet_id"] == subnet.id
    assert attributes["security_group_ids"] == [group.id]
    assert attributes["key_name"] == "alpha-admin"
    assert attributes["iam_instance_profile_arn"].endswith("instance-profile/alpha-nodes")
    assert attributes["private_ip"]
    assert attributes["private_dns_name"]

    volumes = build.aws.ec2.call(
        "DescribeVolumes", Filters=[{"Name": "attachment.instance-id", "Values": [created.id]}]
    )["Volumes"]
    assert [(v["Size"], v["Attachments"][0]["Device"]) for v in volumes] == [(40, "/dev/sda1")]
    assert build.tags("node-1").items() <= {t["Key"]: t["Value"] for t in volumes[0]["Tags"]}.items()

    user_data = build.aws.ec2.call("DescribeInstanceAttribute", InstanceId=created.id, Attribute="userData")
    assert base64.b64decode(user_data["UserData"]["Value"]) == BOOTSTRAP, "base64 of the bytes, exactly once"


def test_bootstrap_data_never_leaves_in_repr_key_fingerprint_or_errors(build: Builder) -> None:
    instances = Instance(build.aws)
    desired = build.instance_desired("subnet-0123456789abcdef0", user_data=BOOTSTRAP)
    exposed = [repr(desired), instances.key_of(desired), *instances.fingerprint(desired).values()]
    assert not [text for text in exposed if "SECRET" in text or "cloud-config" in text]
    assert "user_data" not in instances.fingerprint(desired)

    with pytest.raises(AWSError) as failure:
        instances.create(desired, None, None)  # the subnet does not exist
    assert "SECRET" not in str(failure.value)
    assert base64.b64encode(BOOTSTRAP).decode()[:16] not in str(failure.value)


def test_terminated_instances_are_gone(build: Builder, lookup: Any) -> None:
    instances = Instance(build.aws)
    desired = build.instance_desired(build.subnet().id)
    doomed = instances.create(desired, build.tags("worker"), None)
    survivor = instances.create(desired, build.tags("worker"), None)

    instances.delete(doomed.id)

    assert instances.describe_by_id(doomed.id) is None
    assert [o.id for o in instances.describe_by_tags(lookup("worker"), desired)] == [survivor.id]
    instances.delete(doomed.id)  # terminating a terminated instance succeeds, in AWS too


def test_candidates_are_unowned_live_instances_launched_like_the_desired_one(build: Builder) -> None:
    instances = Instance(build.aws)
    subnet_id = build.subnet().id
    desired = build.instance_desired(subnet_id)
    untagged = instances.create(desired, None, None)
    instances.create(desired, build.tags("worker"), None)  # owned
    instances.create(
        dataclasses.replace(desired, instance_type="m5.large"), None, None
    )  # launched differently
    terminated = instances.create(desired, None, None)
    instances.delete(terminated.id)

    assert [o.id for o in instances.describe_candidates(desired)] == [untagged.id]


def test_root_volume_of_an_unknown_image_is_a_user_error(build: Builder) -> None:
    desired = build.instance_desired(build.subnet().id, image_id="ami-0123456789abcdef0", root_volume_size=20)
    with pytest.raises(InvalidRequest) as failure:
        Instance(build.aws).create(desired, None, None)
    assert failure.value.code == "InvalidAMIID.NotFound"


def test_an_instance_with_a_public_address_reports_its_interfaces_groups(build: Builder) -> None:
    """Launched with an interface specification (which a public address needs), the instance's groups are
    its primary interface's, whether or not the endpoint lists them on the instance too."""
    subnet = build.subnet(public=True)
    group = SecurityGroup(build.aws).create(
        SecurityGroupDesired(subnet.attributes["vpc_id"], "alpha-bastion", "bastion"), None, None
    )
    desired = build.instance_desired(subnet.id, security_group_ids=(group.id,), public_ip=True)
    instances = Instance(build.aws)
    launched = instances.create(desired, build.tags("bastion"), None)
    observed = instances.describe_by_id(launched.id)
    assert observed is not None
    assert observed.attributes["security_group_ids"] == [group.id]
    assert instances.update(observed, desired) is False, "nothing to change: the groups are the desired ones"
