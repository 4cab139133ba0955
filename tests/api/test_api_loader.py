"""Manifests load from multi-document YAML or JSON, and every problem names file, document and field."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from capa_py.api import (
    AWSCluster,
    Cluster,
    ManifestError,
    Secret,
    load_manifest_text,
    load_manifests,
)
from capa_py.api.loader import format_loc

CLUSTER = {
    "apiVersion": "cluster.x-k8s.io/v1beta1",
    "kind": "Cluster",
    "metadata": {"name": "demo"},
    "spec": {"infrastructureRef": {"kind": "AWSCluster", "name": "demo"}},
}


def aws_cluster_yaml(network: str = "", region: str = "us-east-1", extra_spec: str = "") -> str:
    """An AWSCluster document; ``network`` is YAML indented to sit under ``spec.network``."""
    body = textwrap.dedent(
        f"""\
        apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
        kind: AWSCluster
        metadata:
          name: demo
        spec:
          region: {region}
        """
    )
    if extra_spec:
        body += textwrap.indent(textwrap.dedent(extra_spec), "  ")
    body += "  network:\n" + textwrap.indent(
        textwrap.dedent(network or "vpc:\n  cidrBlock: 10.0.0.0/16\n"), "    "
    )
    return body


def problems_of(text: str, source: str = "cluster.yaml") -> list[str]:
    with pytest.raises(ManifestError) as caught:
        load_manifest_text(text, source)
    return [str(problem) for problem in caught.value.problems]


def assert_single_problem(text: str, expected: str) -> None:
    problems = problems_of("\n---\n".join([json.dumps(CLUSTER), text]))
    assert len(problems) == 1, f"expected exactly one problem, got {problems}"
    assert problems[0].startswith("cluster.yaml: document 2 (AWSCluster demo): "), (
        f"the problem must name the file and the document: {problems[0]}"
    )
    assert expected in problems[0], f"expected {expected!r} in {problems[0]!r}"


# -- formats -------------------------------------------------------------------------------------------


def test_multi_document_yaml_loads_every_document_in_order() -> None:
    text = "\n---\n".join(
        [
            json.dumps(CLUSTER),
            aws_cluster_yaml(),
            "apiVersion: v1\nkind: Secret\nmetadata: {name: boot, namespace: other}\nstringData: {value: x}",
            "",  # an empty document is skipped
        ]
    )

    objects = load_manifest_text(text)

    assert [type(o) for o in objects] == [Cluster, AWSCluster, Secret]
    assert [o.namespace for o in objects] == ["default", "default", "other"], (
        "a document without namespace lands in 'default'; an explicit one is kept"
    )


def test_a_json_object_loads() -> None:
    (cluster,) = load_manifest_text(json.dumps(CLUSTER))
    assert isinstance(cluster, Cluster)
    assert cluster.spec.infrastructure_ref is not None
    assert cluster.spec.infrastructure_ref.kind == "AWSCluster"


def test_a_json_array_loads_every_item() -> None:
    second = {**CLUSTER, "metadata": {"name": "second"}}
    objects = load_manifest_text(json.dumps([CLUSTER, second]))
    assert [o.name for o in objects] == ["demo", "second"]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "yaml"])
def test_a_kind_list_loads_its_items(as_json: bool) -> None:
    second = {**CLUSTER, "metadata": {"name": "second"}}
    document = {"apiVersion": "v1", "kind": "List", "items": [CLUSTER, second]}
    text = json.dumps(document) if as_json else yaml.safe_dump(document, default_flow_style=False)

    objects = load_manifest_text(text)

    assert [o.name for o in objects] == ["demo", "second"]


def test_problems_in_a_json_array_name_the_item_number() -> None:
    broken = {**CLUSTER, "metadata": {"name": "broken"}, "spec": {"paused": "sometimes"}}
    problems = problems_of(json.dumps([CLUSTER, broken]), "clusters.json")
    assert len(problems) == 1, problems
    assert problems[0].startswith("clusters.json: document 2 (Cluster broken): spec.paused: "), problems[0]


def test_load_manifests_reads_files_and_names_them_in_problems(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(json.dumps(CLUSTER))
    bad = tmp_path / "bad.yaml"
    bad.write_text(aws_cluster_yaml(region="mars-north-1"))

    assert [o.name for o in load_manifests([good])] == ["demo"]
    with pytest.raises(ManifestError) as caught:
        load_manifests([good, bad])
    assert [p.source for p in caught.value.problems] == [str(bad)], "only the bad file must be blamed"
    assert str(caught.value).startswith(f"{bad}: document 1 (AWSCluster demo): spec.region: ")


def test_loading_is_all_or_nothing_across_files(tmp_path: Path) -> None:
    first = tmp_path / "first.yaml"
    first.write_text(aws_cluster_yaml(region="nowhere"))
    second = tmp_path / "second.yaml"
    second.write_text(json.dumps({**CLUSTER, "kind": "Clustr"}))

    with pytest.raises(ManifestError) as caught:
        load_manifests([first, second])

    assert [(p.source, p.path) for p in caught.value.problems] == [
        (str(first), "spec.region"),
        (str(second), "kind"),
    ], "every problem of every file must be reported, not only the first"


def test_an_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ManifestError, match=r"missing\.yaml: .*cannot read"):
        load_manifests([missing])


def test_unparseable_text_is_reported_with_the_source() -> None:
    with pytest.raises(ManifestError, match=r"^broken.yaml: document 1: cannot parse"):
        load_manifest_text("kind: [unclosed", "broken.yaml")
    with pytest.raises(ManifestError, match=r"^broken.json: document 1: cannot parse"):
        load_manifest_text('{"kind": ', "broken.json")


def test_a_key_given_twice_in_a_yaml_mapping_is_refused_naming_both_lines() -> None:
    """Before, the last value silently won (``metadata.name`` ``b`` here)."""
    text = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: a\n  name: b\n"
    [problem] = problems_of(text, "twice.yaml")
    assert problem.startswith("twice.yaml: document 1: cannot parse: duplicate key 'name' (first at line 4)")
    assert "line 5" in problem


def test_a_member_given_twice_in_a_json_object_is_refused() -> None:
    text = '{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a", "name": "b"}}'
    [problem] = problems_of(text, "twice.json")
    assert problem == "twice.json: document 1: cannot parse: duplicate key 'name'"


def test_a_yaml_merge_key_may_override_what_it_merges() -> None:
    text = textwrap.dedent(
        """\
        apiVersion: v1
        kind: Secret
        metadata:
          name: b
          labels: &base {team: a, tier: x}
          annotations:
            <<: *base
            team: override
        """
    )
    [secret] = load_manifest_text(text, "merged.yaml")
    assert secret.metadata.annotations == {"team": "override", "tier": "x"}


def test_a_file_that_is_not_utf8_is_refused_naming_the_line(tmp_path: Path) -> None:
    """Before, a UnicodeDecodeError traceback."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes("apiVersion: v1\nkind: Secret\nmetadata:\n  name: café\n".encode("latin-1"))
    with pytest.raises(ManifestError) as caught:
        load_manifests([path])
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: not UTF-8 text: byte 0xe9 at line 4 (save the file as UTF-8)"
    ]


