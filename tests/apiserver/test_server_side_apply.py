"""Server-side apply and managedFields on ``capa serve``, judged by the real kube-apiserver: every test sends
the same requests to both and compares what a client sees (status codes, Status bodies, managedFields
without their times, the fields applied)."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from capa_py.api.aws import AWSCluster
from tests.apiserver.apiserver_support import Server
from tests.apiserver.twin import Twin, crd_installed, managed_fields, seen, twin_namespace
from tests.peers.cluster import PeerCluster

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
DEPLOYMENTS = "/apis/apps/v1/namespaces/{ns}/deployments"
AWS_API = AWSCluster.API_VERSION
AWSCLUSTERS = f"/apis/{AWS_API}/namespaces/{{ns}}/awsclusters"
KUBECTL_UA = "kubectl/v1.32.4 (linux/amd64) kubernetes/4cb5f07"


@pytest.fixture
def twin(server: Server, peer_cluster: PeerCluster) -> Iterator[Twin]:
    with twin_namespace(server, peer_cluster, f"ssa-{secrets.token_hex(4)}") as pair:
        yield pair


def same(
    twin: Twin,
    step: str,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    user_agent: str | None = None,
    fields: tuple[str, ...] = (),
) -> Any:
    """Send one request to both servers and require the same answer; capa serve's body."""
    real, capa = twin.both(method, path, body, content_type, user_agent)
    assert seen(capa, *fields) == seen(real, *fields), step
    return capa[1]


def configmap(name: str, data: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **metadata}}
    if data is not None:
        doc["data"] = data
    return doc


def test_applies_share_conflict_force_and_remove_fields_as_on_the_real_server(twin: Twin) -> None:
    cm = CONFIGMAPS + "/demo"
    fields = ("data",)
    created = {"metadata": {"name": "demo", "labels": {"l": "1"}}, "data": {"a": "1", "b": "2"}}
    same(twin, "create by kubectl", "POST", CONFIGMAPS, created, user_agent=KUBECTL_UA, fields=fields)
    shared = same(
        twin,
        "same values shared",
        "PATCH",
        cm + "?fieldManager=m1",
        configmap("demo", {"a": "1", "b": "2", "c": "3"}),
        APPLY,
        fields=fields,
    )
    assert [e["manager"] for e in shared["metadata"]["managedFields"]] == ["m1", "kubectl"]

    other = configmap("demo", {"a": "x", "b": "y", "c": "z"}, labels={"l": "9"})
    refused = same(twin, "conflicts with two managers", "PATCH", cm + "?fieldManager=m2", other, APPLY)
    assert refused["reason"] == "Conflict"
    assert len(refused["details"]["causes"]) == 6

    forced = configmap("demo", {"a": "x", "c": "z"}, labels={"l": "9"})
    same(twin, "force", "PATCH", cm + "?fieldManager=m2&force=true", forced, APPLY, fields=fields)
    same(
        twin,
        "fields lost to force",
        "PATCH",
        cm + "?fieldManager=m1",
        configmap("demo", {"b": "2"}),
        APPLY,
        fields=fields,
    )
    dropped = same(
        twin,
        "fields no longer applied",
        "PATCH",
        cm + "?fieldManager=m2",
        configmap("demo", {"a": "x"}),
        APPLY,
        fields=fields,
    )
    assert dropped["data"] == {"a": "x", "b": "2"}, "c went: nobody else owned it"
    assert "labels" not in dropped["metadata"], "nor the label"
    same(
        twin,
        "a merge patch by the Python client",
        "PATCH",
        cm,
        {"data": {"a": "3", "q": "1"}},
        MERGE,
        user_agent="OpenAPI-Generator/29.0.0/python",
        fields=fields,
    )
    conflict = same(
        twin, "one conflict", "PATCH", cm + "?fieldManager=m2", configmap("demo", {"a": "4"}), APPLY
    )
    assert (
        conflict["message"]
        == 'Apply failed with 1 conflict: conflict with "OpenAPI-Generator" using v1: .data.a'
    )


