"""Kinds defined by a CustomResourceDefinition a client stores: served by capa serve as by the API server.

Each test here failed before capa serve served CRD-defined kinds (the CRD was stored, its kind 404).
"""

from __future__ import annotations

import copy
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.registry import REGISTRY
from capa_py.apiserver import start_in_thread
from capa_py.apiserver.crd_kinds import CrdKinds
from capa_py.manifests.crds import crds
from capa_py.store import SQLiteStore
from capa_py.store.errors import Conflict
from tests.apiserver.apiserver_support import GROUP, VERSION, Server, aws_cluster
from tests.apiserver.crd_support import (
    KOPF_CRDS,
    TABLE,
    Api,
    Kubectl,
    capa_kubeconfig,
    find_kubectl,
    widget,
    widget_crd,
)

W = "widgets.example.com"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


@pytest.fixture
def api(server: Server) -> Api:
    return Api(server.url, server.context)


@pytest.fixture
def widgets(api: Api) -> Api:
    """The server, with the Widget CRD stored."""
    code, body = api("POST", CRDS, widget_crd("example.com"))
    assert code == 201, body
    return api


def _causes(body: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(c["field"], c["reason"], c["message"]) for c in body["details"]["causes"]}


def test_a_stored_crd_is_served_and_established_at_once(widgets: Api) -> None:
    code, resources = widgets("GET", "/apis/example.com/v1")
    assert code == 200
    assert [(r["name"], r["kind"], r["namespaced"]) for r in resources["resources"]] == [
        ("widgets", "Widget", True),
        ("widgets/status", "Widget", True),
    ]
    entry = resources["resources"][0]
    assert (entry["singularName"], entry["shortNames"], entry["categories"]) == (
        "widget",
        ["wd"],
        ["all-widgets"],
    )
    assert {"create", "get", "list", "watch", "patch", "update", "delete"} <= set(entry["verbs"])
    code, group = widgets("GET", "/apis/example.com")
    assert [v["version"] for v in group["versions"]] == ["v2", "v1"]
    assert group["preferredVersion"]["version"] == "v2"
    _, groups = widgets("GET", "/apis")
    assert "example.com" in {g["name"] for g in groups["groups"]}

    _, crd = widgets("GET", f"{CRDS}/{W}")
    conditions = {c["type"]: (c["status"], c["reason"]) for c in crd["status"]["conditions"]}
    assert conditions == {
        "NamesAccepted": ("True", "NoConflicts"),
        "Established": ("True", "InitialNamesAccepted"),
    }
    assert crd["status"]["acceptedNames"] == {
        "plural": "widgets",
        "singular": "widget",
        "kind": "Widget",
        "listKind": "WidgetList",
        "shortNames": ["wd"],
        "categories": ["all-widgets"],
    }
    assert crd["status"]["storedVersions"] == ["v1"]


def test_objects_are_pruned_defaulted_and_validated_against_the_schema(widgets: Api) -> None:
    bad = widget("example.com", "bad", color="purple", size=11, owner="ABCDEFGHIJ", tags=["a", "b", "c"])
    bad["spec"].update(port=1.5, labels={"x": 3}, parts=[{"weight": 2}])
    code, refused = widgets("POST", WIDGETS, bad)
    assert (code, refused["reason"]) == (422, "Invalid")
    assert _causes(refused) == {
        (
            "spec.color",
            "FieldValueNotSupported",
            'Unsupported value: "purple": supported values: "red", "green", "blue"',
        ),
        (
            "spec.size",
            "FieldValueInvalid",
            "Invalid value: 11: spec.size in body should be less than or equal to 10",
        ),
        ("spec.owner", "FieldValueTooLong", "Too long: may not be more than 8 bytes"),
        ("spec.tags", "FieldValueTooMany", "Too many: 3: must have at most 2 items"),
        (
            "spec.port",
            "FieldValueTypeInvalid",
            'Invalid value: "number": spec.port in body must be of type integer,string: "number"',
        ),
        (
            "spec.labels.x",
            "FieldValueTypeInvalid",
            'Invalid value: "integer": spec.labels.x in body must be of type string: "integer"',
        ),
        ("spec.parts[0].name", "FieldValueRequired", "Required value"),
    }
    assert refused["message"].startswith('Widget.example.com "bad" is invalid: [')
    code, missing = widgets("POST", WIDGETS, {**widget("example.com", "none"), "spec": {"owner": "ab1"}})
    assert code == 422
    assert _causes(missing) == {
        ("spec.color", "FieldValueRequired", "Required value"),
        (
            "spec.owner",
            "FieldValueInvalid",
            "Invalid value: \"ab1\": spec.owner in body should match '^[a-z]+$'",
        ),
    }

    good = widget(
        "example.com", "w1", color="red", unknown=1, free={"a": {"b": 1}}, port="http", parts=[{"name": "p"}]
    )
    good["extra"] = "top"
    good["metadata"]["junk"] = True
    good["spec"]["labels"] = None
    code, created = widgets("POST", WIDGETS, good)
    assert code == 201, created
    assert "extra" not in created
    assert "junk" not in created["metadata"]
    assert created["spec"] == {
        "color": "red",
        "size": 3,
        "free": {"a": {"b": 1}},
        "port": "http",
        "parts": [{"name": "p", "weight": 1}],
    }
    assert created["metadata"]["generation"] == 1


