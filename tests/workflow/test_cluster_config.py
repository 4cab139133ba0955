"""Loading a cluster file: the example files load, and each problem a file can have is named with the file,
the document, the object and the field, all at once, before anything is built or written."""

from __future__ import annotations

import copy
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.loader import ManifestError
from capa_py.workflow.config import ClusterFile, load_cluster_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
MGMT = EXAMPLES / "mgmt.yaml"

# The documents of mgmt.yaml, in order (1-based, as problems number them).
CONFIG, CLUSTER, AWS_CLUSTER, SECRET, CP_MACHINE, CP_AWS_MACHINE, WORKER, WORKER_AWS_MACHINE = range(8)


def example_documents() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(MGMT.read_text(encoding="utf-8")) if d]
    assert [d["kind"] for d in docs][:3] == ["ClusterConfig", "Cluster", "AWSCluster"], "mgmt.yaml changed"
    return docs


def write(directory: Path, docs: list[dict[str, Any]], name: str = "cluster.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path


def problems_of(path: Path, check_files: bool = False) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        load_cluster_file(path, check_files=check_files)
    return [str(p) for p in caught.value.problems]


def closed_port_url() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/cni.yaml"


def test_the_example_management_file_loads_without_its_files() -> None:
    spec = load_cluster_file(MGMT, check_files=False)
    assert isinstance(spec, ClusterFile)
    assert (spec.name, spec.namespace, spec.provider) == ("mgmt", "default", "aws")
    assert spec.cluster.name == "mgmt"
    assert [m.name for m in spec.machines] == ["mgmt-cp-0", "mgmt-worker-0"]
    assert [o.KIND for o in spec.objects] == [
        "Cluster",
        "AWSCluster",
        "Secret",
        "Machine",
        "AWSMachine",
        "Machine",
        "AWSMachine",
    ], "the ClusterConfig is not among the objects; the rest keep file order"
    assert spec.cni_manifest == str(EXAMPLES / "../cni/demo-cni.yaml")
    assert spec.control_plane_kubeconfig == EXAMPLES / "stand-in" / "mgmt.kubeconfig"


def test_checking_files_names_the_missing_stand_in_kubeconfig() -> None:
    assert not (EXAMPLES / "stand-in" / "mgmt.kubeconfig").exists(), (
        "the stand-in is written by a walkthrough"
    )
    problems = problems_of(MGMT, check_files=True)
    assert problems == [
        f"{MGMT}: document 1 (ClusterConfig default/mgmt): spec.controlPlane.kubeconfigFile: "
        f"no such file: {EXAMPLES / 'stand-in' / 'mgmt.kubeconfig'}"
    ]


def test_no_cluster_config_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, example_documents()[1:])
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}: no ClusterConfig (capa-py.io/v1alpha1) documents")


def test_a_second_cluster_config_is_named_at_its_document(tmp_path: Path) -> None:
    docs = example_documents()
    # Repeated verbatim (a copy, so the YAML holds two documents rather than an alias): the problem is with
    # the second, which is equal to the first.
    docs.insert(1, copy.deepcopy(docs[CONFIG]))
    path = write(tmp_path, docs)
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}: document 2 (ClusterConfig default/mgmt): 2 ClusterConfig")
    assert "exactly one" in problem


def test_an_object_given_twice_is_named_at_its_second_document(tmp_path: Path) -> None:
    docs = example_documents()
    docs.append(copy.deepcopy(docs[WORKER]))
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 9 (Machine default/mgmt-worker-0): metadata.name: "
        "Machine mgmt-worker-0 is already document 7"
    ]


def test_no_cluster_is_named(tmp_path: Path) -> None:
    docs = example_documents()
    del docs[CLUSTER]
    path = write(tmp_path, docs)
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}: no Cluster documents")


def test_config_named_unlike_its_cluster(tmp_path: Path) -> None:
    docs = example_documents()
    docs[CONFIG]["metadata"]["name"] = "other"
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 1 (ClusterConfig default/other): metadata.name: must be the Cluster's name (mgmt)"
    ]


def test_an_object_in_another_namespace(tmp_path: Path) -> None:
    docs = example_documents()
    docs[SECRET]["metadata"]["namespace"] = "elsewhere"
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 4 (Secret elsewhere/mgmt-bootstrap): metadata.namespace: "
        "must be the ClusterConfig's namespace (default)"
    ]


def test_an_infrastructure_ref_of_the_other_provider(tmp_path: Path) -> None:
    docs = example_documents()
    docs[CLUSTER]["spec"]["infrastructureRef"]["kind"] = "TinkerbellCluster"
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 2 (Cluster default/mgmt): spec.infrastructureRef.kind: "
        "the ClusterConfig's provider is aws: expected AWSCluster, not TinkerbellCluster"
    ]


