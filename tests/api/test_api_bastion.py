"""``spec.bastion`` on an AWSCluster (Cluster API Provider AWS's fields): what loads, its defaults, and what
is refused naming the field, before anything is stored or any AWS call is made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.aws import AWSCluster
from capa_py.api.loader import ManifestError, load_manifest_text
from capa_py.aws.accounting import call_scope
from capa_py.operations import apply_objects
from capa_py.store.sqlite import SQLiteStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-bastion.yaml"


def _cluster(bastion: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSCluster",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {
                "region": "us-east-1",
                "network": {
                    "vpc": {"cidrBlock": "10.0.0.0/16"},
                    "subnets": [
                        {"availabilityZone": "us-east-1a", "cidrBlock": "10.0.0.0/20", "isPublic": True}
                    ],
                },
                "bastion": bastion,
            },
        }
    )


def test_capa_field_names_load_and_round_trip() -> None:
    spec = {
        "enabled": True,
        "allowedCIDRBlocks": ["203.0.113.0/24"],
        "instanceType": "t3.small",
        "ami": "ami-0123456789abcdef0",
    }
    (cluster,) = load_manifest_text(_cluster(spec))
    assert isinstance(cluster, AWSCluster)
    bastion = cluster.spec.bastion
    assert bastion.enabled
    assert bastion.allowed_cidr_blocks == ["203.0.113.0/24"]
    assert bastion.instance_type == "t3.small"
    assert bastion.ami == "ami-0123456789abcdef0"
    wire = cluster.model_dump(mode="json", by_alias=True)["spec"]["bastion"]
    assert wire["allowedCIDRBlocks"] == ["203.0.113.0/24"]
    assert wire["disableIngressRules"] is False


def test_ssh_is_open_to_anywhere_unless_blocks_are_given_or_ingress_rules_disabled() -> None:
    (cluster,) = load_manifest_text(_cluster({"enabled": True}))
    assert isinstance(cluster, AWSCluster)
    assert cluster.spec.bastion.ingress_cidr_blocks() == ["0.0.0.0/0"]
    assert cluster.spec.bastion.instance_type is None  # t3.micro, as CAPA's, when launched
    (cluster,) = load_manifest_text(_cluster({"enabled": True, "disableIngressRules": True}))
    assert isinstance(cluster, AWSCluster)
    assert cluster.spec.bastion.ingress_cidr_blocks() == []


@pytest.mark.parametrize(
    ("bastion", "path", "message"),
    [
        (
            {"enabled": True, "allowedCIDRBlocks": ["10.0.0.0/8", "300.1.2.3/32"]},
            "spec.bastion.allowedCIDRBlocks[1]",
            "not a valid CIDR",
        ),
        (
            {"enabled": True, "allowedCIDRBlocks": ["10.0.0.1/8"]},
            "spec.bastion.allowedCIDRBlocks[0]",
            "not a valid CIDR",
        ),
        (
            {"enabled": True, "allowedCIDRBlocks": ["2001:db8::/32"]},
            "spec.bastion.allowedCIDRBlocks[0]",
            "only IPv4",
        ),
        (
            {"enabled": True, "disableIngressRules": True, "allowedCIDRBlocks": ["10.0.0.0/8"]},
            "spec.bastion.allowedCIDRBlocks",
            "must be empty when disableIngressRules is true",
        ),
        (
            {"enabled": True, "instanceType": "t3.gigantic"},
            "spec.bastion.instanceType",
            "not an EC2 instance",
        ),
        ({"enabled": True, "ami": "ubuntu"}, "spec.bastion.ami", "not an AMI id"),
    ],
)
def test_a_bad_bastion_is_refused_naming_the_field(bastion: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ManifestError) as raised:
        load_manifest_text(_cluster(bastion))
    text = str(raised.value)
    assert path in text
    assert message in text


def test_a_bad_cidr_creates_nothing(tmp_path: Path) -> None:
    """The example with a bad block: refused when the manifest is read, so nothing is stored and AWS is
    never called."""
    text = EXAMPLE.read_text().replace('"198.51.100.7/32"', '"198.51.100.7/33"')
    store = SQLiteStore(tmp_path / "state.db")
    try:
        with (
            call_scope() as calls,
            pytest.raises(ManifestError, match=r"spec\.bastion\.allowedCIDRBlocks\[1\]"),
        ):
            apply_objects(store, load_manifest_text(text))
        assert calls.total() == 0
        assert list(store.list(AWSCluster)) == []
    finally:
        store.close()


def test_the_store_refuses_a_bad_cidr_written_directly(tmp_path: Path) -> None:
    """A write that does not come through a manifest (kubectl, the API) meets the same rule."""
    (cluster,) = load_manifest_text(_cluster({"enabled": True}))
    assert isinstance(cluster, AWSCluster)
    cluster.spec.bastion.allowed_cidr_blocks = ["nope"]
    store = SQLiteStore(tmp_path / "state.db")
    try:
        with pytest.raises(Exception, match=r"spec\.bastion\.allowedCIDRBlocks\[0\]"):
            store.create(cluster)
        assert list(store.list(AWSCluster)) == []
    finally:
        store.close()