def test_apply_creates_validates_and_dry_runs_as_on_the_real_server(twin: Twin) -> None:
    cm = CONFIGMAPS + "/made"
    same(twin, "no fieldManager", "PATCH", cm, configmap("made", {"a": "1"}), APPLY)
    same(
        twin,
        "dry run create",
        "PATCH",
        cm + "?fieldManager=m1&dryRun=All",
        configmap("made", {"a": "1"}),
        APPLY,
        fields=("data",),
    )
    same(twin, "nothing was created", "GET", cm)
    body = yaml.safe_dump(configmap("made", {"a": "1"})).encode()
    created = same(twin, "create from YAML", "PATCH", cm + "?fieldManager=m1", body, APPLY, fields=("data",))
    assert created["data"] == {"a": "1"}
    unchanged = same(twin, "re-apply", "PATCH", cm + "?fieldManager=m1", body, APPLY, fields=("data",))
    assert unchanged["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"], "no write"
    same(
        twin,
        "dry run change",
        "PATCH",
        cm + "?fieldManager=m1&dryRun=All",
        configmap("made", {"a": "2"}),
        APPLY,
        fields=("data",),
    )
    same(twin, "dry run kept nothing", "GET", cm, fields=("data",))
    same(
        twin,
        "managedFields in the configuration",
        "PATCH",
        cm + "?fieldManager=m1",
        configmap("made", managedFields=[{"manager": "x"}]),
        APPLY,
    )
    same(
        twin,
        "another kind",
        "PATCH",
        cm + "?fieldManager=m1",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "made"}},
        APPLY,
    )
    same(twin, "another name", "PATCH", cm + "?fieldManager=m1", configmap("other"), APPLY)
    same(
        twin,
        "a stale resourceVersion",
        "PATCH",
        cm + "?fieldManager=m1",
        configmap("made", {"a": "1"}, resourceVersion="1"),
        APPLY,
    )
    same(twin, "force on a merge patch", "PATCH", cm + "?fieldManager=m1&force=true", {"data": {}}, MERGE)
    dated = (
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: made\ndata:\n  a: '1'\n  since: 2020-01-01\n"
    )
    read = same(
        twin,
        "a date in YAML stays a string",
        "PATCH",
        cm + "?fieldManager=m1",
        dated,
        APPLY,
        fields=("data",),
    )
    assert read["data"]["since"] == "2020-01-01"


def test_managed_fields_written_by_clients_replace_or_clear_them_as_on_the_real_server(twin: Twin) -> None:
    cm = CONFIGMAPS + "/mf"
    same(twin, "create", "POST", CONFIGMAPS + "?fieldManager=maker", configmap("mf", {"a": "1", "b": "2"}))
    given = [
        {
            "manager": "given",
            "operation": "Update",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:b": {}}},
        }
    ]
    same(
        twin,
        "set by a merge patch",
        "PATCH",
        cm + "?fieldManager=u",
        {"metadata": {"managedFields": given}, "data": {"c": "3"}},
        MERGE,
    )
    invalid = [{**given[0], "operation": "Bogus"}]
    same(
        twin,
        "invalid ones are ignored",
        "PATCH",
        cm + "?fieldManager=u",
        {"metadata": {"managedFields": invalid}, "data": {"d": "4"}},
        MERGE,
    )
    same(
        twin,
        "cleared by a JSON patch",
        "PATCH",
        cm + "?fieldManager=j",
        [{"op": "replace", "path": "/metadata/managedFields", "value": []}],
        JSON_PATCH,
    )
    cleared = same(
        twin, "untracked after clearing", "PATCH", cm + "?fieldManager=u", {"data": {"e": "5"}}, MERGE
    )
    assert "managedFields" not in cleared["metadata"]
    same(
        twin,
        "the first apply conflicts with before-first-apply",
        "PATCH",
        cm + "?fieldManager=m1",
        configmap("mf", {"a": "9"}),
        APPLY,
    )
    same(
        twin,
        "and takes the field when forced",
        "PATCH",
        cm + "?fieldManager=m1&force=true",
        configmap("mf", {"a": "9"}),
        APPLY,
        fields=("data",),
    )