def test_the_status_subresource_splits_what_each_path_writes(widgets: Api) -> None:
    body = widget("example.com", "w1", color="red")
    body["status"] = {"ready": True}
    _, created = widgets("POST", WIDGETS, body)
    assert "status" not in created  # a create never sets status
    merge = "application/merge-patch+json"
    code, written = widgets(
        "PATCH", f"{WIDGETS}/w1/status", {"status": {"junk": 1}, "spec": {"color": "blue"}}, merge
    )
    assert code == 200, written
    assert (written["spec"]["color"], written["status"], written["metadata"]["generation"]) == (
        "red",
        {"ready": False},
        1,
    )
    code, written = widgets(
        "PATCH", f"{WIDGETS}/w1", {"status": {"ready": True}, "spec": {"color": "green"}}, merge
    )
    assert code == 200, written
    assert (written["spec"]["color"], written["status"], written["metadata"]["generation"]) == (
        "green",
        {"ready": False},
        2,
    )
    written["spec"]["color"] = "purple"
    code, refused = widgets("PUT", f"{WIDGETS}/w1", written)
    assert code == 422
    assert refused["details"]["causes"][0]["field"] == "spec.color"


def test_every_served_version_serves_the_same_objects_by_apiversion(widgets: Api, server: Server) -> None:
    v2 = "/apis/example.com/v2/namespaces/default/widgets"
    code, created = widgets(
        "POST", v2, {**widget("example.com", "w2", color="red"), "apiVersion": "example.com/v2"}
    )
    assert code == 201, created
    # v2 has no defaults of its own: the object gets the storage version's (v1) as it is read back.
    assert (created["apiVersion"], created["spec"]) == ("example.com/v2", {"color": "red", "size": 3})
    _, through_v1 = widgets("GET", f"{WIDGETS}/w2")
    assert (through_v1["apiVersion"], through_v1["spec"]) == ("example.com/v1", created["spec"])
    _, listed = widgets("GET", v2)
    assert listed["apiVersion"] == "example.com/v2"
    assert [i["apiVersion"] for i in listed["items"]] == ["example.com/v2"]
    request = urllib.request.Request(server.url + v2 + "?watch=1&timeoutSeconds=1")
    with urllib.request.urlopen(request, context=server.context, timeout=30) as response:
        first = json.loads(response.readline())
    assert (first["type"], first["object"]["apiVersion"]) == ("ADDED", "example.com/v2")


def test_tables_have_the_crds_printer_columns(widgets: Api) -> None:
    widgets("POST", WIDGETS, widget("example.com", "w1", color="red", owner="alice"))
    code, table = widgets("GET", WIDGETS, accept=TABLE)
    assert code == 200
    assert [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]] == [
        ("Name", "string", 0),
        ("Color", "string", 0),
        ("Size", "integer", 0),
        ("Ready", "boolean", 0),
        ("Owner", "string", 1),
        ("Created", "date", 0),
    ]
    cells = table["rows"][0]["cells"]
    assert cells[:5] == ["w1", "red", 3, None, "alice"]
    assert cells[5].endswith("s")
    code, table = widgets("GET", "/apis/example.com/v2/namespaces/default/widgets/w1", accept=TABLE)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["rows"][0]["cells"][0] == "w1"


