"""``to_dict()`` is what the Kubernetes API would serve: camelCase, RFC 3339 UTC times, no empty fields."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from capa_py.api import (
    AWSCluster,
    AWSMachine,
    Cluster,
    Condition,
    KindRegistry,
    Machine,
    OwnerReference,
    Secret,
    UnknownKind,
)
from capa_py.api.registry import default_registry


def test_keys_are_camel_case_and_api_version_and_kind_come_first() -> None:
    aws_cluster = AWSCluster.model_validate(
        {
            "metadata": {"name": "demo"},
            "spec": {
                "region": "us-east-1",
                "sshKeyName": "ops",
                "additionalTags": {"team": "platform"},
                "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}},
            },
        }
    )

    wire = aws_cluster.to_dict()

    assert list(wire)[:2] == ["apiVersion", "kind"], f"apiVersion and kind must lead: {list(wire)}"
    assert wire["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta2"
    assert wire["spec"]["sshKeyName"] == "ops"
    assert wire["spec"]["additionalTags"] == {"team": "platform"}
    assert wire["spec"]["network"]["vpc"]["cidrBlock"] == "10.0.0.0/16"
    assert wire["spec"]["network"]["vpc"]["availabilityZoneUsageLimit"] == 3
    assert wire["spec"]["controlPlaneLoadBalancer"]["scheme"] == "internet-facing"
    snake = [key for key in json.dumps(wire).split('"') if "_" in key and key.isidentifier()]
    assert snake == [], f"snake_case keys leaked to the wire form: {snake}"


def test_initialisms_keep_their_kubernetes_spelling() -> None:
    machine = AWSMachine.model_validate(
        {
            "metadata": {"name": "m"},
            "spec": {"instanceType": "t3.small", "providerID": "aws:///us-east-1a/i-1", "publicIP": True},
        }
    )
    machine.status.instance_id = "i-1"

    wire = machine.to_dict()

    assert wire["spec"]["providerID"] == "aws:///us-east-1a/i-1"
    assert wire["spec"]["publicIP"] is True
    assert wire["status"]["instanceID"] == "i-1"


def test_empty_maps_lists_and_unset_fields_are_omitted() -> None:
    cluster = Cluster.model_validate({"metadata": {"name": "demo"}})

    wire = cluster.to_dict()

    assert wire["metadata"] == {"name": "demo"}, "empty labels, annotations, owners, finalizers must go"
    assert "conditions" not in wire["status"], "an empty list must be omitted"
    assert "clusterNetwork" not in wire["spec"], "an unset optional struct must be omitted"
    assert "phase" not in wire["status"], "an unset optional field must be omitted"


def test_nested_empty_structures_are_omitted() -> None:
    machine = Machine.model_validate(
        {"metadata": {"name": "m"}, "spec": {"clusterName": "demo", "infrastructureRef": {"name": "m"}}}
    )
    wire = machine.to_dict()
    assert "bootstrap" not in wire["spec"], "a struct with only empty fields must be omitted"
    assert wire["spec"]["infrastructureRef"] == {"name": "m"}


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        (datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC), "2024-05-06T07:08:09Z"),
        (datetime(2024, 5, 6, 7, 8, 9, 987654, tzinfo=UTC), "2024-05-06T07:08:09Z"),
        (datetime(2024, 5, 6, 9, 8, 9, tzinfo=timezone(timedelta(hours=2))), "2024-05-06T07:08:09Z"),
        (datetime(2024, 5, 6, 7, 8, 9), "2024-05-06T07:08:09Z"),  # naive: taken as UTC
    ],
    ids=["utc", "microseconds-dropped", "offset-converted", "naive"],
)
def test_timestamps_are_rfc3339_utc_with_z(stamp: datetime, expected: str) -> None:
    cluster = Cluster.model_validate({"metadata": {"name": "demo"}})
    cluster.metadata.creation_timestamp = stamp
    cluster.status.conditions = [Condition(type="Ready", status="True", last_transition_time=stamp)]

    wire = cluster.to_dict()

    assert wire["metadata"]["creationTimestamp"] == expected
    assert wire["status"]["conditions"][0]["lastTransitionTime"] == expected


def test_wire_form_round_trips() -> None:
    cluster = Cluster.model_validate(
        {
            "metadata": {
                "name": "demo",
                "namespace": "default",
                "labels": {"app": "web"},
                "creationTimestamp": "2024-05-06T07:08:09Z",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u", "controller": True}
                ],
            },
            "spec": {"controlPlaneEndpoint": {"host": "api.example.com", "port": 6443}},
        }
    )
    wire = cluster.to_dict()

    assert Cluster.from_dict(wire) == cluster, "from_dict(to_dict()) must give the same object"
    assert json.loads(json.dumps(wire)) == wire, "the wire form must be plain JSON"
    assert wire["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u", "controller": True}
    ]


def test_secret_data_stays_base64_on_the_wire() -> None:
    secret = Secret.model_validate({"metadata": {"name": "s"}, "data": {"value": "aGVsbG8="}})
    assert secret.to_dict()["data"] == {"value": "aGVsbG8="}
    assert secret.value("value") == b"hello"
    with pytest.raises(ValueError, match="not valid base64"):
        Secret.model_validate({"metadata": {"name": "s"}, "data": {"value": "***"}})


def test_desired_state_is_the_document_without_metadata_and_status() -> None:
    cluster = Cluster.model_validate({"metadata": {"name": "demo"}, "spec": {"paused": True}})
    assert set(cluster.desired_state()) == {"spec"}


def test_a_kind_refuses_a_document_of_another_kind() -> None:
    with pytest.raises(ValueError, match=r"holds cluster\.x-k8s\.io/v1beta1/Cluster"):
        Cluster.model_validate({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})


def test_owner_reference_points_at_the_owner() -> None:
    owner = Cluster.model_validate({"metadata": {"name": "demo", "uid": "1234"}})
    controller = owner.owner_reference()
    plain = owner.owner_reference(controller=False)

    assert controller == OwnerReference(
        api_version="cluster.x-k8s.io/v1beta1",
        kind="Cluster",
        name="demo",
        uid="1234",
        controller=True,
        block_owner_deletion=True,
    )
    assert (
        "controller"
        not in Machine.model_validate(
            {
                "metadata": {"name": "m", "ownerReferences": [plain.model_dump(by_alias=True)]},
                "spec": {"clusterName": "demo", "infrastructureRef": {"name": "m"}},
            }
        ).to_dict()["metadata"]["ownerReferences"][0]
    ), "a non-controller reference omits the flag"


def test_an_object_not_read_from_a_store_has_no_uid() -> None:
    with pytest.raises(ValueError, match="has no uid"):
        Cluster.model_validate({"metadata": {"name": "demo"}}).owner_reference()


# -- the kind registry ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("awsclusters", AWSCluster),
        ("AWSCluster", AWSCluster),
        ("awscluster", AWSCluster),
        ("awsclusters.infrastructure.cluster.x-k8s.io", AWSCluster),
        ("cl", Cluster),
        ("machines", Machine),
        ("ma", Machine),
        ("secrets", Secret),
    ],
)
def test_registry_resolves_names_as_kubectl_does(name: str, kind: type) -> None:
    assert default_registry().resolve(name) is kind


def test_registry_rejects_unknown_names_listing_the_known_ones() -> None:
    with pytest.raises(UnknownKind, match=r"known: .*awsclusters"):
        default_registry().resolve("widgets")
    with pytest.raises(UnknownKind):
        default_registry().resolve("clusters.wrong.group")


def test_registry_defines_schemaless_kinds() -> None:
    registry = KindRegistry()
    widget = registry.define("example.com/v1", "Widget", short_names=("wd",), namespaced=False)

    obj = widget.model_validate({"metadata": {"name": "w"}, "spec": {"size": 3}})

    assert registry.for_gvk("example.com/v1", "Widget") is widget
    assert registry.resolve("wd") is widget
    assert registry.resolve("widgets.example.com") is widget
    assert widget in registry
    assert Cluster not in registry
    assert obj.to_dict() == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 3},
    }
