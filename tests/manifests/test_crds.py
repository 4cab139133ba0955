"""The generated CRDs: structural schemas that accept the examples and refuse what the models refuse."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from capa_py.api.aws import AWSCluster
from capa_py.api.loader import ManifestError, load_manifest_text
from capa_py.api.registry import KindRegistry
from capa_py.manifests import documents, render
from capa_py.manifests.crds import crd_for, crds, custom_kinds, is_tinkerbell_kind
from capa_py.manifests.schema import ADMISSION_ONLY, non_structural_nodes, structural_schema
from tests.cli.test_cli_validation import INVALID as CLI_INVALID
from tests.cli.test_cli_validation import manifest as cli_manifest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """openAPIV3Schema by (apiVersion, kind)."""
    out = {}
    for crd in crds():
        version = crd["spec"]["versions"][0]
        key = (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
        out[key] = version["schema"]["openAPIV3Schema"]
    return out


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as the API server applies it with strict field validation (kubectl's default): an unknown
    field is an error rather than pruned. ``metadata`` stays the API server's."""
    schema = copy.deepcopy(schema)

    def close(node: dict[str, Any], path: str) -> None:
        if "properties" in node and path != ".metadata":
            node["additionalProperties"] = False
            for name, sub in node["properties"].items():
                close(sub, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            close(node["additionalProperties"], f"{path}[*]")
        if "items" in node:
            close(node["items"], f"{path}[]")

    close(schema, "")
    return schema


def schema_errors(doc: dict[str, Any]) -> list[str]:
    schema = strict(_schemas()[(doc["apiVersion"], doc["kind"])])
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def model_rejects_text(text: str) -> bool:
    try:
        load_manifest_text(text, "case.yaml")
    except ManifestError:
        return True
    return False


def model_rejects(doc: dict[str, Any]) -> bool:
    try:
        load_manifest_text(yaml.safe_dump(doc), "case.yaml")
    except ManifestError:
        return True
    return False


def test_crds_serve_every_custom_kind_and_no_builtin_one() -> None:
    assert sorted(crd["metadata"]["name"] for crd in crds()) == [
        "awsclustercontrolleridentities.infrastructure.cluster.x-k8s.io",
        "awsclusterroleidentities.infrastructure.cluster.x-k8s.io",
        "awsclusters.infrastructure.cluster.x-k8s.io",
        "awsclusterstaticidentities.infrastructure.cluster.x-k8s.io",
        "awsclustertemplates.infrastructure.cluster.x-k8s.io",
        "awsmachinepools.infrastructure.cluster.x-k8s.io",
        "awsmachines.infrastructure.cluster.x-k8s.io",
        "awsmachinetemplates.infrastructure.cluster.x-k8s.io",
        "clusterconfigs.capa-py.io",
        "clusters.cluster.x-k8s.io",
        "hardware.tinkerbell.org",
        "machinedeployments.cluster.x-k8s.io",
        "machinepools.cluster.x-k8s.io",
        "machines.cluster.x-k8s.io",
        "machinesets.cluster.x-k8s.io",
        "osies.tinkerbell.org",
        "templates.tinkerbell.org",
        "tinkerbellclusters.infrastructure.cluster.x-k8s.io",
        "tinkerbellmachines.infrastructure.cluster.x-k8s.io",
        "tinkerbellmachinetemplates.infrastructure.cluster.x-k8s.io",
        "workflows.tinkerbell.org",
    ]


@pytest.mark.parametrize("model", custom_kinds(), ids=lambda m: m.KIND)
def test_every_crd_schema_is_structural(model: Any) -> None:
    schema = structural_schema(model)
    assert non_structural_nodes(schema) == []
    assert schema["properties"]["metadata"]["type"] == "object"
    assert set(schema["properties"]["metadata"].get("properties", {})) <= {"name"}


def test_the_structural_check_finds_a_node_without_a_type() -> None:
    bad = {
        "type": "object",
        "properties": {"a": {"properties": {"b": {"type": "string"}}}, "c": {"anyOf": []}},
    }
    assert non_structural_nodes(bad) == [".a", ".c", ".c: anyOf"]


CLUSTER_API_KINDS = [m for m in custom_kinds() if not is_tinkerbell_kind(m)]


@pytest.mark.parametrize("model", CLUSTER_API_KINDS, ids=lambda m: m.KIND)
def test_crd_names_labels_and_subresources_follow_cluster_api(model: Any) -> None:
    crd = crd_for(model)
    group, version = model.API_VERSION.rsplit("/", 1)
    assert crd["metadata"]["name"] == f"{model.PLURAL}.{group}"
    # The provider label only on an infrastructure provider's kinds, with the value clusterctl gives the
    # components of the provider `capa-py`; Cluster API core's kinds and capa-py's ClusterConfig carry none.
    # Failed before: every CRD, Cluster and Machine included, said `infrastructure-aws`. The infrastructure
    # kinds implement both contracts; capa-py's Cluster and Machine, v1beta1.
    infrastructure = group == "infrastructure.cluster.x-k8s.io"
    provider = {"cluster.x-k8s.io/provider": "infrastructure-capa-py"}
    contracts = ("v1beta1", "v1beta2") if infrastructure else ("v1beta1",)
    # The identity kinds carry clusterctl's move-hierarchy label, as Cluster API Provider AWS's CRDs do:
    # clusterctl move copies identities (and the static identity's Secret) as global objects.
    identity = model.KIND in (
        "AWSClusterControllerIdentity",
        "AWSClusterStaticIdentity",
        "AWSClusterRoleIdentity",
    )
    assert crd["metadata"]["labels"] == {
        **(provider if infrastructure else {}),
        **{f"cluster.x-k8s.io/{contract}": version for contract in contracts},
        **({"clusterctl.cluster.x-k8s.io/move-hierarchy": ""} if identity else {}),
    }
    names = crd["spec"]["names"]
    assert names["categories"] == ["cluster-api"]
    assert names.get("shortNames", []) == list(model.SHORT_NAMES)
    served = crd["spec"]["versions"][0]
    # A template kind (TinkerbellMachineTemplate) has no status, as in Cluster API; MachineDeployment and
    # MachineSet scale (kubectl scale) through the replicas and the selector their status publishes.
    expected: dict[str, Any] | None = {"status": {}} if model.HAS_STATUS else None
    if model.KIND in ("MachineDeployment", "MachineSet"):
        expected = {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        }
    assert served.get("subresources") == expected
    if model.KIND not in CAPA_COLUMNS:
        assert "Age" in [column["name"] for column in served["additionalPrinterColumns"]]


def _resolves(schema: dict[str, Any], json_path: str) -> bool:
    """Whether a printer column's path names a field of the schema (metadata paths are the server's)."""
    if json_path.startswith(".metadata."):
        return True
    node = schema
    for part in json_path.lstrip(".").split("."):
        node = node.get("properties", {}).get(part)  # type: ignore[assignment]
        if node is None:
            return False
    return True


NOT_IN_CAPA_PY: set[tuple[str, str]] = set()
"""CAPA's columns naming a field capa-py's models do not have (kept so that kubectl shows the same table):
none since the bastion host's ``status.bastion.publicIp``."""


@pytest.mark.parametrize("model", custom_kinds(), ids=lambda m: m.KIND)
def test_printer_columns_name_fields_the_schema_has(model: Any) -> None:
    served = crd_for(model)["spec"]["versions"][0]
    schema = served["schema"]["openAPIV3Schema"]
    missing = [
        c["jsonPath"]
        for c in served["additionalPrinterColumns"]
        if not _resolves(schema, c["jsonPath"]) and (model.KIND, c["jsonPath"]) not in NOT_IN_CAPA_PY
    ]
    assert missing == []


_CLUSTER_NAME = ".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
CAPA_COLUMNS: dict[str, list[tuple[str, str, str, int]]] = {
    "AWSCluster": [
        ("Cluster", "string", _CLUSTER_NAME, 0),
        ("Ready", "string", ".status.ready", 0),
        ("VPC", "string", ".status.network.vpcId", 0),
        ("Endpoint", "string", ".spec.controlPlaneEndpoint", 1),
        ("Bastion IP", "string", ".status.bastion.publicIp", 0),
    ],
    "AWSMachine": [
        ("Cluster", "string", _CLUSTER_NAME, 0),
        ("State", "string", ".status.instanceState", 0),
        ("Ready", "string", ".status.ready", 0),
        ("InstanceID", "string", ".spec.providerID", 0),
        ("Machine", "string", '.metadata.ownerReferences[?(@.kind=="Machine")].name', 0),
    ],
}
"""Cluster API Provider AWS's v1beta2 printer columns (its kubebuilder printcolumn markers): name, type,
JSONPath, priority. CAPA writes the cluster-name label path as ``.metadata.labels.cluster\\.x-k8s\\.io/
cluster-name``; the bracket form here names the same label."""
CAPA_NAMES = {"AWSCluster": (["awsc"], ["cluster-api"]), "AWSMachine": (["awsm"], ["cluster-api"])}
"""CAPA's short names and categories (its kubebuilder resource markers)."""


@pytest.mark.parametrize("kind", sorted(CAPA_COLUMNS))
def test_aws_kinds_have_capa_s_printer_columns_short_names_and_categories(kind: str) -> None:
    """Failed before: no short names, an Age column CAPA does not have, the VPC and InstanceID columns read
    status where CAPA's read the spec."""
    crd = next(c for c in crds() if c["spec"]["names"]["kind"] == kind)
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["type"], c["jsonPath"], c.get("priority", 0)) for c in columns] == CAPA_COLUMNS[
        kind
    ]
    names = crd["spec"]["names"]
    assert (names.get("shortNames"), names.get("categories")) == CAPA_NAMES[kind]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_manifest_passes_the_crd_schemas(path: Path) -> None:
    checked = 0
    for doc in yaml.safe_load_all(path.read_text()):
        if (doc["apiVersion"], doc["kind"]) in _schemas():
            assert schema_errors(doc) == [], f"{path.name}: {doc['kind']} {doc['metadata']['name']}"
            checked += 1
    assert checked > 0