def test_a_missing_infrastructure_cluster(tmp_path: Path) -> None:
    docs = example_documents()
    del docs[AWS_CLUSTER]
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 2 (Cluster default/mgmt): spec.infrastructureRef.name: "
        "no AWSCluster mgmt in the file"
    ]


def test_a_machine_of_another_cluster(tmp_path: Path) -> None:
    docs = example_documents()
    docs[WORKER]["spec"]["clusterName"] = "other"
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 7 (Machine default/mgmt-worker-0): spec.clusterName: "
        "must be the cluster's name (mgmt)"
    ]


def test_a_machine_of_the_other_providers_kind(tmp_path: Path) -> None:
    docs = example_documents()
    docs[CP_MACHINE]["spec"]["infrastructureRef"]["kind"] = "TinkerbellMachine"
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 5 (Machine default/mgmt-cp-0): spec.infrastructureRef.kind: "
        "the ClusterConfig's provider is aws: expected AWSMachine"
    ]


def test_a_machine_whose_infrastructure_machine_is_missing(tmp_path: Path) -> None:
    docs = example_documents()
    del docs[WORKER_AWS_MACHINE]
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 7 (Machine default/mgmt-worker-0): spec.infrastructureRef.name: "
        "no AWSMachine mgmt-worker-0 in the file"
    ]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    docs = example_documents()
    docs[CONFIG]["metadata"]["name"] = "other"
    docs[SECRET]["metadata"]["namespace"] = "elsewhere"
    docs[WORKER]["spec"]["clusterName"] = "other"
    path = write(tmp_path, docs)
    fields = [p.split(": ")[2] for p in problems_of(path)]
    assert fields == ["metadata.name", "metadata.namespace", "spec.clusterName"]


def test_a_missing_cni_manifest_file(tmp_path: Path) -> None:
    docs = example_documents()
    docs[CONFIG]["spec"]["networking"]["cniManifest"] = "cni/absent.yaml"
    del docs[CONFIG]["spec"]["controlPlane"]
    path = write(tmp_path, docs)
    assert problems_of(path, check_files=True) == [
        f"{path}: document 1 (ClusterConfig default/mgmt): spec.networking.cniManifest: "
        f"no such file: {tmp_path / 'cni' / 'absent.yaml'}"
    ]
    assert load_cluster_file(path, check_files=False).cni_manifest == str(tmp_path / "cni" / "absent.yaml")


def test_a_url_kubeconfig_file_is_refused_even_unchecked(tmp_path: Path) -> None:
    docs = example_documents()
    docs[CONFIG]["spec"]["controlPlane"]["kubeconfigFile"] = "https://example.invalid/kubeconfig"
    path = write(tmp_path, docs)
    assert problems_of(path, check_files=False) == [
        f"{path}: document 1 (ClusterConfig default/mgmt): spec.controlPlane.kubeconfigFile: "
        "a file, not a URL"
    ]


def test_a_url_cni_manifest_is_accepted_without_fetching(tmp_path: Path) -> None:
    # Nothing listens on the URL's port: loading would fail if it fetched the manifest.
    url = closed_port_url()
    docs = example_documents()
    docs[CONFIG]["spec"]["networking"]["cniManifest"] = url
    del docs[CONFIG]["spec"]["controlPlane"]
    path = write(tmp_path, docs)
    spec = load_cluster_file(path, check_files=True)
    assert spec.cni_manifest == url
    assert spec.control_plane_kubeconfig is None


def test_tinkerbell_settings_with_provider_aws_are_refused(tmp_path: Path) -> None:
    docs = example_documents()
    docs[CONFIG]["spec"]["tinkerbell"] = {"serverPort": 42200}
    path = write(tmp_path, docs)
    assert problems_of(path) == [
        f"{path}: document 1 (ClusterConfig default/mgmt): spec.tinkerbell: "
        "only for provider tinkerbell, not aws"
    ]


def test_relative_paths_resolve_against_the_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = tmp_path / "clusters" / "demo"
    (tmp_path / "clusters" / "cni").mkdir(parents=True)
    (tmp_path / "clusters" / "cni" / "net.yaml").write_text("{}\n", encoding="utf-8")
    (given / "stand-in").mkdir(parents=True)
    (given / "stand-in" / "kubeconfig").write_text("{}\n", encoding="utf-8")
    docs = example_documents()
    docs[CONFIG]["spec"]["networking"]["cniManifest"] = "../cni/net.yaml"
    docs[CONFIG]["spec"]["controlPlane"]["kubeconfigFile"] = "stand-in/kubeconfig"
    path = write(given, docs)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory must not matter
    spec = load_cluster_file(path, check_files=True)
    assert Path(spec.cni_manifest or "").resolve() == tmp_path / "clusters" / "cni" / "net.yaml"
    assert spec.control_plane_kubeconfig == given / "stand-in" / "kubeconfig"
    absolute = tmp_path / "clusters" / "cni" / "net.yaml"
    assert spec.resolve(str(absolute)) == str(absolute), "an absolute path is kept as given"