@pytest.mark.parametrize("flow", ["yaml", "json"])
def test_a_document_nested_too_deeply_is_refused(flow: str) -> None:
    """Before, a RecursionError traceback (YAML nested 5,000 levels)."""
    deep = "[" * 5000 + "]" * 5000
    text = f"a: {deep}\n" if flow == "yaml" else f'{{"a": {deep}}}'
    [problem] = problems_of(text, "deep")
    assert problem == "deep: document 1: cannot parse: nested deeper than 100 levels"


def test_a_document_nested_deeper_than_the_limit_is_refused_though_it_parses() -> None:
    text = "a: " + "[" * 101 + "]" * 101 + "\n"
    assert problems_of(text, "deep.yaml") == ["deep.yaml: document 1: nested deeper than 100 levels"]


# -- document-level problems ---------------------------------------------------------------------------


def test_unknown_kind_is_reported_at_kind() -> None:
    problems = problems_of(json.dumps({**CLUSTER, "kind": "Clustre"}))
    assert len(problems) == 1
    assert problems[0].startswith("cluster.yaml: document 1 (Clustre demo): kind: unknown kind"), problems[0]


def test_unknown_api_version_is_an_unknown_kind() -> None:
    problems = problems_of(json.dumps({**CLUSTER, "apiVersion": "cluster.x-k8s.io/v1alpha1"}))
    assert "kind: unknown kind cluster.x-k8s.io/v1alpha1/Cluster" in problems[0]


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"kind": "Cluster", "metadata": {"name": "x"}}, "apiVersion: required"),
        ({"apiVersion": "cluster.x-k8s.io/v1beta1", "metadata": {"name": "x"}}, "kind: required"),
        ({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster"}, "metadata.name: required"),
        (["not", "a", "mapping"], "a document must be a mapping"),
    ],
)
def test_a_malformed_document_is_reported(document: object, expected: str) -> None:
    problems = problems_of(f"---\n{json.dumps(document)}\n")
    assert len(problems) == 1
    assert problems[0].startswith("cluster.yaml: document 1"), problems[0]
    assert problems[0].endswith(expected), f"expected {expected!r} at the end of {problems[0]!r}"


def test_every_problem_of_a_stream_is_reported() -> None:
    text = "---\n".join([aws_cluster_yaml(region="xx"), json.dumps({**CLUSTER, "kind": "Nope"})])
    with pytest.raises(ManifestError) as caught:
        load_manifest_text(text)
    assert [(p.document, p.path) for p in caught.value.problems] == [(1, "spec.region"), (2, "kind")]


def test_a_yaml_stream_may_open_with_a_flow_style_document() -> None:
    objects = load_manifest_text(json.dumps(CLUSTER) + "\n---\n" + aws_cluster_yaml())
    assert [type(o) for o in objects] == [Cluster, AWSCluster], "JSON is YAML: a stream may start with it"