def test_deleting_the_crd_deletes_its_objects_then_stops_serving(widgets: Api) -> None:
    kept = widget("example.com", "kept", color="red")
    kept["metadata"]["finalizers"] = ["example.com/hold"]
    widgets("POST", WIDGETS, kept)
    widgets("POST", WIDGETS, widget("example.com", "plain", color="red"))
    code, marked = widgets("DELETE", f"{CRDS}/{W}")
    assert code == 200
    assert marked["metadata"]["deletionTimestamp"]
    assert "customresourcecleanup.apiextensions.k8s.io" in marked["metadata"]["finalizers"]
    assert {c["type"]: c["reason"] for c in marked["status"]["conditions"]}["Terminating"] in (
        "InstanceDeletionPending",
        "InstanceDeletionInProgress",
    )
    code, forbidden = widgets("POST", WIDGETS, widget("example.com", "late", color="red"))
    assert (code, forbidden["reason"]) == (403, "Forbidden")
    widgets.until(lambda: widgets("GET", f"{WIDGETS}/plain")[0] == 404, "the plain widget deleted")
    _, held = widgets("GET", f"{WIDGETS}/kept")
    assert held["metadata"]["deletionTimestamp"]
    assert widgets("GET", f"{CRDS}/{W}")[0] == 200  # waits for the widget's finalizer
    code, _ = widgets(
        "PATCH", f"{WIDGETS}/kept", {"metadata": {"finalizers": None}}, "application/merge-patch+json"
    )
    assert code == 200
    widgets.until(lambda: widgets("GET", f"{CRDS}/{W}")[0] == 404, "the CRD gone")
    assert widgets("GET", WIDGETS)[0] == 404
    assert widgets("GET", "/apis/example.com/v1")[0] == 404


def test_every_server_on_one_store_serves_a_crd_another_stored(tmp_path: Path) -> None:
    stores = [SQLiteStore(tmp_path / "shared.db", poll_interval=0.02) for _ in range(2)]
    servers = [start_in_thread(store) for store in stores]
    try:
        first, second = (
            Api(servers[0].url, servers[0].client_context()),
            Api(servers[1].url, servers[1].client_context()),
        )
        assert second("GET", "/apis/example.com/v1")[0] == 404
        assert first("POST", CRDS, widget_crd("example.com"))[0] == 201
        second.until(lambda: second("GET", "/apis/example.com/v1")[0] == 200, "served by the other server")
        code, created = second("POST", WIDGETS, widget("example.com", "w1", color="red"))
        assert (code, created["spec"]["size"]) == (201, 3)
        assert first("GET", f"{WIDGETS}/w1")[0] == 200
        assert first("DELETE", f"{CRDS}/{W}")[0] == 200
        second.until(lambda: second("GET", "/apis/example.com/v1")[0] == 404, "no longer served")
    finally:
        for running in servers:
            running.stop()
        for store in stores:
            store.close()


def test_capa_pys_own_crds_leave_its_kinds_to_their_models(api: Api) -> None:
    for crd in crds():
        code, body = api("POST", CRDS, crd)
        assert code == 201, body
    name = f"awsclusters.{GROUP}"
    _, crd = api("GET", f"{CRDS}/{name}")
    assert {c["type"] for c in crd["status"]["conditions"]} == {"NamesAccepted", "Established"}
    _, resources = api("GET", f"/apis/{GROUP}/{VERSION}")
    assert [r["name"] for r in resources["resources"]].count("awsclusters") == 1
    path = f"/apis/{GROUP}/{VERSION}/namespaces/default/awsclusters"
    assert api("POST", path, aws_cluster())[0] == 201
    wrong = aws_cluster("wrong")
    wrong["spec"]["region"] = "mars-1"
    code, refused = api("POST", path, wrong)
    assert code == 422
    assert refused["details"]["causes"][0]["field"].startswith("spec.region")
    assert api("DELETE", f"{CRDS}/{name}")[0] == 200
    assert api("GET", f"{CRDS}/{name}")[0] == 404
    assert api("GET", f"{path}/demo")[0] == 200  # the model still serves the kind, its objects stay


