"""The AMI lookup example through the real CLI, as its header tells a user to run it: an image named as
Cluster API Provider AWS names them published in the endpoint's account (an EC2 ``CopyImage`` of one of
moto's bundled x86_64 images), then ``capa apply`` of examples/aws-cluster-lookup.yaml. Every machine is
launched from that image, found by its Kubernetes version, with its bootstrap data in Secrets Manager (the
default) and nothing of it left there once the instances run; ``capa delete --wait`` then leaves nothing,
and ``capa audit`` finds nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.e2e_support import Capa, MotoInspector

pytestmark = pytest.mark.slow(minutes=2)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-lookup.yaml"
IMAGE_NAME = "capa-ami-ubuntu-24.04-v1.31.0-1"
OTHER_VERSION = "capa-ami-ubuntu-24.04-v1.30.4-1"


def _publish(inspector: MotoInspector, name: str) -> str:
    source = next(
        image["ImageId"]
        for image in inspector.ec2.describe_images(Filters=[{"Name": "architecture", "Values": ["x86_64"]}])[
            "Images"
        ]
        if image.get("VirtualizationType") == "hvm"
    )
    return str(inspector.ec2.copy_image(SourceImageId=source, SourceRegion="us-east-1", Name=name)["ImageId"])


def test_the_lookup_example_finds_its_image_boots_from_secrets_and_deletes_clean(
    capa: Capa, inspector: MotoInspector, endpoint: str
) -> None:
    wanted = _publish(inspector, IMAGE_NAME)
    _publish(inspector, OTHER_VERSION)  # another Kubernetes version: never chosen
    applied = capa.ok("apply", "-f", str(EXAMPLE), "--timeout", "3m", "-o", "json").json()
    assert applied["converged"] is True, applied

    machines = capa.get("awsmachines")
    assert len(machines) == 3
    assert {m["status"]["ami"]["id"] for m in machines} == {wanted}
    instance_ids = [m["status"]["instanceID"] for m in machines]
    reservations = inspector.ec2.describe_instances(InstanceIds=instance_ids)["Reservations"]
    assert {i["ImageId"] for r in reservations for i in r["Instances"]} == {wanted}
    # The bootstrap data went through Secrets Manager and was deleted once the instances ran.
    assert all(not m["spec"].get("cloudInit", {}).get("insecureSkipSecretsManager") for m in machines)
    left = inspector.secrets.list_secrets()["SecretList"]
    assert [s["Name"] for s in left if s["Name"].startswith("aws.cluster.x-k8s.io/")] == []

    deleted = capa.run("delete", "-f", str(EXAMPLE), "--wait", "--timeout", "3m")
    assert deleted.returncode == 0, f"delete --wait failed:\n{deleted}"
    audit = capa.ok("audit", "-o", "json", "--aws-endpoint", endpoint).json()
    leaks = [r for r in audit["rows"] if r["classification"] != "managed"]
    assert leaks == [], leaks
