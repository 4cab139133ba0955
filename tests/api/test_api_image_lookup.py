"""The AMI lookup fields (CAPA's ``imageLookupFormat``, ``imageLookupOrg``, ``imageLookupBaseOS`` on an
AWSMachine, an AWSMachineTemplate and an AWSCluster): their validation, the name pattern they make, which
one wins; and a machine with neither ``ami.id`` nor a Kubernetes version refused before anything is
stored (no AWS needed)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.aws import AWSCluster, AWSClusterSpec, AWSMachine, AWSMachineSpec
from capa_py.api.cluster import Machine
from capa_py.api.image_lookup import (
    DEFAULT_BASE_OS,
    DEFAULT_FORMAT,
    DEFAULT_ORG,
    lookup_name,
    lookup_settings,
)
from capa_py.api.loader import ManifestError, load_manifest_text, load_manifests
from capa_py.api.meta import KubeObject
from capa_py.operations import apply_objects
from capa_py.store.errors import Invalid
from capa_py.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
MACHINES_EXAMPLE = ROOT / "examples" / "aws-cluster-machines.yaml"
DEPLOYMENT_EXAMPLE = ROOT / "examples" / "aws-cluster.yaml"


def _load(document: dict[str, Any]) -> KubeObject:
    return load_manifest_text(yaml.safe_dump(document))[0]


def _refusal(document: dict[str, Any]) -> str:
    with pytest.raises(ManifestError) as refused:
        _load(document)
    return str(refused.value)


def _machine(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSMachine",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {"instanceType": "t3.medium", **spec},
    }


def _cluster(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSCluster",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}, **spec},
    }


def test_capa_defaults_make_capa_image_names_with_or_without_the_v() -> None:
    assert (DEFAULT_FORMAT, DEFAULT_ORG, DEFAULT_BASE_OS) == (
        "capa-ami-{{.BaseOS}}-?{{.K8sVersion}}-*",
        "819546954734",
        "ubuntu-24.04",
    )
    for version in ("v1.31.0", "1.31.0"):
        assert lookup_name(DEFAULT_FORMAT, DEFAULT_BASE_OS, version) == "capa-ami-ubuntu-24.04-?1.31.0-*"


def test_a_format_is_a_go_template_over_base_os_and_version() -> None:
    custom = '{{ .BaseOS }}/k8s-{{printf "%s" .K8sVersion}}-*'
    assert lookup_name(custom, "flatcar", "v1.30.2") == "flatcar/k8s-1.30.2-*"


def test_the_lookup_fields_load_with_capa_names_and_the_machine_wins_over_the_cluster() -> None:
    machine = _load(_machine({"imageLookupOrg": "111111111111", "imageLookupBaseOS": "flatcar"}))
    cluster = _load(
        _cluster({"imageLookupFormat": "team-{{.BaseOS}}-{{.K8sVersion}}-*", "imageLookupOrg": "2"})
    )
    assert isinstance(machine, AWSMachine)
    assert isinstance(cluster, AWSCluster)
    assert machine.to_dict()["spec"]["imageLookupBaseOS"] == "flatcar"
    assert lookup_settings(machine.spec, cluster.spec) == (
        "team-{{.BaseOS}}-{{.K8sVersion}}-*",
        "111111111111",
        "flatcar",
    )
    bare = AWSMachineSpec(instance_type="t3.medium")
    assert lookup_settings(bare, AWSClusterSpec(region="us-east-1")) == (
        DEFAULT_FORMAT,
        DEFAULT_ORG,
        DEFAULT_BASE_OS,
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("capa-ami-{{.BaseOS", "unclosed action"),
        ("capa-ami-{{.OS}}-*", 'map has no entry for key "OS"'),
        ("capa-ami-{{toYaml .BaseOS}}", 'function "toYaml" not defined'),
        ("", "must not be empty"),
    ],
)
@pytest.mark.parametrize("kind", ["AWSMachine", "AWSCluster", "AWSMachineTemplate"])
def test_a_bad_lookup_format_is_refused_naming_the_field(kind: str, value: str, message: str) -> None:
    if kind == "AWSCluster":
        document, path = _cluster({"imageLookupFormat": value}), "spec.imageLookupFormat"
    elif kind == "AWSMachine":
        document, path = _machine({"imageLookupFormat": value}), "spec.imageLookupFormat"
    else:
        document = {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "AWSMachineTemplate",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": {"template": {"spec": {"instanceType": "t3.medium", "imageLookupFormat": value}}},
        }
        path = "spec.template.spec.imageLookupFormat"
    text = _refusal(document)
    assert path in text, text
    assert message in text, text


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


def _without_amis(objects: list[KubeObject]) -> list[KubeObject]:
    for obj in objects:
        if isinstance(obj, AWSMachine):
            obj.spec.ami.id = None
        if obj.KIND == "AWSMachineTemplate":
            obj.spec.template.spec.ami.id = None  # type: ignore[attr-defined]
    return objects


def test_machines_without_an_ami_but_with_a_version_apply(store: SQLiteStore) -> None:
    applied = apply_objects(store, _without_amis(load_manifests([MACHINES_EXAMPLE])))
    assert {a.outcome for a in applied} == {"created"}


def test_a_machine_with_neither_an_ami_nor_a_version_is_refused_before_anything_is_stored(
    store: SQLiteStore,
) -> None:
    """Before, a machine without ``ami.id`` was refused alone (lookup was not built); now the pair is
    judged: the Machine's version names what to look up."""
    objects = _without_amis(load_manifests([MACHINES_EXAMPLE]))
    worker = next(o for o in objects if isinstance(o, Machine) and o.name == "demo-worker-0")
    assert isinstance(worker, Machine)
    worker.spec.version = None
    with pytest.raises(Invalid) as refused:
        apply_objects(store, objects)
    text = str(refused.value)
    assert "Machine default/demo-worker-0: spec.version is required" in text, text
    assert "AWSMachine demo-worker-0 has no spec.ami.id" in text, text
    assert "demo-worker-1" not in text, text
    assert list(store.list(AWSMachine)) == [], "something was stored"
    assert list(store.list(Machine)) == [], "something was stored"


def test_a_machine_deployment_without_a_version_over_a_template_without_an_ami_is_refused(
    store: SQLiteStore,
) -> None:
    objects = _without_amis(load_manifests([DEPLOYMENT_EXAMPLE]))
    for obj in objects:
        if obj.KIND == "MachineDeployment":
            obj.spec.template.spec.version = None  # type: ignore[attr-defined]
    with pytest.raises(Invalid) as refused:
        apply_objects(store, copy.deepcopy(objects))
    text = str(refused.value)
    assert "MachineDeployment default/demo-workers: spec.template.spec.version is required" in text, text
    assert "spec.template.spec.ami.id" in text, text


def test_a_machine_without_a_version_over_a_stored_awsmachine_without_an_ami_is_refused(
    store: SQLiteStore,
) -> None:
    objects = _without_amis(load_manifests([MACHINES_EXAMPLE]))
    apply_objects(store, [o for o in objects if isinstance(o, AWSMachine)])
    machines = [o for o in objects if isinstance(o, Machine)]
    for machine in machines:
        machine.spec.version = None
    with pytest.raises(Invalid, match=r"spec\.version is required"):
        apply_objects(store, machines)
    assert list(store.list(Machine)) == []
