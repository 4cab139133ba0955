"""Ignition bootstrap data in the cluster's S3 bucket (CAPA's ClusterObjectStore), against moto over HTTP with
the real controllers and ``examples/aws-cluster-ignition.yaml``.

The cluster makes its ``spec.s3Bucket`` (through the engine: moto drops CreateBucket's tags, so it is tagged
after — class 3 — and found again by its name) with a policy letting the named profiles' roles read
``control-plane/*`` and ``node/*``; each machine whose bootstrap Secret's ``format`` is ``ignition`` uploads
its data as ``control-plane/<name>`` or ``node/<name>`` and boots from a small Ignition config replacing
itself with ``s3://<bucket>/<key>``; ``UnencryptedUserData`` keeps the data in the user data. The object goes
when the machine's node joins or the machine is deleted, the bucket (emptied) with the cluster. Ignition data
for a cluster without a bucket is refused naming the field, before anything of the machine is made. Crash
points: after CreateBucket and after PutObject, the next pass leaves no duplicate and no orphan.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.cluster import Machine, NodeReference
from capa_py.api.core import Secret
from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject
from capa_py.aws.accounting import call_scope
from capa_py.runtime.queue import ObjectKey
from controllers.awscluster import AWSClusterController
from controllers.awsmachine import AWSMachineController
from controllers.services.ignition import IGNITION_DATA_DELETED, pointer_config
from controllers.services.objectstore import bucket_policy
from tests.audit.helpers import crash_after, crashing
from tests.controllers.conftest import Harness

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-ignition.yaml"
BUCKET = "flatcar-ignition-example"
CONTROL_PLANE = "flatcar-control-plane-0"
WORKER = "flatcar-worker-0"
PLAIN_WORKER = "flatcar-worker-1"


@pytest.fixture
def ignition_example() -> Callable[[], list[KubeObject]]:
    return lambda: load_manifests([EXAMPLE])


def _targets(objects: list[KubeObject]) -> list[KubeObject]:
    return [o for o in objects if not isinstance(o, Secret)]


def _data(harness: Harness) -> bytes:
    return harness.store.get(Secret, "flatcar-bootstrap", "default").value("value")


def _keys(harness: Harness) -> list[str]:
    listed = harness.aws.client("s3").call("ListObjectsV2", Bucket=BUCKET)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def _object(harness: Harness, key: str) -> bytes:
    body: bytes = harness.aws.client("s3").call("GetObject", Bucket=BUCKET, Key=key)["Body"].read()
    return body


def _buckets(harness: Harness) -> list[str]:
    return [b["Name"] for b in harness.aws.client("s3").call("ListBuckets").get("Buckets", [])]


def _user_data(harness: Harness, name: str) -> bytes:
    instance_id = harness.store.get(AWSMachine, name, "default").status.instance_id
    attribute = harness.aws.ec2.call(
        "DescribeInstanceAttribute", InstanceId=instance_id, Attribute="userData"
    )
    return base64.b64decode(attribute["UserData"]["Value"])


def _instances(harness: Harness) -> list[str]:
    reservations = harness.aws.ec2.call(
        "DescribeInstances", Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"]
    return [i["InstanceId"] for r in reservations for i in r["Instances"]]


def test_ignition_data_is_uploaded_and_the_user_data_points_at_it(
    harness: Harness, ignition_example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(ignition_example()))
    with call_scope() as calls:
        result = harness.converge(objects)
    assert result.converged, f"not converged: {result.states}"

    data = _data(harness)
    assert _keys(harness) == [f"control-plane/{CONTROL_PLANE}", f"node/{WORKER}"], "none for the plain worker"
    assert _object(harness, f"control-plane/{CONTROL_PLANE}") == data
    assert _object(harness, f"node/{WORKER}") == data

    control_plane = json.loads(_user_data(harness, CONTROL_PLANE))
    assert control_plane == {
        "ignition": {
            "version": "3.4.0",
            "config": {"replace": {"source": f"s3://{BUCKET}/control-plane/{CONTROL_PLANE}"}},
        }
    }
    worker = json.loads(_user_data(harness, WORKER))
    assert worker["ignition"]["version"] == "2.3.0", "the default version"
    assert worker["ignition"]["config"]["replace"]["source"] == f"s3://{BUCKET}/node/{WORKER}"
    assert _user_data(harness, PLAIN_WORKER) == data, "UnencryptedUserData: the data as it is"

    tags = harness.aws.client("s3").call("GetBucketTagging", Bucket=BUCKET)["TagSet"]
    assert {"Key": "sigs.k8s.io/cluster-api-provider-aws/cluster/flatcar", "Value": "owned"} in tags
    awscluster = harness.store.get(AWSCluster, "flatcar", "default")
    assert awscluster.status.resources["ignition-bucket"].id == BUCKET
    policy = json.loads(harness.aws.client("s3").call("GetBucketPolicy", Bucket=BUCKET)["Policy"])
    readers = {
        s["Sid"]: (s["Principal"]["AWS"], s["Resource"])
        for s in policy["Statement"]
        if s["Effect"] == "Allow"
    }
    assert readers == {
        "ControlPlaneRead": (
            ["arn:aws:iam::123456789012:role/control-plane.cluster-api-provider-aws.sigs.k8s.io"],
            [f"arn:aws:s3:::{BUCKET}/control-plane/*"],
        ),
        "NodesRead0": (
            ["arn:aws:iam::123456789012:role/nodes.cluster-api-provider-aws.sigs.k8s.io"],
            [f"arn:aws:s3:::{BUCKET}/node/*"],
        ),
    }
    by_operation = calls.by_operation()
    assert by_operation["s3:PutObject"] == 2, "one upload per machine in the bucket"
    assert by_operation["s3:PutBucketPolicy"] == 1
    assert by_operation["sts:GetCallerIdentity"] == 1
    assert "secretsmanager:CreateSecret" not in by_operation, "Ignition data never goes to Secrets Manager"

    with call_scope() as again:
        for obj in objects:
            if isinstance(obj, AWSMachine):
                AWSMachineController(harness.store, harness.new_pool(), harness.engine).reconcile(
                    ObjectKey("AWSMachine", "default", obj.name)
                )
        AWSClusterController(harness.store, harness.new_pool(), harness.engine).reconcile(
            ObjectKey("AWSCluster", "default", "flatcar")
        )
    repeated = again.by_operation()
    for operation in ("s3:PutObject", "s3:PutBucketPolicy", "sts:GetCallerIdentity", "s3:CreateBucket"):
        assert operation not in repeated, f"a pass with nothing to change calls {operation}"


def test_ignition_data_without_a_bucket_is_refused_naming_the_field(
    harness: Harness, ignition_example: Callable[[], list[KubeObject]]
) -> None:
    objects = ignition_example()
    awscluster = next(o for o in objects if isinstance(o, AWSCluster))
    awscluster.spec.s3_bucket = None
    objects = _targets(harness.apply(objects))
    with call_scope() as calls:
        harness.converge(objects, timeout=10.0)

    for name in (CONTROL_PLANE, WORKER):
        machine = harness.store.get(AWSMachine, name, "default")
        ready = next(c for c in machine.status.conditions if c.type == "InstanceReady")
        assert ready.reason == "MissingS3Bucket"
        assert "spec.s3Bucket" in (ready.message or "")
        assert machine.status.instance_id is None
        assert not machine.status.resources, "nothing made for the refused machine"
    assert harness.store.get(AWSMachine, PLAIN_WORKER, "default").status.instance_id, "UnencryptedUserData"
    assert len(_instances(harness)) == 1
    assert "s3:PutObject" not in calls.by_operation()
    assert _buckets(harness) == []


def test_the_object_goes_once_the_node_joins_then_no_call(
    harness: Harness, ignition_example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(ignition_example()))
    assert harness.converge(objects).converged
    machine = harness.store.get(Machine, WORKER, "default")
    machine.status.node_ref = NodeReference(name="ip-10-0-64-10.ec2.internal")
    harness.store.update_status(machine)
    key = ObjectKey("AWSMachine", "default", WORKER)

    with call_scope() as calls:
        AWSMachineController(harness.store, harness.new_pool(), harness.engine).reconcile(key)
    assert calls.by_operation()["s3:DeleteObject"] == 1
    assert _keys(harness) == [f"control-plane/{CONTROL_PLANE}"], "the control plane's node has not joined"
    conditions = harness.store.get(AWSMachine, WORKER, "default").status.conditions
    assert any(c.type == IGNITION_DATA_DELETED and c.status == "True" for c in conditions)

    with call_scope() as again:
        AWSMachineController(harness.store, harness.new_pool(), harness.engine).reconcile(key)
    assert "s3:DeleteObject" not in again.by_operation()


def test_deleting_a_machine_deletes_its_object_and_the_cluster_its_bucket(
    harness: Harness, ignition_example: Callable[[], list[KubeObject]]
) -> None:
    objects = _targets(harness.apply(ignition_example()))
    assert harness.converge(objects).converged
    # An object no machine will delete: the cluster's delete empties the bucket of it.
    harness.aws.client("s3").call("PutObject", Bucket=BUCKET, Key="node/left-behind", Body=b"{}")

    worker = harness.store.get(AWSMachine, WORKER, "default")
    harness.store.delete(AWSMachine, WORKER, "default")
    assert harness.converge([worker], goal="gone").converged
    assert _keys(harness) == [f"control-plane/{CONTROL_PLANE}", "node/left-behind"]

    cluster = harness.store.get(AWSCluster, "flatcar", "default")
    for obj in objects:
        if isinstance(obj, AWSMachine) and obj.name != WORKER:
            harness.store.delete(AWSMachine, obj.name, "default")
    assert harness.converge([o for o in objects if isinstance(o, AWSMachine)], goal="gone").converged
    assert _keys(harness) == ["node/left-behind"]
    harness.store.delete(AWSCluster, "flatcar", "default")
    assert harness.converge([cluster], goal="gone").converged
    assert _buckets(harness) == [], "the bucket, emptied, goes with the cluster"


def _cluster_key() -> ObjectKey:
    return ObjectKey("AWSCluster", "default", "flatcar")


def test_a_crash_after_create_bucket_leaves_one_bucket_recorded_and_tagged(
    harness: Harness, ignition_example: Callable[[], list[KubeObject]]
) -> None:
    # The cluster built first without its bucket, then given one: the next AWSCluster pass makes it.
    objects = ignition_example()
    awscluster = next(o for o in objects if isinstance(o, AWSCluster))
    bucket = awscluster.spec.s3_bucket
    awscluster.spec.s3_bucket = None
    objects = [o for o in _targets(harness.apply(objects)) if isinstance(o, AWSCluster)]
    assert harness.converge(objects).converged
    stored = harness.store.get(AWSCluster, "flatcar", "default")
    stored.spec.s3_bucket = bucket
    harness.store.update(stored)
    with crash_after("CreateBucket"):
        crashing(
            lambda: AWSClusterController(harness.store, harness.new_pool(), harness.engine).reconcile(
                _cluster_key()
            )
        )
    assert _buckets(harness) == [BUCKET]
    assert "ignition-bucket" not in harness.store.get(AWSCluster, "flatcar", "default").status.resources

    with call_scope() as calls:
        result = harness.converge([harness.store.get(AWSCluster, "flatcar", "default")])
    assert result.converged, f"not converged: {result.states}"
    assert "s3:CreateBucket" not in calls.by_operation(), "found again by its name"
    assert _buckets(harness) == [BUCKET]
    assert (
        harness.store.get(AWSCluster, "flatcar", "default").status.resources["ignition-bucket"].id == BUCKET
    )
    tags = harness.aws.client("s3").call("GetBucketTagging", Bucket=BUCKET)["TagSet"]
    assert {"Key": "sigs.k8s.io/cluster-api-provider-aws/cluster/flatcar", "Value": "owned"} in tags


def test_a_crash_after_put_object_leaves_one_object_and_one_instance(
    harness: Harness, ignition_example: Callable[[], list[KubeObject]]
) -> None:
    objects = ignition_example()
    for obj in objects:
        if isinstance(obj, Machine):
            obj.spec.bootstrap.data_secret_name = None  # no machine launches while the cluster is built
    applied = _targets(harness.apply(objects))
    awscluster = next(o for o in applied if isinstance(o, AWSCluster))
    assert harness.converge([awscluster]).converged
    machine = harness.store.get(Machine, CONTROL_PLANE, "default")
    machine.spec.bootstrap.data_secret_name = "flatcar-bootstrap"
    harness.store.update(machine)
    key = ObjectKey("AWSMachine", "default", CONTROL_PLANE)
    with crash_after("PutObject"):
        crashing(
            lambda: AWSMachineController(harness.store, harness.new_pool(), harness.engine).reconcile(key)
        )
    assert _keys(harness) == [f"control-plane/{CONTROL_PLANE}"]
    assert _instances(harness) == []

    with call_scope() as calls:
        result = harness.converge([harness.store.get(AWSMachine, CONTROL_PLANE, "default")])
    assert result.converged, f"not converged: {result.states}"
    assert calls.by_operation()["s3:PutObject"] == 1, "the same key written again: still one object"
    assert _keys(harness) == [f"control-plane/{CONTROL_PLANE}"]
    assert _object(harness, f"control-plane/{CONTROL_PLANE}") == _data(harness)
    assert len(_instances(harness)) == 1


@pytest.mark.parametrize(("version", "written"), [("2.3", "2.3.0"), ("3.0", "3.0.0"), ("3.4", "3.4.0")])
def test_the_pointer_config_replaces_itself_with_the_stored_one(version: str, written: str) -> None:
    config: dict[str, Any] = json.loads(pointer_config(version, "b", "node/m"))
    assert config == {"ignition": {"version": written, "config": {"replace": {"source": "s3://b/node/m"}}}}


def test_the_bucket_policy_refuses_plain_http_and_names_the_roles() -> None:
    cluster = next(o for o in load_manifests([EXAMPLE]) if isinstance(o, AWSCluster))
    assert cluster.spec.s3_bucket is not None
    policy = bucket_policy(cluster.spec.s3_bucket, "111122223333", "cn-north-1")
    deny = policy["Statement"][0]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": False}}
    assert deny["Resource"] == [f"arn:aws-cn:s3:::{BUCKET}/*"]
    principals = [s["Principal"]["AWS"][0] for s in policy["Statement"][1:]]
    assert principals == [
        "arn:aws-cn:iam::111122223333:role/control-plane.cluster-api-provider-aws.sigs.k8s.io",
        "arn:aws-cn:iam::111122223333:role/nodes.cluster-api-provider-aws.sigs.k8s.io",
    ]


def test_a_bucket_name_s3_refuses_is_refused_naming_the_field() -> None:
    for name in ("Upper", "a", "has_underscore", "10.0.0.1", "two..dots", "-leading"):
        cluster = AWSCluster.model_validate(
            {
                "metadata": {"name": "c", "namespace": "default"},
                "spec": {
                    "region": "us-east-1",
                    "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}},
                    "s3Bucket": {"name": name},
                },
            }
        )
        assert [i.path for i in cluster.semantic_issues()] == ["spec.s3Bucket.name"], name


def test_the_nodes_policy_lets_a_machine_read_ignition_keys_only() -> None:
    from capa_app.iam.policy import policy_document
    from controllers.services.ignition import NODE_IAM_ACTIONS

    statements = policy_document("nodes")["Statement"]
    s3 = [s for s in statements if any(a.startswith("s3:") for a in s["Action"])]
    assert s3 == [
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": ["arn:*:s3:::*/control-plane/*", "arn:*:s3:::*/node/*"],
        }
    ]
    assert set(NODE_IAM_ACTIONS) <= {a for s in statements for a in s["Action"]}