def test_at_most_ten_update_managers_are_kept_as_on_the_real_server(twin: Twin) -> None:
    same(twin, "create", "POST", CONFIGMAPS + "?fieldManager=m00", configmap("many", {"k00": "0"}))
    for i in range(1, 12):
        step = f"update by m{i:02}"
        same(
            twin,
            step,
            "PATCH",
            CONFIGMAPS + f"/many?fieldManager=m{i:02}",
            {"data": {f"k{i:02}": "x"}},
            MERGE,
        )
    real = twin.real("GET", CONFIGMAPS + "/many")[1]
    assert "ancient-changes" in [e["manager"] for e in real["metadata"]["managedFields"]]


def deployment(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            **spec,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": list(containers)}},
        },
    }


def test_containers_env_and_ports_merge_by_key_as_on_the_real_server(twin: Twin) -> None:
    web = DEPLOYMENTS + "/web"
    first = deployment(
        {
            "name": "c",
            "image": "nginx",
            "env": [{"name": "A", "value": "1"}],
            "ports": [{"containerPort": 80}],
        },
        replicas=1,
    )
    same(twin, "create", "PATCH", web + "?fieldManager=m1", first, APPLY)
    changed = copy.deepcopy(first)
    changed["spec"]["template"]["spec"]["containers"][0].update(
        image="httpd", env=[{"name": "A", "value": "2"}]
    )
    refused = same(twin, "conflicts inside a container", "PATCH", web + "?fieldManager=m2", changed, APPLY)
    assert refused["message"].endswith('.spec.template.spec.containers[name="c"].env[name="A"].value')
    sidecar = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "side", "image": "busybox"},
                        {"name": "c", "env": [{"name": "B", "value": "x"}]},
                    ]
                }
            }
        },
    }
    added = same(
        twin,
        "another manager adds a container and a variable",
        "PATCH",
        web + "?fieldManager=m2",
        sidecar,
        APPLY,
    )
    names = [c["name"] for c in added["spec"]["template"]["spec"]["containers"]]
    assert names == ["side", "c"]
    without_env = copy.deepcopy(first)
    del without_env["spec"]["template"]["spec"]["containers"][0]["env"]
    same(twin, "dropping a variable", "PATCH", web + "?fieldManager=m1", without_env, APPLY)
    edit = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}
    same(twin, "kubectl edit", "PATCH", web + "?fieldManager=kubectl-edit", edit, STRATEGIC)
    same(twin, "a conflict with an update manager", "PATCH", web + "?fieldManager=m1", without_env, APPLY)
    no_containers = copy.deepcopy(without_env)
    no_containers["spec"]["template"]["spec"]["containers"] = []
    same(
        twin,
        "forced, dropping its container",
        "PATCH",
        web + "?fieldManager=m1&force=true",
        no_containers,
        APPLY,
    )


def _without_status_node(reply: tuple[int, Any]) -> tuple[int, Any]:
    """capa-py's models give a new object a default status (``ready: false``) where the real server has
    none, so the first status write adds ``.status`` itself there only: that mark is left out."""
    code, body = seen(reply)
    if isinstance(body, dict) and "managedFields" in body:
        for entry in body["managedFields"]:
            entry.get("fieldsV1", {}).get("f:status", {}).pop(".", None)
        body["managedFields"].sort(key=lambda e: json.dumps(e, sort_keys=True))
    return code, body


@pytest.fixture
def aws_crd(peer_cluster: PeerCluster) -> Iterator[None]:
    with crd_installed(peer_cluster, AWSCluster):
        yield


