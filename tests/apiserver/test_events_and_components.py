"""Events and a provider's components file over ``capa serve``, with the official client and raw HTTP:
the field selectors ``kubectl describe`` sends for Events, the Events table ``kubectl get events`` prints,
and the RBAC and workload kinds of ``capa manifests all`` stored exactly as written."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from capa_py.api.aws import AWSCluster
from capa_py.manifests import documents
from capa_py.manifests.crds import crds
from capa_py.runtime.events import EventRecorder
from tests.apiserver.apiserver_support import Server, aws_cluster

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _record(server: Server) -> tuple[AWSCluster, AWSCluster]:
    demo = server.store.create(AWSCluster.model_validate(aws_cluster("demo")))
    other = server.store.create(AWSCluster.model_validate(aws_cluster("other")))
    recorder = EventRecorder(server.store, instance="host-1")
    recorder.normal(demo, "SuccessfulCreateVPC", "Created new managed VPC vpc-1")
    recorder.warning(demo, "FailedReconcileSubnets", "InvalidSubnet.Conflict: overlaps")
    recorder.warning(demo, "FailedReconcileSubnets", "InvalidSubnet.Conflict: overlaps")
    recorder.normal(other, "SuccessfulCreateVPC", "Created new managed VPC vpc-2")
    return demo, other


def test_event_field_selectors_are_the_ones_kubectl_describe_sends(
    server: Server, api: client.ApiClient
) -> None:
    demo, other = _record(server)
    core = client.CoreV1Api(api)
    describe = (
        f"involvedObject.name=demo,involvedObject.namespace=default,"
        f"involvedObject.kind=AWSCluster,involvedObject.uid={demo.uid}"
    )
    found = core.list_namespaced_event("default", field_selector=describe).items
    assert sorted(e.reason for e in found) == ["FailedReconcileSubnets", "SuccessfulCreateVPC"]
    assert {e.involved_object.uid for e in found} == {demo.uid}
    warnings = core.list_event_for_all_namespaces(field_selector="type=Warning").items
    assert [(w.reason, w.count) for w in warnings] == [("FailedReconcileSubnets", 2)]
    by_reason = core.list_namespaced_event("default", field_selector="reason=SuccessfulCreateVPC").items
    assert sorted(e.involved_object.name for e in by_reason) == ["demo", "other"]
    not_demo = core.list_namespaced_event("default", field_selector=f"involvedObject.uid!={demo.uid}").items
    assert [e.involved_object.uid for e in not_demo] == [other.uid]


def test_events_table_has_the_columns_kubectl_get_events_prints(server: Server) -> None:
    _record(server)
    code, table = server.http("GET", "/api/v1/namespaces/default/events", Accept=TABLE)
    assert code == 200, table
    shown = [i for i, c in enumerate(table["columnDefinitions"]) if c["priority"] == 0]
    names = [table["columnDefinitions"][i]["name"] for i in shown]
    assert names == ["Last Seen", "Type", "Reason", "Object", "Message"]
    rows = sorted(([r["cells"][i] for i in shown] for r in table["rows"]), key=lambda c: (c[3], c[2]))
    assert [cells[1:] for cells in rows] == [
        ["Warning", "FailedReconcileSubnets", "awscluster/demo", "InvalidSubnet.Conflict: overlaps"],
        ["Normal", "SuccessfulCreateVPC", "awscluster/demo", "Created new managed VPC vpc-1"],
        ["Normal", "SuccessfulCreateVPC", "awscluster/other", "Created new managed VPC vpc-2"],
    ]
    assert " (x2 over " in rows[0][0], rows[0][0]
    assert "(x" not in rows[1][0]


def _path(doc: dict[str, Any]) -> str:
    group_version, kind = doc["apiVersion"], doc["kind"]
    base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    plural = {
        "Namespace": "namespaces",
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Deployment": "deployments",
        "Service": "services",
        "CustomResourceDefinition": "customresourcedefinitions",
        "Issuer": "issuers",
        "Certificate": "certificates",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    }[kind]
    namespace = doc["metadata"].get("namespace")
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def test_every_document_of_the_components_file_is_stored_as_written(server: Server) -> None:
    for doc in documents("all"):
        code, created = server.http("POST", _path(doc), doc)
        assert code == 201, (doc["kind"], created)
        code, read = server.http("GET", f"{_path(doc)}/{doc['metadata']['name']}")
        assert code == 200, read
        for key, value in doc.items():
            expected = value
            if key == "spec" and doc["kind"] == "CustomResourceDefinition":
                # The API server's one default: the conversion strategy None.
                expected = {"conversion": {"strategy": "None"}, **value}
            if key != "metadata":
                assert read[key] == expected, f"{doc['kind']} {key} changed when stored"
        labels = dict(doc["metadata"]["labels"])
        if doc["kind"] == "Namespace":  # the API server labels every Namespace with its name
            labels["kubernetes.io/metadata.name"] = doc["metadata"]["name"]
        assert read["metadata"]["labels"] == labels


def test_crd_keeps_its_status_subresource(server: Server) -> None:
    crd = next(d for d in crds() if d["metadata"]["name"].startswith("awsclusters."))
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
    code, created = server.http("POST", _path(crd), crd)
    assert code == 201, created
    assert created["spec"]["versions"] == crd["spec"]["versions"]


def test_events_table_reads_series_and_event_time_of_newer_recorders(server: Server) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "demo.series", "namespace": "default"},
        "involvedObject": {"kind": "AWSCluster", "name": "demo", "namespace": "default"},
        "reason": "Probe",
        "message": "seen often",
        "type": "Normal",
        "eventTime": "2026-01-02T03:04:05.123456Z",
        "series": {"count": 3, "lastObservedTime": "2026-01-02T03:05:05.000001Z"},
        "reportingComponent": "other-controller",
        "reportingInstance": "host-2",
    }
    code, created = server.http("POST", "/api/v1/namespaces/default/events", event)
    assert code == 201, created
    code, table = server.http("GET", "/api/v1/namespaces/default/events/demo.series", Accept=TABLE)
    assert code == 200, table
    [row] = table["rows"]
    cells = dict(zip((c["name"] for c in table["columnDefinitions"]), row["cells"], strict=True))
    assert " (x3 over " in cells["Last Seen"]
    assert cells["Count"] == 3
    assert cells["Source"] == "other-controller, host-2"
    assert cells["Object"] == "awscluster/demo"
