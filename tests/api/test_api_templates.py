"""Infrastructure templates (AWSMachineTemplate, AWSClusterTemplate, TinkerbellMachineTemplate): their wire
form, validation of the templated spec as the stamped-out kind validates it (paths under
``spec.template.spec``), instance-only fields refused, the spec immutable after create (refused by
``apply_objects``, the API ``capa apply`` writes through, before anything is written) and the object a
cloning controller gets from :meth:`instantiate`."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_templates import AWSClusterTemplate, AWSMachineTemplate
from capa_py.api.loader import ManifestError, load_manifest_text
from capa_py.api.meta import KubeObject, utcnow
from capa_py.api.registry import REGISTRY
from capa_py.api.templates import InfrastructureTemplate
from capa_py.api.tinkerbell_capi import TinkerbellMachine, TinkerbellMachineTemplate
from capa_py.operations import apply_objects
from capa_py.store.errors import Invalid
from capa_py.store.sqlite import SQLiteStore

INFRA = "infrastructure.cluster.x-k8s.io/v1beta2"
CAPT = "infrastructure.cluster.x-k8s.io/v1beta1"

MACHINE_SPEC: dict[str, Any] = {
    "instanceType": "t3.medium",
    "ami": {"id": "ami-785db401"},
    "iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io",
    "rootVolume": {"size": 40, "type": "gp3"},
}
CLUSTER_SPEC: dict[str, Any] = {
    "region": "us-east-1",
    "network": {
        "vpc": {"cidrBlock": "10.0.0.0/16"},
        "subnets": [{"availabilityZone": "us-east-1a", "cidrBlock": "10.0.0.0/20", "isPublic": True}],
    },
}


def machine_template(spec: dict[str, Any] | None = None, name: str = "workers") -> dict[str, Any]:
    return {
        "apiVersion": INFRA,
        "kind": "AWSMachineTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "metadata": {"labels": {"tier": "worker"}, "annotations": {"owner": "platform"}},
                "spec": copy.deepcopy(MACHINE_SPEC if spec is None else spec),
            }
        },
    }


def cluster_template(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": INFRA,
        "kind": "AWSClusterTemplate",
        "metadata": {"name": "shared", "namespace": "default"},
        "spec": {"template": {"spec": copy.deepcopy(CLUSTER_SPEC if spec is None else spec)}},
    }


def tinkerbell_template(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": CAPT,
        "kind": "TinkerbellMachineTemplate",
        "metadata": {"name": "metal", "namespace": "default"},
        "spec": {"template": {"metadata": {"labels": {"rack": "a"}}, "spec": spec}},
    }


def load(document: dict[str, Any]) -> KubeObject:
    [obj] = load_manifest_text(yaml.safe_dump(document), "template.yaml")
    return obj


def refusal(document: dict[str, Any]) -> str:
    with pytest.raises(ManifestError) as refused:
        load(document)
    return str(refused.value)


# -- kinds, names and wire form ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("awsmachinetemplates", AWSMachineTemplate),
        ("awsmt", AWSMachineTemplate),
        ("AWSMachineTemplate", AWSMachineTemplate),
        ("awsclustertemplates.infrastructure.cluster.x-k8s.io", AWSClusterTemplate),
        ("awsct", AWSClusterTemplate),
        ("tinkerbellmachinetemplates", TinkerbellMachineTemplate),
    ],
)
def test_the_template_kinds_resolve_by_plural_short_name_and_kind(name: str, model: type[KubeObject]) -> None:
    assert REGISTRY.resolve(name) is model


@pytest.mark.parametrize(
    ("template", "stamped"),
    [
        (AWSMachineTemplate, AWSMachine),
        (AWSClusterTemplate, AWSCluster),
        (TinkerbellMachineTemplate, TinkerbellMachine),
    ],
)
def test_each_template_names_the_registered_kind_it_stamps_out(
    template: type[InfrastructureTemplate], stamped: type[KubeObject]
) -> None:
    assert template.TEMPLATED_KIND == stamped.KIND
    assert template.TEMPLATED_MODEL is stamped
    assert REGISTRY.for_gvk(template.API_VERSION, template.TEMPLATED_KIND) is stamped
    assert not template.HAS_STATUS


def test_a_machine_template_round_trips_as_written() -> None:
    document = machine_template()
    obj = load(document)
    assert isinstance(obj, AWSMachineTemplate)
    assert obj.spec.template.metadata.labels == {"tier": "worker"}
    assert obj.spec.template.spec.instance_type == "t3.medium"
    assert obj.to_dict() == document


def test_a_cluster_template_without_template_metadata_round_trips() -> None:
    document = cluster_template()
    obj = load(document)
    assert isinstance(obj, AWSClusterTemplate)
    wire = obj.to_dict()
    assert "metadata" not in wire["spec"]["template"]
    # The AWSCluster's defaults are the template's (the models default on read, as for an AWSCluster).
    assert (
        wire["spec"]["template"]["spec"]
        == AWSCluster.model_validate({"metadata": {"name": "x"}, "spec": CLUSTER_SPEC}).to_dict()["spec"]
    )


def test_a_template_without_its_templated_spec_is_refused_naming_it() -> None:
    document = machine_template()
    del document["spec"]["template"]["spec"]
    assert "spec.template.spec: Field required" in refusal(document)


def test_an_invalid_label_in_the_template_metadata_is_refused_naming_it() -> None:
    document = machine_template()
    document["spec"]["template"]["metadata"]["labels"] = {"bad key!": "x"}
    assert "spec.template.metadata.labels" in refusal(document)


# -- the templated spec is judged as the stamped-out kind ----------------------------------------------


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"instanceType": "t9.gigantic"}, "spec.template.spec.instanceType", "not an EC2 instance type"),
        ({"ami": {"id": "ami-XYZ"}}, "spec.template.spec.ami.id", "not an AMI id"),
        (
            {"rootVolume": {"size": 40, "type": "st1", "iops": 500}},
            "spec.template.spec.rootVolume.iops",
            "iops cannot be set for volume type st1",
        ),
        ({"additionalTags": {"aws:reserved": "x"}}, "spec.template.spec.additionalTags", "reserved prefix"),
        (
            {"providerID": "aws:///us-east-1a/i-0123"},
            "spec.template.spec.providerID",
            "cannot be set in templates",
        ),
        (
            {"instanceID": "i-0123456789abcdef0"},
            "spec.template.spec.instanceID",
            "cannot be set in templates",
        ),
    ],
)
def test_a_machine_template_refused_as_an_awsmachine_would_be_names_the_templated_field(
    change: dict[str, Any], path: str, message: str
) -> None:
    text = refusal(machine_template({**MACHINE_SPEC, **change}))
    assert path in text, text
    assert message in text, text


def test_every_awsmachine_issue_is_the_templates_under_spec_template_spec() -> None:
    spec = {
        **MACHINE_SPEC,
        "instanceType": "t9.gigantic",
        "rootVolume": {"size": 40, "type": "st1", "iops": 500},
    }
    machine = AWSMachine.model_validate({"metadata": {"name": "m"}, "spec": spec})
    template = AWSMachineTemplate.model_validate(machine_template(spec))
    expected = [(f"spec.template.{i.path}", i.message) for i in machine.semantic_issues()]
    assert len(expected) == 2
    assert [(i.path, i.message) for i in template.semantic_issues()] == expected


@pytest.mark.parametrize(
    ("network", "path", "message"),
    [
        (
            {
                "vpc": {"cidrBlock": "10.0.0.0/16"},
                "subnets": [{"availabilityZone": "us-east-1a", "cidrBlock": "10.9.0.0/20"}],
            },
            "spec.template.spec.network.subnets[0].cidrBlock",
            "outside the VPC block 10.0.0.0/16",
        ),
        (
            {
                "vpc": {"cidrBlock": "10.0.0.0/16"},
                "subnets": [{"availabilityZone": "eu-west-1a", "cidrBlock": "10.0.0.0/20"}],
            },
            "spec.template.spec.network.subnets[0].availabilityZone",
            "us-east-1",
        ),
        ({"vpc": {}}, "spec.template.spec.network.vpc.cidrBlock", "required when vpc.id is not set"),
    ],
)
def test_a_cluster_template_refused_as_an_awscluster_would_be_names_the_templated_field(
    network: dict[str, Any], path: str, message: str
) -> None:
    text = refusal(cluster_template({"region": "us-east-1", "network": network}))
    assert f"{path}: " in text, text
    assert message in text, text


def test_an_unknown_region_in_a_cluster_template_is_refused_naming_it() -> None:
    text = refusal(cluster_template({**CLUSTER_SPEC, "region": "mars-north-1"}))
    assert "spec.template.spec.region" in text, text


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        ({"hardwareName": "node-1"}, "spec.template.spec.hardwareName", "cannot be set in templates"),
        (
            {"providerID": "tinkerbell://default/node-1"},
            "spec.template.spec.providerID",
            "cannot be set in templates",
        ),
        (
            {
                "hardwareAffinity": {
                    "preferred": [{"weight": 0, "hardwareAffinityTerm": {"labelSelector": {}}}]
                }
            },
            "spec.template.spec.hardwareAffinity.preferred[0].weight",
            "0 is not in 1-100",
        ),
    ],
)
def test_a_tinkerbell_machine_template_names_the_templated_field(
    spec: dict[str, Any], path: str, message: str
) -> None:
    text = refusal(tinkerbell_template(spec))
    assert f"{path}: {message}" in text, text


def test_a_tinkerbell_machine_template_keeps_its_template_metadata() -> None:
    document = tinkerbell_template(
        {"hardwareAffinity": {"required": [{"labelSelector": {"matchLabels": {"rack": "a"}}}]}}
    )
    obj = load(document)
    assert obj.to_dict() == document


def test_a_template_being_deleted_is_not_refused_for_instance_only_fields() -> None:
    """A template stored before instance-only fields were refused must stay deletable."""
    template = AWSMachineTemplate.model_validate(machine_template({**MACHINE_SPEC, "providerID": "aws:///x"}))
    assert [i.path for i in template.semantic_issues()] == ["spec.template.spec.providerID"]
    template.metadata.deletion_timestamp = utcnow()
    assert template.semantic_issues() == []


# -- instantiate -----------------------------------------------------------------------------------------


def test_instantiate_stamps_out_the_templated_kind_with_the_template_metadata_and_spec() -> None:
    template = AWSMachineTemplate.model_validate(machine_template())
    machine = template.instantiate("workers-abcde")
    assert isinstance(machine, AWSMachine)
    assert machine.to_dict() == {
        "apiVersion": INFRA,
        "kind": "AWSMachine",
        "metadata": {
            "name": "workers-abcde",
            "namespace": "default",
            "labels": {"tier": "worker"},
            "annotations": {"owner": "platform"},
        },
        "spec": MACHINE_SPEC,
        "status": {"ready": False},
    }
    machine.spec.instance_type = "t3.large"
    machine.metadata.labels["extra"] = "x"
    assert template.spec.template.spec.instance_type == "t3.medium", "the clone shares nothing"
    assert template.spec.template.metadata.labels == {"tier": "worker"}


def test_instantiate_in_another_namespace_and_for_each_kind() -> None:
    cluster = AWSClusterTemplate.model_validate(cluster_template()).instantiate("c1", "team-a")
    assert isinstance(cluster, AWSCluster)
    assert (cluster.name, cluster.namespace, cluster.spec.region) == ("c1", "team-a", "us-east-1")
    metal = TinkerbellMachineTemplate.model_validate(tinkerbell_template({})).instantiate("m1")
    assert isinstance(metal, TinkerbellMachine)
    assert metal.metadata.labels == {"rack": "a"}


# -- immutability ----------------------------------------------------------------------------------------


def _issues(document: dict[str, Any], change: Any) -> dict[str, str]:
    old = REGISTRY.for_gvk(document["apiVersion"], document["kind"]).model_validate(document)
    new_doc = copy.deepcopy(document)
    change(new_doc)
    new = type(old).model_validate(new_doc)
    return {i.path: i.message for i in new.immutable_issues(old)}


def test_a_machine_template_spec_change_is_refused_naming_each_field() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["template"]["spec"]["instanceType"] = "t3.large"
        doc["spec"]["template"]["spec"]["rootVolume"]["size"] = 80

    assert _issues(machine_template(), change) == {
        "spec.template.spec.instanceType": (
            "immutable: AWSMachineTemplate.spec cannot change after create (was t3.medium, now t3.large)"
        ),
        "spec.template.spec.rootVolume.size": (
            "immutable: AWSMachineTemplate.spec cannot change after create (was 40, now 80)"
        ),
    }


def test_even_fields_an_awsmachine_may_change_are_immutable_in_its_template() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["template"]["spec"]["additionalTags"] = {"team": "other"}

    assert list(_issues(machine_template(), change)) == ["spec.template.spec.additionalTags.team"]


def test_the_templated_metadata_is_part_of_the_immutable_spec() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["template"]["metadata"]["labels"]["tier"] = "edge"

    assert list(_issues(machine_template(), change)) == ["spec.template.metadata.labels.tier"]


def test_the_template_objects_own_metadata_stays_mutable() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["metadata"]["labels"] = {"cluster.x-k8s.io/cluster-name": "demo"}
        doc["metadata"]["annotations"] = {"note": "x"}

    for document in (machine_template(), cluster_template(), tinkerbell_template({})):
        assert _issues(document, change) == {}


def test_cluster_and_tinkerbell_template_spec_changes_are_refused() -> None:
    def region(doc: dict[str, Any]) -> None:
        doc["spec"]["template"]["spec"]["region"] = "us-west-2"

    def affinity(doc: dict[str, Any]) -> None:
        doc["spec"]["template"]["spec"]["hardwareAffinity"] = {"required": [{"labelSelector": {}}]}

    assert list(_issues(cluster_template(), region)) == ["spec.template.spec.region"]
    assert list(_issues(tinkerbell_template({}), affinity)) == ["spec.template.spec.hardwareAffinity"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


def test_apply_refuses_a_template_spec_change_and_writes_nothing(store: SQLiteStore) -> None:
    apply_objects(store, [load(machine_template()), load(cluster_template())])
    changed = machine_template()
    changed["spec"]["template"]["spec"]["instanceType"] = "t3.large"
    relabelled = cluster_template()
    relabelled["metadata"]["labels"] = {"team": "a"}
    with pytest.raises(Invalid) as refused:
        apply_objects(store, [load(relabelled), load(changed)])
    assert str(refused.value).startswith(
        "AWSMachineTemplate default/workers: spec.template.spec.instanceType: immutable"
    ), refused.value
    [stored] = store.list(AWSMachineTemplate)
    assert stored.spec.template.spec.instance_type == "t3.medium"
    [cluster] = store.list(AWSClusterTemplate)
    assert cluster.metadata.labels == {}, "a refused apply writes nothing"


def test_apply_changes_a_templates_labels(store: SQLiteStore) -> None:
    apply_objects(store, [load(machine_template())])
    relabelled = machine_template()
    relabelled["metadata"]["labels"] = {"cluster.x-k8s.io/cluster-name": "demo"}
    [applied] = apply_objects(store, [load(relabelled)])
    assert applied.outcome == "configured"
    [stored] = store.list(AWSMachineTemplate)
    assert stored.metadata.labels == {"cluster.x-k8s.io/cluster-name": "demo"}