# -- field-level problems ------------------------------------------------------------------------------


def test_unknown_field_is_reported_with_its_path() -> None:
    assert_single_problem(aws_cluster_yaml(extra_spec="sshKeyNam: typo\n"), "spec.sshKeyNam: unknown field")


def test_unknown_nested_field_is_reported_with_its_path() -> None:
    network = "vpc:\n  cidrBlock: 10.0.0.0/16\n  cidr: 10.0.0.0/16\n"
    assert_single_problem(aws_cluster_yaml(network), "spec.network.vpc.cidr: unknown field")


@pytest.mark.parametrize("cidr", ["10.0.0.0/33", "10.0.0.1/16", "not-a-cidr", "fd00::/8"])
def test_invalid_vpc_cidr_is_reported_with_its_path(cidr: str) -> None:
    assert_single_problem(
        aws_cluster_yaml(f"vpc:\n  cidrBlock: {cidr}\n"), "spec.network.vpc.cidrBlock: not a valid CIDR"
    )


@pytest.mark.parametrize("region", ["mars-north-1", "us-east", "US-EAST-1", "us-east-99"])
def test_unknown_region_is_reported_with_its_path(region: str) -> None:
    assert_single_problem(aws_cluster_yaml(region=region), f"spec.region: unknown AWS region '{region}'")


def test_overlapping_subnets_are_reported_on_the_later_subnet() -> None:
    network = """\
        vpc: {cidrBlock: 10.0.0.0/16}
        subnets:
          - {cidrBlock: 10.0.0.0/20, availabilityZone: us-east-1a}
          - {cidrBlock: 10.0.8.0/24, availabilityZone: us-east-1b}
        """
    assert_single_problem(
        aws_cluster_yaml(network),
        "spec.network.subnets[1].cidrBlock: 10.0.8.0/24 overlaps spec.network.subnets[0]",
    )


def test_a_subnet_outside_the_vpc_is_reported() -> None:
    network = """\
        vpc: {cidrBlock: 10.0.0.0/16}
        subnets:
          - {cidrBlock: 10.1.0.0/24, availabilityZone: us-east-1a}
        """
    assert_single_problem(
        aws_cluster_yaml(network), "spec.network.subnets[0].cidrBlock: 10.1.0.0/24 is outside the VPC block"
    )


@pytest.mark.parametrize("zone", ["us-west-2a", "us-east-1", "us-east-1aa", "us-east-1-a"])
def test_an_availability_zone_outside_the_region_is_reported(zone: str) -> None:
    network = f"""\
        vpc: {{cidrBlock: 10.0.0.0/16}}
        subnets:
          - {{cidrBlock: 10.0.0.0/24, availabilityZone: {zone}}}
        """
    assert_single_problem(
        aws_cluster_yaml(network),
        f"spec.network.subnets[0].availabilityZone: unknown availability zone '{zone}'",
    )


def test_a_valid_three_zone_network_loads() -> None:
    network = """\
        vpc: {cidrBlock: 10.0.0.0/16}
        subnets:
          - {cidrBlock: 10.0.0.0/20, availabilityZone: us-east-1a, isPublic: true}
          - {cidrBlock: 10.0.16.0/20, availabilityZone: us-east-1b}
          - {cidrBlock: 10.0.32.0/20, availabilityZone: us-east-1c}
        """
    (aws_cluster,) = load_manifest_text(aws_cluster_yaml(network))
    assert isinstance(aws_cluster, AWSCluster)
    assert [s.is_public for s in aws_cluster.spec.network.subnets] == [True, False, False]


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("spec", "network", "subnets", 0, "cidrBlock"), "spec.network.subnets[0].cidrBlock"),
        (("metadata",), "metadata"),
        ((0, "name"), "[0].name"),
        ((), ""),
    ],
)
def test_format_loc_renders_field_paths(loc: tuple[int | str, ...], path: str) -> None:
    assert format_loc(loc) == path


@pytest.mark.parametrize("namespace", ["Team_A", "team.a", "a" * 64, "-team"])
def test_a_namespace_that_is_not_a_dns_label_is_refused(namespace: str) -> None:
    """A namespace is an RFC 1123 label, as the API server requires of every Namespace name (dots and
    capitals were accepted: the object could be stored here and never applied to a cluster)."""
    cluster = {**CLUSTER, "metadata": {**CLUSTER["metadata"], "namespace": namespace}}
    problems = problems_of(json.dumps(cluster))
    assert len(problems) == 1, problems
    assert "metadata.namespace: must be a lowercase RFC 1123 label" in problems[0], problems


def test_a_namespace_object_named_other_than_a_dns_label_is_refused() -> None:
    problems = problems_of(
        json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team.a"}})
    )
    assert len(problems) == 1, problems
    assert "metadata.name: must be a lowercase RFC 1123 label" in problems[0], problems
    assert (
        load_manifest_text(
            json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}), "ns.yaml"
        )[0].name
        == "team-a"
    )