def test_kubectl_uses_kopfs_crds(server: Server, tmp_path: Path) -> None:
    binary = find_kubectl()
    if binary is None:
        pytest.skip("kubectl is not installed")
    kubectl = Kubectl(binary, capa_kubeconfig(server, tmp_path / "kubeconfig"), tmp_path)
    kubectl.apply(copy.deepcopy(KOPF_CRDS))
    waited = kubectl("wait", "--for", "condition=established", "crd/kopfpeerings.kopf.dev", "--timeout=30s")
    assert waited.returncode == 0, waited.stderr
    assert kubectl("get", "kopfpeerings").stderr.strip() == "No resources found in default namespace."
    assert kubectl("get", "clusterkopfpeerings").stderr.strip() == "No resources found"
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": "example", "namespace": "default"},
        "status": {"operator-1": {"priority": 0, "lastseen": "2024-01-01T00:00:00", "lifetime": 60}},
    }
    kubectl.apply([peering])
    table = kubectl("get", "kopfpeerings").stdout.splitlines()
    assert table[0].split() == ["NAME", "AGE"]
    assert table[1].split()[0] == "example"
    status = kubectl("get", "kopfpeering", "example", "-o", "jsonpath={.status}").stdout
    assert json.loads(status) == peering["status"]


class _ConflictingOnce(SQLiteStore):
    """A store whose next CRD update fails with Conflict, as when a refresh writes the CRD's status between
    the read and the write of a DELETE."""

    conflicts = 0

    def update(self, obj: Any) -> Any:
        if isinstance(obj, CustomResourceDefinition) and self.conflicts:
            self.conflicts -= 1
            raise Conflict("the object has been modified")
        return super().update(obj)


def test_deleting_a_crd_whose_status_changed_meanwhile_is_retried_not_refused(tmp_path: Path) -> None:
    """Failed before under load: ``kubectl delete crd`` got 409 when the server's own refresh updated the
    CRD's status between the DELETE's read and its finalizer write."""
    store = _ConflictingOnce(tmp_path / "s.db")
    try:
        store.create(CustomResourceDefinition.from_dict(widget_crd("example.com")))
        kinds = CrdKinds(store, REGISTRY)
        kinds.refresh()
        store.conflicts = 1
        marked = kinds.delete_definition(W, None)
        assert marked is not None
        assert marked["metadata"]["deletionTimestamp"]
        assert store.conflicts == 0, "the conflict happened and was retried"
    finally:
        store.close()


class _CleanedUpAtOnce(SQLiteStore):
    """A store on which another server's CRD controller finishes a CRD's deletion as soon as the CRD is
    marked: its refresh sees the deletionTimestamp, deletes the (no) objects and drops the finalizer."""

    other: CrdKinds | None = None

    def delete(self, kind: Any, name: str, namespace: str | None = None, *args: Any, **kwargs: Any) -> Any:
        marked = super().delete(kind, name, namespace, *args, **kwargs)
        if kind is CustomResourceDefinition and self.other is not None:
            self.other.refresh()
        return marked


def test_deleting_a_crd_another_server_cleans_up_at_once_answers_the_marked_crd(tmp_path: Path) -> None:
    """Failed before (the flake of test_every_server_on_one_store_serves_a_crd_another_stored): the DELETE
    answered 404 when the other server's refresh cleaned up and removed the CRD between the DELETE's mark and
    its Terminating condition. kube-apiserver answers 200 with the marked CRD."""
    store = _CleanedUpAtOnce(tmp_path / "s.db")
    try:
        store.create(CustomResourceDefinition.from_dict(widget_crd("example.com")))
        mine, other = CrdKinds(store, REGISTRY), CrdKinds(store, REGISTRY)
        mine.refresh()
        other.refresh()
        store.other = other
        marked = mine.delete_definition(W, None)
        assert marked is not None
        assert marked["metadata"]["deletionTimestamp"]
        terminating = [c for c in marked["status"]["conditions"] if c["type"] == "Terminating"]
        assert [(c["status"], c["reason"]) for c in terminating] == [("True", "InstanceDeletionPending")]
        assert [c.metadata.name for c in store.list(CustomResourceDefinition)] == [], (
            "the other server removed it"
        )
    finally:
        store.close()
