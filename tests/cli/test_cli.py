"""The ``capa`` command line: options, output formats, exit codes, validation, ``local``, apply semantics.

Commands that never reach AWS run in-process (``cli`` fixture, :class:`typer.testing.CliRunner`);
``capa local …`` and the apply that needs controllers run as real subprocesses.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py import __version__
from tests.cli.cli_support import Cli
from tests.e2e.e2e_support import EXAMPLE, Capa, wait_for
from tests.harness.moto_server import MotoServer

KINDS = ("clusters", "machines", "awsclusters", "awsmachines", "secrets")
EXAMPLE_OBJECTS = {"clusters": 1, "machines": 3, "awsclusters": 1, "awsmachines": 3, "secrets": 1}
LIST_ENVELOPE = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}}


def _documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def _write(path: Path, documents: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def _doc(documents: list[dict[str, Any]], kind: str, name: str = "demo") -> dict[str, Any]:
    return next(d for d in documents if d["kind"] == kind and d["metadata"]["name"] == name)


def _snapshot(cli: Cli) -> dict[str, Any]:
    """Every object of every kind, as ``get KIND -A -o json`` prints them."""
    snapshot = {}
    for kind in KINDS:
        result = cli("get", kind, "-A", "-o", "json")
        assert result.exit_code == 0, str(result)
        snapshot[kind] = json.loads(result.stdout)
    return snapshot


def _stored(cli: Cli) -> None:
    result = cli("apply", "-f", str(EXAMPLE), "--no-wait")
    assert result.exit_code == 0, f"apply --no-wait of the example failed:\n{result}"


# -- global options, version --------------------------------------------------------------------------
def test_version_prints_the_package_version(cli: Cli) -> None:
    result = cli("--version")
    assert result.exit_code == 0, str(result)
    assert result.stdout.strip() == f"capa {__version__}", str(result)


def test_global_state_option_goes_before_the_subcommand(cli: Cli, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "s.db"
    elsewhere.parent.mkdir()
    stored = cli("apply", "-f", str(EXAMPLE), "--no-wait", state_path=elsewhere)
    assert stored.exit_code == 0, str(stored)
    result = cli("get", "clusters", "-o", "json", state_path=elsewhere)
    assert result.exit_code == 0, str(result)
    assert [c["metadata"]["name"] for c in json.loads(result.stdout)["items"]] == ["demo"], (
        f"capa --state PATH get … did not read PATH as its store:\n{result}"
    )

    after = cli("get", "clusters", "--state", str(elsewhere))
    assert after.exit_code == 2, f"--state after the subcommand should be a usage error:\n{after}"


# -- apply --no-wait, get ------------------------------------------------------------------------------
def test_apply_no_wait_stores_the_objects_and_reaches_no_aws(
    cli: Cli, state: Path, closed_endpoint: str
) -> None:
    result = cli("apply", "-f", str(EXAMPLE), "--no-wait", "--aws-endpoint", closed_endpoint)
    assert result.exit_code == 0, str(result)
    assert result.seconds < 10, f"apply --no-wait took {result.seconds:.1f}s: did it try to reach AWS?"
    for line in ("cluster/demo created", "awscluster/demo created", "awsmachine/demo-worker-1 created"):
        assert line in result.stdout, f"apply --no-wait should report {line!r}:\n{result}"
    assert "AWS calls" not in result.stdout, str(result)
    stored = _snapshot(cli)
    assert {kind: len(doc["items"]) for kind, doc in stored.items()} == EXAMPLE_OBJECTS
    for item in stored["awsclusters"]["items"] + stored["awsmachines"]["items"]:
        status = item.get("status", {})
        assert not status.get("ready"), f"nothing was reconciled, yet {item['metadata']['name']} is ready"
        assert not status.get("resources"), f"AWS resources recorded without reconciling: {status}"
        assert not item["metadata"].get("finalizers"), "a controller ran: finalizers were added"
    record = state.parent / "local-aws" / "local-aws.json"
    assert not record.exists(), "apply --no-wait started the local endpoint"

    again = cli("apply", "-f", str(EXAMPLE), "--no-wait")
    assert again.exit_code == 0, str(again)
    assert "cluster/demo unchanged" in again.stdout, f"a repeated apply should change nothing:\n{again}"


def test_get_one_object_as_json_and_yaml(cli: Cli) -> None:
    _stored(cli)
    result = cli("get", "awscluster", "demo", "-o", "json")
    assert result.exit_code == 0, str(result)
    document = json.loads(result.stdout)
    assert document["kind"] == "AWSCluster", document
    assert document["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta2", document
    assert document["metadata"]["name"] == "demo", document
    assert document["metadata"]["namespace"] == "default", document
    assert document["spec"]["network"]["vpc"]["cidrBlock"] == "10.0.0.0/16", document

    as_yaml = cli("get", "awscluster", "demo", "-o", "yaml")
    assert as_yaml.exit_code == 0, str(as_yaml)
    assert yaml.safe_load(as_yaml.stdout) == document, "-o yaml and -o json of one object differ"


def test_get_a_list_as_json_is_a_kubectl_list(cli: Cli) -> None:
    _stored(cli)
    result = cli("get", "machines", "-o", "json")
    assert result.exit_code == 0, str(result)
    document = json.loads(result.stdout)
    assert {k: v for k, v in document.items() if k != "items"} == LIST_ENVELOPE, document
    assert list(document) == ["apiVersion", "items", "kind", "metadata"], (
        f"kubectl's key order: {list(document)}"
    )
    names = sorted(item["metadata"]["name"] for item in document["items"])
    assert names == ["demo-control-plane-0", "demo-worker-0", "demo-worker-1"], names
    assert {item["kind"] for item in document["items"]} == {"Machine"}

    as_yaml = cli("get", "machines", "-o", "yaml")
    assert as_yaml.exit_code == 0, str(as_yaml)
    assert yaml.safe_load(as_yaml.stdout) == document, "-o yaml and -o json of a list differ"

    empty = cli("get", "machines", "-n", "elsewhere", "-o", "json")
    assert empty.exit_code == 0, str(empty)
    assert json.loads(empty.stdout) == {**LIST_ENVELOPE, "items": []}, empty.stdout


def test_get_prints_a_table_by_default(cli: Cli) -> None:
    _stored(cli)
    result = cli("get", "awsmachines")
    assert result.exit_code == 0, str(result)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATE", "INSTANCE", "AGE"], result.stdout
    assert sorted(line.split()[0] for line in lines[1:]) == [
        "demo-control-plane-0",
        "demo-worker-0",
        "demo-worker-1",
    ], result.stdout

    wide = cli("get", "clusters", "-A")
    assert wide.exit_code == 0, str(wide)
    assert wide.stdout.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"], wide.stdout
    assert wide.stdout.splitlines()[1].split()[:2] == ["default", "demo"], wide.stdout


def test_get_of_an_unknown_kind_exits_2(cli: Cli) -> None:
    result = cli("get", "widgets")
    assert result.exit_code == 2, str(result)
    assert "widgets" in result.stderr, str(result)


def test_get_of_a_missing_name_exits_1(cli: Cli) -> None:
    _stored(cli)
    result = cli("get", "clusters", "nope")
    assert result.exit_code == 1, str(result)
    assert "not found" in result.stderr, str(result)


# -- invalid manifests -----------------------------------------------------------------------------------
def _invalid_cidr(documents: list[dict[str, Any]]) -> None:
    _doc(documents, "AWSCluster")["spec"]["network"]["vpc"]["cidrBlock"] = "10.0.0.0/33"


def _overlapping_subnets(documents: list[dict[str, Any]]) -> None:
    _doc(documents, "AWSCluster")["spec"]["network"]["subnets"][1]["cidrBlock"] = "10.0.0.0/18"


def _subnet_outside_vpc(documents: list[dict[str, Any]]) -> None:
    _doc(documents, "AWSCluster")["spec"]["network"]["subnets"][0]["cidrBlock"] = "10.1.0.0/20"


def _zone_of_another_region(documents: list[dict[str, Any]]) -> None:
    _doc(documents, "AWSCluster")["spec"]["network"]["subnets"][0]["availabilityZone"] = "us-west-2a"


def _missing_instance_type(documents: list[dict[str, Any]]) -> None:
    del _doc(documents, "AWSMachine", "demo-worker-0")["spec"]["instanceType"]


def _missing_cluster_name(documents: list[dict[str, Any]]) -> None:
    del _doc(documents, "Machine", "demo-worker-1")["spec"]["clusterName"]


INVALID: dict[str, tuple[Callable[[list[dict[str, Any]]], None], str]] = {
    "invalid-cidr": (
        _invalid_cidr,
        "document 2 (AWSCluster default/demo): spec.network.vpc.cidrBlock: not a valid CIDR",
    ),
    "overlapping-cidrs": (
        _overlapping_subnets,
        "document 2 (AWSCluster default/demo): spec.network.subnets[1].cidrBlock: 10.0.0.0/18 overlaps",
    ),
    "subnet-outside-vpc": (
        _subnet_outside_vpc,
        "document 2 (AWSCluster default/demo): spec.network.subnets[0].cidrBlock: 10.1.0.0/20 is outside "
        "the VPC block 10.0.0.0/16",
    ),
    "unknown-zone": (
        _zone_of_another_region,
        "document 2 (AWSCluster default/demo): spec.network.subnets[0].availabilityZone: unknown "
        "availability zone 'us-west-2a'",
    ),
    "missing-instance-type": (
        _missing_instance_type,
        "(AWSMachine default/demo-worker-0): spec.instanceType: Field required",
    ),
    "missing-cluster-name": (
        _missing_cluster_name,
        "(Machine default/demo-worker-1): spec.clusterName: Field required",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_manifest_exits_2_naming_file_document_and_field_and_changes_nothing(
    case: str, cli: Cli, tmp_path: Path, closed_endpoint: str
) -> None:
    _stored(cli)
    before = _snapshot(cli)
    documents = _documents()
    # Also change a valid document, which an all-or-nothing apply must not store either.
    _doc(documents, "Cluster")["metadata"].setdefault("labels", {})["changed"] = "yes"
    mutate, message = INVALID[case]
    mutate(documents)
    manifest = _write(tmp_path / f"{case}.yaml", documents)

    result = cli("apply", "-f", str(manifest), "--aws-endpoint", closed_endpoint, "--timeout", "1m")
    assert result.exit_code == 2, f"an invalid manifest ({case}) should exit 2:\n{result}"
    assert f"error: {manifest}: " in result.stderr, f"the error should name the file:\n{result}"
    assert message in result.stderr, f"the error should say {message!r}:\n{result}"
    assert result.seconds < 10, f"took {result.seconds:.1f}s with a closed endpoint: did it reach for AWS?"
    assert _snapshot(cli) == before, f"an invalid manifest ({case}) changed the store"


def test_invalid_manifest_on_a_fresh_state_creates_no_store(
    cli: Cli, state: Path, tmp_path: Path, closed_endpoint: str
) -> None:
    documents = _documents()
    _invalid_cidr(documents)
    result = cli(
        "apply", "-f", str(_write(tmp_path / "bad.yaml", documents)), "--aws-endpoint", closed_endpoint
    )
    assert result.exit_code == 2, str(result)
    assert not state.exists(), "an invalid apply created the store file"


# -- delete ------------------------------------------------------------------------------------------
def test_delete_of_a_missing_object_exits_1_unless_ignore_not_found(cli: Cli) -> None:
    result = cli("delete", "cluster", "nope")
    assert result.exit_code == 1, str(result)
    assert "not found" in result.stderr, str(result)
    ignored = cli("delete", "cluster", "nope", "--ignore-not-found")
    assert ignored.exit_code == 0, str(ignored)


def test_delete_kind_name_without_wait_deletes_an_object_without_finalizers(cli: Cli) -> None:
    _stored(cli)
    result = cli("delete", "secret", "demo-bootstrap")
    assert result.exit_code == 0, str(result)
    assert "secret/demo-bootstrap deleted" in result.stdout, str(result)
    assert cli("get", "secret", "demo-bootstrap").exit_code == 1


# -- capa local ----------------------------------------------------------------------------------------
def test_local_status_when_not_running_exits_3(cli: Cli) -> None:
    result = cli("local", "status")
    assert result.exit_code == 3, str(result)
    assert "not running" in result.stdout, str(result)


@pytest.fixture
def local_capa(tmp_path: Path) -> Iterator[Capa]:
    """capa with a temp --state whose embedded endpoint is stopped (and its process gone) afterwards."""
    capa = Capa(state=tmp_path / "local" / "state.db")
    capa.state.parent.mkdir()
    yield capa
    assert capa.home is not None
    record = capa.home / "local-aws" / "local-aws.json"
    pid = json.loads(record.read_text())["pid"] if record.exists() else None
    capa.run("local", "stop", timeout=60)
    if pid is not None and _alive(pid):  # only the server this test started
        os.kill(pid, 9)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (stopped but not reaped by its parent, which exited) is gone for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def test_local_start_status_stop_round_trip(local_capa: Capa) -> None:
    started = local_capa.ok("local", "start", timeout=90)
    assert "local AWS endpoint: running at http://127.0.0.1:" in started.stdout, str(started)

    status = local_capa.run("local", "status", "-o", "json")
    assert status.returncode == 0, str(status)
    endpoint = status.json()
    assert endpoint["running"] is True, endpoint
    assert endpoint["url"].startswith("http://127.0.0.1:"), f"the endpoint must bind loopback: {endpoint}"
    assert _alive(endpoint["pid"]), endpoint

    again = local_capa.ok("local", "start", timeout=90)
    assert f"(pid {endpoint['pid']})" in again.stdout, f"a second start should reuse the endpoint:\n{again}"

    stopped = local_capa.ok("local", "stop", timeout=60)
    assert f"local AWS endpoint: stopped (was {endpoint['url']}, pid {endpoint['pid']})" in stopped.stdout, (
        str(stopped)
    )
    assert wait_for(lambda: not _alive(endpoint["pid"]), timeout=15), "the endpoint process is still alive"

    after = local_capa.run("local", "status")
    assert after.returncode == 3, str(after)
    assert "not running" in after.stdout, str(after)
    assert "was not running" in local_capa.ok("local", "stop").stdout


def test_local_stop_from_another_directory_stops_the_users_one_endpoint(
    local_capa: Capa, tmp_path: Path
) -> None:
    """One endpoint per user, whatever the state file: before, the record lived next to the state, and a
    stop run with another --state said "was not running" and left the endpoint running."""
    local_capa.ok("local", "start", timeout=90)
    elsewhere = Capa(state=tmp_path / "elsewhere" / "state.db", home=local_capa.home)
    elsewhere.state.parent.mkdir()
    status = elsewhere.run("local", "status", "-o", "json")
    assert status.returncode == 0, f"another directory does not see the user's endpoint:\n{status}"
    endpoint = status.json()
    stopped = elsewhere.ok("local", "stop", timeout=60)
    assert f"local AWS endpoint: stopped (was {endpoint['url']}, pid {endpoint['pid']})" in stopped.stdout, (
        str(stopped)
    )
    assert wait_for(lambda: not _alive(endpoint["pid"]), timeout=15), "the endpoint process is still alive"
    after = local_capa.run("local", "status")
    assert after.returncode == 3, f"the endpoint still shows as running where it was started:\n{after}"


def test_local_stop_never_stops_a_process_it_did_not_start(tmp_path: Path) -> None:
    """A record whose pid is now another process (not a moto server): stop leaves it alone and does not
    say "stopped"; status says "not running". Before, stop sent that process SIGTERM."""
    capa = Capa(state=tmp_path / "state.db")
    assert capa.home is not None
    record = capa.home / "local-aws" / "local-aws.json"
    record.parent.mkdir(parents=True)
    with subprocess.Popen(["sleep", "300"]) as other:
        try:
            stale = {"url": "http://127.0.0.1:9", "port": 9, "pid": other.pid, "startedAt": 0, "id": "x"}
            record.write_text(json.dumps(stale))
            # Where an older capa kept the record (next to the state), so that one is tested too.
            (capa.state.parent / "local-aws.json").write_text(json.dumps(stale))
            stopped = capa.ok("local", "stop")
            assert "local AWS endpoint: was not running" in stopped.stdout, str(stopped)
            assert other.poll() is None, f"stop signalled a process that is not the endpoint:\n{stopped}"
            status = capa.run("local", "status")
            assert status.returncode == 3, str(status)
        finally:
            other.kill()
            other.wait()


# -- apply semantics -------------------------------------------------------------------------------------
def test_reapply_removes_fields_the_manifest_dropped_and_keeps_controller_set_fields(
    cli_moto: MotoServer, tmp_path: Path
) -> None:
    cli_moto.reset()
    capa = Capa(state=tmp_path / "state.db", endpoint=cli_moto.url)
    first = _documents()
    capa.ok("apply", "-f", str(_write(tmp_path / "first.yaml", first)), "--timeout", "2m", timeout=180)

    def current(kind: str) -> dict[str, Any]:
        items = capa.get(kind)
        return next(o for o in items if o["metadata"]["name"] == "demo")

    awscluster, cluster = current("awsclusters"), current("clusters")
    endpoint = awscluster["spec"].get("controlPlaneEndpoint")
    assert endpoint, f"the controller did not set spec.controlPlaneEndpoint: {awscluster['spec']}"
    assert endpoint.get("host"), f"the controller set an endpoint without a host: {endpoint}"
    assert awscluster["spec"].get("additionalTags") == {"team": "platform"}, awscluster["spec"]
    assert cluster["spec"].get("clusterNetwork"), cluster["spec"]
    assert cluster["spec"].get("controlPlaneEndpoint") == endpoint, cluster["spec"]

    second = copy.deepcopy(first)
    del _doc(second, "AWSCluster")["spec"]["additionalTags"]
    del _doc(second, "Cluster")["spec"]["clusterNetwork"]
    applied = capa.ok("apply", "-f", str(_write(tmp_path / "second.yaml", second)), "--no-wait")
    assert "awscluster/demo configured" in applied.stdout, str(applied)
    assert "cluster/demo configured" in applied.stdout, str(applied)
    assert "awsmachine/demo-worker-0 unchanged" in applied.stdout, str(applied)

    awscluster_after, cluster_after = current("awsclusters"), current("clusters")
    assert not awscluster_after["spec"].get("additionalTags"), (
        f"spec.additionalTags, dropped from the manifest, is still set: {awscluster_after['spec']}"
    )
    assert not cluster_after["spec"].get("clusterNetwork"), (
        f"spec.clusterNetwork, dropped from the manifest, is still set: {cluster_after['spec']}"
    )
    assert awscluster_after["spec"].get("controlPlaneEndpoint") == endpoint, (
        f"the controller-set spec.controlPlaneEndpoint was lost: {awscluster_after['spec']}"
    )
    assert cluster_after["spec"].get("controlPlaneEndpoint") == endpoint, (
        f"the Cluster's controller-set spec.controlPlaneEndpoint was lost: {cluster_after['spec']}"
    )
    for before, after in ((awscluster, awscluster_after), (cluster, cluster_after)):
        name = f"{after['kind']} {after['metadata']['name']}"
        assert after["status"] == before["status"], f"{name}: apply changed the status"
        for field in ("finalizers", "ownerReferences", "uid", "creationTimestamp"):
            assert after["metadata"].get(field) == before["metadata"].get(field), f"{name}: {field} changed"
        assert after["metadata"].get("labels") == before["metadata"].get("labels"), (
            f"{name}: labels set by controllers were lost: {after['metadata'].get('labels')}"
        )