AWSCLUSTER: dict[str, Any] = {
    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
    "kind": "AWSCluster",
    "metadata": {"name": "demo", "namespace": "default"},
    "spec": {
        "region": "us-east-1",
        "network": {
            "vpc": {"cidrBlock": "10.0.0.0/16"},
            "subnets": [{"availabilityZone": "us-east-1a", "cidrBlock": "10.0.0.0/20", "isPublic": True}],
        },
    },
}
AWSMACHINE: dict[str, Any] = {
    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
    "kind": "AWSMachine",
    "metadata": {"name": "m", "namespace": "default"},
    "spec": {"instanceType": "t3.medium", "ami": {"id": "ami-785db401"}},
}
MACHINE: dict[str, Any] = {
    "apiVersion": "cluster.x-k8s.io/v1beta1",
    "kind": "Machine",
    "metadata": {"name": "m", "namespace": "default"},
    "spec": {
        "clusterName": "demo",
        "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "AWSMachine"},
    },
}
CLUSTER: dict[str, Any] = {
    "apiVersion": "cluster.x-k8s.io/v1beta1",
    "kind": "Cluster",
    "metadata": {"name": "demo", "namespace": "default"},
    "spec": {},
}


AWSMACHINETEMPLATE: dict[str, Any] = {
    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
    "kind": "AWSMachineTemplate",
    "metadata": {"name": "workers", "namespace": "default"},
    "spec": {"template": {"metadata": {"labels": {"tier": "worker"}}, "spec": AWSMACHINE["spec"]}},
}
AWSCLUSTERTEMPLATE: dict[str, Any] = {
    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
    "kind": "AWSClusterTemplate",
    "metadata": {"name": "shared", "namespace": "default"},
    "spec": {"template": {"spec": AWSCLUSTER["spec"]}},
}
TEMPLATES = "AWSMachineTemplate, AWSClusterTemplate, TinkerbellMachineTemplate spec.template.spec"


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``base`` with the dotted ``path`` set to ``value`` (``DELETE`` removes it)."""
    doc = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return doc


DELETE = object()

SCHEMA_REJECTS = [
    ("cluster name longer than 63", _with(CLUSTER, "metadata.name", "c" * 64)),
    ("cluster name starting with sg-", _with(CLUSTER, "metadata.name", "sg-demo")),
    ("VPC block larger than /16", _with(AWSCLUSTER, "spec.network.vpc.cidrBlock", "10.0.0.0/8")),
    ("subnet block smaller than /28", _with(AWSCLUSTER, "spec.network.subnets.0.cidrBlock", "10.0.0.0/29")),
    ("AMI id not ami-hex", _with(AWSMACHINE, "spec.ami.id", "ami-xyz")),
    ("vpc CIDR not a CIDR", _with(AWSCLUSTER, "spec.network.vpc.cidrBlock", "10.0.0.0")),
    ("vpc CIDR prefix out of range", _with(AWSCLUSTER, "spec.network.vpc.cidrBlock", "10.0.0.0/33")),
    (
        "subnet CIDR octet out of range",
        _with(AWSCLUSTER, "spec.network.subnets.0.cidrBlock", "10.0.300.0/20"),
    ),
    ("region missing", _with(AWSCLUSTER, "spec.region", DELETE)),
    ("region not region-shaped", _with(AWSCLUSTER, "spec.region", "moon")),
    (
        "load balancer scheme not in the enum",
        _with(AWSCLUSTER, "spec.controlPlaneLoadBalancer.scheme", "public"),
    ),
    (
        "load balancer type not in the enum",
        _with(AWSCLUSTER, "spec.controlPlaneLoadBalancer.loadBalancerType", "alb"),
    ),
    ("load balancer name too long", _with(AWSCLUSTER, "spec.controlPlaneLoadBalancer.name", "a" * 33)),
    (
        "load balancer name starts with a hyphen",
        _with(AWSCLUSTER, "spec.controlPlaneLoadBalancer.name", "-lb"),
    ),
    ("zone usage limit above 16", _with(AWSCLUSTER, "spec.network.vpc.availabilityZoneUsageLimit", 17)),
    (
        "zone selection not in the enum",
        _with(AWSCLUSTER, "spec.network.vpc.availabilityZoneSelection", "Any"),
    ),
    ("tag value longer than 256", _with(AWSCLUSTER, "spec.additionalTags", {"team": "x" * 257})),
    ("isPublic not a boolean", _with(AWSCLUSTER, "spec.network.subnets.0.isPublic", "maybe")),
    ("unknown spec field", _with(AWSCLUSTER, "spec.vpcCidr", "10.0.0.0/16")),
    ("awscluster spec missing", _with(AWSCLUSTER, "spec", DELETE)),
    ("instance type missing", _with(AWSMACHINE, "spec.instanceType", DELETE)),
    ("volume type not in the enum", _with(AWSMACHINE, "spec.rootVolume", {"size": 40, "type": "gp9"})),
    ("volume smaller than 8 GiB", _with(AWSMACHINE, "spec.rootVolume", {"size": 4})),
    ("iops below 100", _with(AWSMACHINE, "spec.rootVolume", {"size": 40, "type": "io1", "iops": 50})),
    ("machine tag value too long", _with(AWSMACHINE, "spec.additionalTags", {"k": "v" * 257})),
    ("instance state not in the enum", _with(AWSMACHINE, "status", {"instanceState": "exploded"})),
    ("template AMI id not ami-hex", _with(AWSMACHINETEMPLATE, "spec.template.spec.ami.id", "ami-xyz")),
    ("template instance type missing", _with(AWSMACHINETEMPLATE, "spec.template.spec.instanceType", DELETE)),
    ("machine template spec missing", _with(AWSMACHINETEMPLATE, "spec.template.spec", DELETE)),
    ("template label value invalid", _with(AWSMACHINETEMPLATE, "spec.template.metadata.labels", {"a": "-"})),
    ("template region not region-shaped", _with(AWSCLUSTERTEMPLATE, "spec.template.spec.region", "moon")),
    ("cluster template spec missing", _with(AWSCLUSTERTEMPLATE, "spec.template", DELETE)),
    ("machine cluster name missing", _with(MACHINE, "spec.clusterName", DELETE)),
    ("machine cluster name empty", _with(MACHINE, "spec.clusterName", "")),
    ("machine infrastructureRef missing", _with(MACHINE, "spec.infrastructureRef", DELETE)),
    ("API server port other than 6443", _with(CLUSTER, "spec.clusterNetwork", {"apiServerPort": 443})),
    ("cluster phase not in the enum", _with(CLUSTER, "status", {"phase": "Exploded"})),
    (
        "condition status not True/False/Unknown",
        _with(CLUSTER, "status", {"conditions": [{"type": "Ready", "status": "Yes"}]}),
    ),
]


@pytest.mark.parametrize(("case", "doc"), SCHEMA_REJECTS, ids=[c for c, _ in SCHEMA_REJECTS])
def test_what_the_models_refuse_the_schemas_refuse(case: str, doc: dict[str, Any]) -> None:
    assert model_rejects(doc), f"{case}: the models accept it, so the case tests nothing"
    assert schema_errors(doc) != [], f"{case}: the CRD schema accepts what the models refuse"


CIDRS = "AWSCluster spec.network.vpc.cidrBlock, subnets[].cidrBlock"
ADMISSION_REJECTS = [
    ("CIDR with host bits set", CIDRS, _with(AWSCLUSTER, "spec.network.vpc.cidrBlock", "10.0.0.1/16")),
    ("managed VPC without a block", "AWSCluster spec.network.vpc", _with(AWSCLUSTER, "spec.network.vpc", {})),
    (
        "region botocore does not know",
        "AWSCluster spec.region",
        _with(AWSCLUSTER, "spec.region", "xx-nowhere-1"),
    ),
    (
        "subnet outside the VPC",
        "AWSCluster spec.network.subnets",
        _with(AWSCLUSTER, "spec.network.subnets.0.cidrBlock", "10.1.0.0/20"),
    ),
    (
        "zone of another region",
        "AWSCluster spec.network.subnets[].availabilityZone",
        _with(AWSCLUSTER, "spec.network.subnets.0.availabilityZone", "us-west-2a"),
    ),
    (
        "load balancer name starting with internal-",
        "AWSCluster spec.controlPlaneLoadBalancer.name",
        _with(AWSCLUSTER, "spec.controlPlaneLoadBalancer.name", "internal-lb"),
    ),
    (
        "tag key with the aws: prefix",
        "tag keys (additionalTags, tags)",
        _with(AWSCLUSTER, "spec.additionalTags", {"aws:team": "x"}),
    ),
    (
        "instance type botocore does not know",
        "AWSMachine spec.instanceType",
        _with(AWSMACHINE, "spec.instanceType", "t3.gigantic"),
    ),
    (
        "io1 volume without iops",
        "AWSMachine spec.rootVolume",
        _with(AWSMACHINE, "spec.rootVolume", {"size": 40, "type": "io1"}),
    ),
    (
        "label key invalid, in a template's metadata",
        "templates' spec.template.metadata.labels keys",
        _with(AWSMACHINETEMPLATE, "spec.template.metadata.labels", {"a b": "c"}),
    ),
    (
        "providerID in a machine template",
        TEMPLATES,
        _with(AWSMACHINETEMPLATE, "spec.template.spec.providerID", "aws:///us-east-1a/i-0123"),
    ),
    (
        "instance type botocore does not know, in a machine template",
        TEMPLATES,
        _with(AWSMACHINETEMPLATE, "spec.template.spec.instanceType", "t3.gigantic"),
    ),
    (
        "subnet outside the VPC, in a cluster template",
        TEMPLATES,
        _with(AWSCLUSTERTEMPLATE, "spec.template.spec.network.subnets.0.cidrBlock", "10.1.0.0/20"),
    ),
]


@pytest.mark.parametrize(
    ("case", "subject", "doc"), ADMISSION_REJECTS, ids=[c for c, _, _ in ADMISSION_REJECTS]
)
def test_rules_only_admission_checks_are_refused_by_the_models_and_listed(
    case: str, subject: str, doc: dict[str, Any]
) -> None:
    """These pass the schema (a JSON schema cannot say them: metadata, lookups, cross-field rules); the
    models refuse them, and the schema module lists them. When a schema learns one, move it up."""
    assert model_rejects(doc), f"{case}: the models accept it"
    assert schema_errors(doc) == [], f"{case}: the schema now refuses it; move it to SCHEMA_REJECTS"
    assert subject in dict(ADMISSION_ONLY), f"{case}: not listed in ADMISSION_ONLY"


def test_crds_are_the_same_bytes_in_every_process() -> None:
    """Nothing depends on set or dict ordering that changes between runs (hash randomisation)."""
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        run = subprocess.run(
            [sys.executable, "-m", "capa_app.cli", "manifests", "all"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            cwd=ROOT,
        )
        outputs.add(run.stdout)
    assert len(outputs) == 1
    assert render(documents("all")) in outputs


@pytest.mark.parametrize("name", ["demo", "s", "sg", "sgx", "s-g", "a" * 63, "my.cluster"])
def test_cluster_names_the_models_accept_pass_the_name_rules(name: str) -> None:
    doc = _with(CLUSTER, "metadata.name", name)
    assert not model_rejects(doc)
    assert schema_errors(doc) == []


def test_the_aws_cluster_schema_carries_the_model_constraints() -> None:
    spec = structural_schema(AWSCluster)["properties"]["spec"]
    assert spec["required"] == ["region"]
    lb = spec["properties"]["controlPlaneLoadBalancer"]["properties"]
    assert lb["name"]["maxLength"] == 32
    assert lb["scheme"]["enum"] == ["internet-facing", "internal"]


def test_a_kind_registered_later_gets_a_crd_with_free_form_fields_marked() -> None:
    """A provider's kind is served as soon as it is registered; only its free-form fields (a schemaless
    kind's spec and status) skip the schema, and built-in groups never get a CRD."""
    registry = KindRegistry()
    widget = registry.define("widgets.example.x-k8s.io/v1alpha1", "Widget", short_names=("wd",))
    registry.define("coordination.k8s.io/v1", "Gadget")
    registry.define("v1", "Gizmo")
    assert [crd["metadata"]["name"] for crd in crds(registry)] == ["widgets.widgets.example.x-k8s.io"]
    schema = crd_for(widget)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert non_structural_nodes(schema) == []
    assert crd_for(widget)["spec"]["names"]["shortNames"] == ["wd"]


