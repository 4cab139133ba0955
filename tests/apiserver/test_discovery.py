"""Discovery, Table responses and the OpenAPI documents kubectl reads."""

from __future__ import annotations

from kubernetes import client

from capa_py.api.registry import REGISTRY
from tests.apiserver.apiserver_support import GROUP, VERSION, Server, aws_cluster


def test_discovery_lists_every_registered_kind(server: Server) -> None:
    code, version = server.http("GET", "/version")
    assert code == 200
    assert version["major"] == "1"
    assert version["gitVersion"].startswith("v1.")
    code, core = server.http("GET", "/api")
    assert code == 200
    assert core["kind"] == "APIVersions"
    assert core["versions"] == ["v1"]
    code, groups = server.http("GET", "/apis")
    assert code == 200
    assert groups["kind"] == "APIGroupList"
    # Every version of every group (infrastructure.cluster.x-k8s.io serves CAPA's and CAPT's versions).
    served = {v["groupVersion"] for g in groups["groups"] for v in g["versions"]}

    listed: dict[str, dict] = {}  # type: ignore[type-arg]
    for group_version in ["v1", *sorted(served)]:
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        code, resources = server.http("GET", path)
        assert code == 200
        assert resources["kind"] == "APIResourceList"
        assert resources["groupVersion"] == group_version
        listed.update({(group_version, r["name"]): r for r in resources["resources"]})  # type: ignore[misc]
    for model in REGISTRY.kinds():
        entry = listed[(model.API_VERSION, model.PLURAL)]  # type: ignore[index]
        assert (entry["kind"], entry["namespaced"]) == (model.KIND, model.NAMESPACED)
        assert {"get", "list", "watch", "create", "update", "patch", "delete"} <= set(entry["verbs"])
        assert entry.get("shortNames", []) == list(model.SHORT_NAMES)
        assert ((model.API_VERSION, f"{model.PLURAL}/status") in listed) is model.HAS_STATUS

    awsclusters = listed[(f"{GROUP}/{VERSION}", "awsclusters")]  # type: ignore[index]
    assert awsclusters["singularName"] == "awscluster"
    assert awsclusters["categories"] == ["cluster-api"]
    assert server.http("GET", "/apis/example.com/v1")[0] == 404


def test_tables_have_the_printer_columns_of_the_kinds_crd(
    server: Server, custom: client.CustomObjectsApi
) -> None:
    """The columns of the AWSCluster CRD ``capa manifests crds`` writes (so ``kubectl get awsclusters``
    prints the same against capa serve and a cluster with the CRD), with their types and priorities."""
    custom.create_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", aws_cluster())
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        "default",
        "awsclusters",
        "demo",
        {"status": {"ready": True, "network": {"vpcId": "vpc-1"}}},
    )
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    code, table = server.http("GET", f"/apis/{GROUP}/{VERSION}/namespaces/default/awsclusters", Accept=accept)
    assert code == 200
    assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    columns = [(c["name"], c["type"], c["priority"]) for c in table["columnDefinitions"]]
    assert columns == [
        ("Name", "string", 0),
        ("Cluster", "string", 0),
        ("Ready", "string", 0),
        ("VPC", "string", 0),
        ("Endpoint", "string", 1),
        ("Bastion IP", "string", 0),
    ]
    assert table["columnDefinitions"][0]["format"] == "name"
    [row] = table["rows"]
    # The VPC in use, from the status (CAPA writes it into the spec; capa-py keeps the spec as written).
    assert row["cells"][:4] == ["demo", None, "true", "vpc-1"]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == "demo"
    assert table["metadata"]["resourceVersion"]

    code, single = server.http(
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/default/awsclusters/demo?includeObject=Object",
        Accept=accept,
    )
    assert code == 200
    assert single["rows"][0]["object"]["spec"]["region"] == "us-east-1"


def test_openapi_v3_names_each_kind_and_its_write_parameters(server: Server) -> None:
    code, index = server.http("GET", "/openapi/v3")
    assert code == 200
    path = f"apis/{GROUP}/{VERSION}"
    assert set(index["paths"]) >= {path, "api/v1", "apis/cluster.x-k8s.io/v1beta1"}
    code, document = server.http("GET", "/" + index["paths"][path]["serverRelativeURL"].lstrip("/"))
    assert code == 200
    assert document["openapi"].startswith("3.")
    kinds = {
        gvk["kind"]: schema
        for schema in document["components"]["schemas"].values()
        for gvk in schema.get("x-kubernetes-group-version-kind", [])
    }
    assert set(kinds) == {
        "AWSCluster",
        "AWSMachine",
        "AWSMachinePool",
        "AWSClusterTemplate",
        "AWSMachineTemplate",
        "AWSClusterControllerIdentity",
        "AWSClusterStaticIdentity",
        "AWSClusterRoleIdentity",
    }
    assert {"apiVersion", "kind", "metadata", "spec", "status"} <= set(kinds["AWSCluster"]["properties"])
    item = document["paths"][f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/awsclusters/{{name}}"]
    assert item["patch"]["x-kubernetes-group-version-kind"]["kind"] == "AWSCluster"
    assert "fieldValidation" in [p["name"] for p in item["patch"]["parameters"]]
    assert server.http("GET", "/openapi/v3/apis/example.com/v1")[0] == 404
