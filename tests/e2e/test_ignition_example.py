"""``examples/aws-cluster-ignition.yaml`` through the real CLI on a moto endpoint: the cluster with its
Ignition bucket converges (the bucket made and tagged, the two machines' data uploaded under
``control-plane/`` and ``node/``, the third machine's in its user data), ``capa resources`` lists the bucket
live, ``capa audit`` classifies the bucket
as the store's and finds no leak, and ``capa delete --wait`` leaves nothing: no instance, no bucket."""

from __future__ import annotations

import base64
import json
from typing import Any

import boto3
import pytest

from capa_py.engine.tags import cluster_tag_key
from tests.e2e.e2e_support import ROOT, Capa, MotoInspector

pytestmark = pytest.mark.slow(minutes=3)

EXAMPLE = ROOT / "examples" / "aws-cluster-ignition.yaml"
CLUSTER = "flatcar"
BUCKET = "flatcar-ignition-example"
APPLY = ("apply", "-f", str(EXAMPLE), "--timeout", "2m", "-o", "json")


def _s3(endpoint: str) -> Any:
    return boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("s3", endpoint_url=endpoint)


def _audit_rows(capa: Capa, endpoint: str) -> list[dict[str, Any]]:
    document = capa.ok("audit", "-o", "json", "--aws-endpoint", endpoint).json()
    return [row for row in document["rows"] if row.get("cluster") == CLUSTER]


def test_the_ignition_example_converges_is_audited_as_managed_and_deletes_clean(
    capa: Capa, inspector: MotoInspector, endpoint: str
) -> None:
    s3 = _s3(endpoint)
    document = capa.ok(*APPLY).json()
    assert document["converged"] is True, document

    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))
    assert keys == ["control-plane/flatcar-control-plane-0", "node/flatcar-worker-0"]
    machines = {m["metadata"]["name"]: m for m in capa.get("awsmachines")}
    instance_id = machines["flatcar-control-plane-0"]["status"]["instanceID"]
    attribute = inspector.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    user_data = json.loads(base64.b64decode(attribute["UserData"]["Value"]))
    source = user_data["ignition"]["config"]["replace"]["source"]
    assert source == f"s3://{BUCKET}/control-plane/flatcar-control-plane-0"

    listed = capa.ok("resources", "-o", "json").json()["resources"]
    buckets = [row for row in listed if row["kind"] == "bucket"]
    assert [(row["id"], row["owner"]) for row in buckets] == [(BUCKET, f"awscluster/{CLUSTER}")], listed
    assert buckets[0]["state"] not in ("missing", "recorded"), buckets

    rows = _audit_rows(capa, endpoint)
    bucket = next((row for row in rows if row["id"] == BUCKET), None)
    assert bucket is not None, f"capa audit does not list the bucket: {rows}"
    assert (bucket["class"], bucket["role"]) == ("managed", "ignition-bucket"), bucket
    leaks = [row for row in rows if row["class"] != "managed"]
    assert not leaks, leaks

    deleted = capa.run("delete", "-f", str(EXAMPLE), "--wait", "--timeout", "2m")
    assert deleted.returncode == 0, f"delete --wait failed:\n{deleted}"
    assert BUCKET not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]
    left = {k: v for k, v in inspector.inventory(tag_key=cluster_tag_key(CLUSTER)).tagged.items() if v}
    assert not left, f"resources still tagged with the cluster after delete --wait: {left}"
    assert not [row for row in _audit_rows(capa, endpoint) if row["class"] != "managed"], "audit clean after"