# The CLI's invalid-input cases that a CRD schema cannot refuse (lookups in the region's zones and in
# botocore's instance types): admission refuses them, and ADMISSION_ONLY must say so.
CLI_ADMISSION_CASES = {
    "zone-letter-not-in-region": "AWSCluster spec.network.subnets[].availabilityZone",
    "zone-of-another-region": "AWSCluster spec.network.subnets[].availabilityZone",
    "unknown-instance-type": "AWSMachine spec.instanceType",
}


@pytest.mark.parametrize("case", sorted(CLI_INVALID))
def test_every_manifest_capa_apply_refuses_is_refused_by_the_schemas_or_left_to_admission(case: str) -> None:
    """The same invalid manifests ``capa apply`` refuses (tests/cli/test_cli_validation.py), through the
    CRD schemas: each one the schema can express fails it; the others are listed as admission-only."""
    overrides, _ = CLI_INVALID[case]
    valid = [d for d in yaml.safe_load_all(cli_manifest()) if d]
    invalid = [d for d in yaml.safe_load_all(cli_manifest(**overrides)) if d]
    assert model_rejects_text(cli_manifest(**overrides)), f"{case}: the models accept it"
    assert not model_rejects_text(cli_manifest()), "the baseline manifest must be valid"
    schemas = _schemas()
    new_errors = [
        error
        for bad, good in zip(invalid, valid, strict=True)
        if (bad["apiVersion"], bad["kind"]) in schemas
        for error in schema_errors(bad)
        if error not in schema_errors(good)
    ]
    if case in CLI_ADMISSION_CASES:
        assert new_errors == [], f"{case}: the schema now refuses it; drop it from CLI_ADMISSION_CASES"
        assert CLI_ADMISSION_CASES[case] in dict(ADMISSION_ONLY)
    else:
        assert new_errors, f"{case}: the CRD schema accepts what capa apply refuses"