def test_status_writes_are_entries_of_the_status_subresource_as_on_the_real_server(
    twin: Twin, aws_crd: None
) -> None:
    cluster = {
        "apiVersion": AWS_API,
        "kind": "AWSCluster",
        "metadata": {"name": "c1", "labels": {"x": "1"}},
        "spec": {
            "region": "us-east-1",
            "additionalTags": {"team": "a"},
            "network": {
                "vpc": {"cidrBlock": "10.0.0.0/16"},
                "subnets": [{"availabilityZone": "us-east-1a", "cidrBlock": "10.0.0.0/20"}],
            },
        },
        "status": {"ready": True},
    }
    path = AWSCLUSTERS + "/c1"
    same(twin, "create applying status too", "PATCH", path + "?fieldManager=m1", cluster, APPLY)
    written = {"status": {"ready": True, "failureMessage": "x"}, "metadata": {"labels": {"y": "2"}}}
    steps: list[tuple[str, str, str, Any, str]] = [
        ("a status merge patch", "PATCH", path + "/status?fieldManager=ctrl", written, MERGE),
        (
            "a status write cannot clear managedFields",
            "PATCH",
            path + "/status?fieldManager=ctrl",
            {"metadata": {"managedFields": []}, "status": {"ready": False}},
            MERGE,
        ),
        (
            "a status apply conflicts",
            "PATCH",
            path + "/status?fieldManager=m2",
            {
                "apiVersion": AWS_API,
                "kind": "AWSCluster",
                "metadata": {"name": "c1"},
                "status": {"failureMessage": "y"},
            },
            APPLY,
        ),
        (
            "forced",
            "PATCH",
            path + "/status?fieldManager=m2&force=true",
            {
                "apiVersion": AWS_API,
                "kind": "AWSCluster",
                "metadata": {"name": "c1"},
                "status": {"failureMessage": "y"},
            },
            APPLY,
        ),
        (
            "the main resource drops a field",
            "PATCH",
            path + "?fieldManager=m1",
            {
                **cluster,
                "metadata": {"name": "c1", "labels": {"z": "1"}},
                "spec": {k: v for k, v in cluster["spec"].items() if k != "additionalTags"},
            },
            APPLY,
        ),
        ("a merge patch re-adds it", "PATCH", path, {"spec": {"additionalTags": {"o": "1"}}}, MERGE),
        (
            "an apply conflicts with it",
            "PATCH",
            path + "?fieldManager=m1",
            {**cluster, "spec": {**cluster["spec"], "additionalTags": {"o": "2"}}},
            APPLY,
        ),
        (
            "status of a missing object",
            "PATCH",
            AWSCLUSTERS + "/nope/status?fieldManager=m1",
            {**cluster, "metadata": {"name": "nope"}},
            APPLY,
        ),
    ]
    for step, method, url, body, content_type in steps:
        real, capa = twin.both(method, url, body, content_type, user_agent="OpenAPI-Generator/29.0.0/python")
        assert _without_status_node(capa) == _without_status_node(real), step


def test_the_python_client_is_recorded_by_its_user_agent(twin: Twin, peer_cluster: PeerCluster) -> None:
    body = {"metadata": {"name": "py"}, "data": {"a": "1"}}
    answers = []
    real_api = config.new_client_from_config(config_file=str(peer_cluster.admin_kubeconfig))
    with real_api, twin.capa_server.api_client() as capa_api:
        for api in (real_api, capa_api):
            core = client.CoreV1Api(api)
            core.create_namespaced_config_map(twin.namespace, body)
            core.patch_namespaced_config_map("py", twin.namespace, {"data": {"b": "2"}})
            read = core.read_namespaced_config_map("py", twin.namespace)
            answers.append(managed_fields(api.sanitize_for_serialization(read)))
    real, capa = answers
    assert capa == real
    assert [e["manager"] for e in real] == ["OpenAPI-Generator"]


def test_reapplying_a_secret_from_string_data_writes_nothing_as_on_the_real_server(twin: Twin) -> None:
    """The stored Secret holds ``data`` where the configuration says ``stringData``: the same apply again
    changes nothing, its entry keeps its time (capa serve wrote it again with a new time before it compared
    the stored form)."""
    applied = {"f:stringData": {"f:value": {}}}
    entry = {
        "manager": "kubectl",
        "operation": "Apply",
        "apiVersion": "v1",
        "time": "2020-01-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": applied,
    }
    created = {"metadata": {"name": "s", "managedFields": [entry]}, "data": {"value": "eA=="}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"value": "x"}}
    made = twin.both("POST", "/api/v1/namespaces/{ns}/secrets", created)
    again = twin.both("PATCH", "/api/v1/namespaces/{ns}/secrets/s?fieldManager=kubectl", secret, APPLY)
    for (made_code, before), (code, after) in zip(made, again, strict=True):
        assert (made_code, code) == (201, 200), after
        assert after["data"] == {"value": "eA=="}
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], "not written"
        kubectl = [e for e in after["metadata"]["managedFields"] if e["manager"] == "kubectl"]
        assert kubectl == [entry], "the entry keeps its time"
