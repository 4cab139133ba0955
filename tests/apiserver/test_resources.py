"""The official Kubernetes client against the served store: CRUD, status, patches, selectors, paging."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.apiserver.apiserver_support import GROUP, VERSION, Server, aws_cluster, example
from tests.e2e.e2e_support import wait_for

PLURAL = "awsclusters"


def create(custom: client.CustomObjectsApi, name: str = "demo", **labels: str) -> dict:  # type: ignore[type-arg]
    return custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, aws_cluster(name, labels)
    )  # type: ignore[no-any-return]


def test_create_get_list_replace_delete(custom: client.CustomObjectsApi, server: Server) -> None:
    created = create(custom)
    assert created["metadata"]["uid"]
    assert created["metadata"]["generation"] == 1
    got = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo")
    assert got == created
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    assert listed["kind"] == "AWSClusterList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["demo"]
    assert listed["metadata"]["resourceVersion"] == server.store.current_resource_version()
    everywhere = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert [i["metadata"]["name"] for i in everywhere["items"]] == ["demo"]

    got["spec"]["additionalTags"] = {"team": "storage"}
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo", got)
    assert replaced["spec"]["additionalTags"] == {"team": "storage"}
    assert replaced["metadata"]["generation"] == 2
    assert int(replaced["metadata"]["resourceVersion"]) > int(got["metadata"]["resourceVersion"])

    custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo")
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo")
    assert missing.value.status == 404


def test_core_and_coordination_kinds(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    secret = example("Secret")
    core.create_namespaced_secret("default", secret)
    read = core.read_namespaced_secret(secret["metadata"]["name"], "default")
    assert read.type == secret.get("type", "Opaque")
    assert read.metadata.uid
    assert [s.metadata.name for s in core.list_namespaced_secret("default").items] == [
        secret["metadata"]["name"]
    ]

    leases = client.CoordinationV1Api(api)
    body = client.V1Lease(
        metadata=client.V1ObjectMeta(name="capa-leader"),
        spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    leases.create_namespaced_lease("default", body)
    lease = leases.read_namespaced_lease("capa-leader", "default")
    assert lease.spec.holder_identity == "a"
    assert lease.spec.lease_duration_seconds == 15
    lease.spec.holder_identity = "b"
    assert leases.replace_namespaced_lease("capa-leader", "default", lease).spec.holder_identity == "b"


def test_status_subresource_writes_only_status(custom: client.CustomObjectsApi) -> None:
    created = create(custom)
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "demo", {"status": {"ready": True}, "spec": {"additionalTags": {}}}
    )
    assert patched["status"]["ready"] is True
    assert patched["spec"]["additionalTags"] == created["spec"]["additionalTags"]
    assert patched["metadata"]["generation"] == 1

    # The main resource never writes status.
    patched["status"] = {"ready": False}
    patched["metadata"]["labels"] = {"a": "b"}
    replaced = custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo", patched)
    assert replaced["status"]["ready"] is True
    assert replaced["metadata"]["labels"] == {"a": "b"}

    replaced["status"] = {"ready": False}
    status = custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "demo", replaced
    )
    assert status["status"].get("ready", False) is False


def test_merge_json_and_strategic_patches(custom: client.CustomObjectsApi, server: Server) -> None:
    create(custom, team="a")
    path = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/demo"
    code, merged = server.http(
        "PATCH", path, {"metadata": {"labels": {"team": None, "tier": "x"}}}, "application/merge-patch+json"
    )
    assert code == 200
    assert merged["metadata"]["labels"] == {"tier": "x"}

    operations = [
        {"op": "test", "path": "/metadata/labels/tier", "value": "x"},
        {"op": "add", "path": "/spec/additionalTags/owner", "value": "me"},
        {"op": "remove", "path": "/metadata/labels/tier"},
    ]
    code, patched = server.http("PATCH", path, operations, "application/json-patch+json")
    assert code == 200
    assert patched["spec"]["additionalTags"]["owner"] == "me"
    assert "labels" not in patched["metadata"]

    code, failed = server.http(
        "PATCH",
        path,
        [{"op": "test", "path": "/spec/region", "value": "eu-west-1"}],
        "application/json-patch+json",
    )
    assert code == 422
    assert failed["kind"] == "Status"

    code, strategic = server.http(
        "PATCH", path, {"metadata": {"annotations": {"k": "v"}}}, "application/strategic-merge-patch+json"
    )
    assert code == 415
    assert strategic["reason"] == "UnsupportedMediaType"

    code, unsupported = server.http("PATCH", path, {"spec": {}}, "application/xml")
    assert code == 415
    assert unsupported["reason"] == "UnsupportedMediaType"


def test_label_and_field_selectors(custom: client.CustomObjectsApi) -> None:
    create(custom, "a", team="red")
    create(custom, "b", team="blue")
    create(custom, "c")

    def names(**selectors: str) -> list[str]:
        found = custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, **selectors)
        return [i["metadata"]["name"] for i in found["items"]]

    assert names(label_selector="team=red") == ["a"]
    assert names(label_selector="team") == ["a", "b"]
    assert names(label_selector="team notin (red)") == ["b", "c"]
    assert names(field_selector="metadata.name=b") == ["b"]
    assert names(field_selector="metadata.name!=b", label_selector="team") == ["a"]


def test_limit_and_continue_page_through_everything_once(custom: client.CustomObjectsApi) -> None:
    for index in range(7):
        create(custom, f"c{index}")
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = custom.list_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, limit=3, _continue=token
        )
        pages += 1
        seen += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
        assert page["metadata"]["remainingItemCount"] == 7 - len(seen)
    assert pages == 3
    assert seen == [f"c{i}" for i in range(7)]


def test_dry_run_validates_and_writes_nothing(custom: client.CustomObjectsApi, server: Server) -> None:
    before = server.store.current_resource_version()
    dry = custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, aws_cluster(), dry_run="All"
    )
    assert dry["metadata"]["name"] == "demo"
    assert server.store.current_resource_version() == before
    assert custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"] == []

    bad = aws_cluster()
    bad["spec"]["sshKeyName"] = 1
    with pytest.raises(ApiException) as invalid:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, bad, dry_run="All")
    assert invalid.value.status == 422

    create(custom)
    code, _ = server.http("DELETE", f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}/demo?dryRun=All")
    assert code == 200
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo")


@pytest.mark.parametrize(("policy", "dependent_left"), [("Orphan", True), ("Background", False)])
def test_propagation_policy_on_delete(
    api: client.ApiClient, custom: client.CustomObjectsApi, policy: str, dependent_left: bool
) -> None:
    owner = create(custom)
    core = client.CoreV1Api(api)
    secret = example("Secret")
    secret["metadata"]["ownerReferences"] = [
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "AWSCluster",
            "name": "demo",
            "uid": owner["metadata"]["uid"],
        }
    ]
    core.create_namespaced_secret("default", secret)
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "demo", propagation_policy=policy
    )
    left = [s.metadata.name for s in core.list_namespaced_secret("default").items]
    assert (left == [secret["metadata"]["name"]]) is dependent_left
    if dependent_left:
        assert not core.read_namespaced_secret(
            secret["metadata"]["name"], "default"
        ).metadata.owner_references


def test_namespaces_are_cluster_scoped_objects(api: client.ApiClient, server: Server) -> None:
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "team-a", "labels": {"owner": "me"}}})
    made = core.read_namespace("team-a")
    # As the API server makes every Namespace: labelled with its name, Active, the kubernetes finalizer.
    assert made.metadata.labels == {"owner": "me", "kubernetes.io/metadata.name": "team-a"}
    assert made.status.phase == "Active"
    assert made.spec.finalizers == ["kubernetes"]
    assert [n.metadata.name for n in core.list_namespace(label_selector="owner=me").items] == ["team-a"]
    status = core.patch_namespace_status("team-a", {"status": {"phase": "Terminating"}})
    assert status.status.phase == "Terminating"
    # Objects in a namespace live under it, whatever the Namespace object's state.
    code, secret = server.http(
        "POST", "/api/v1/namespaces/team-a/secrets", {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    assert code == 201
    assert secret["metadata"]["namespace"] == "team-a"
    core.delete_namespace("team-a")
    assert "team-a" not in [n.metadata.name for n in core.list_namespace().items]


def test_dry_run_updates_and_patches_write_nothing(custom: client.CustomObjectsApi, server: Server) -> None:
    created = create(custom)
    before = server.store.current_resource_version()
    changed = dict(created, spec={**created["spec"], "additionalTags": {"dry": "run"}})
    replaced = custom.replace_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "demo", changed, dry_run="All"
    )
    assert replaced["spec"]["additionalTags"] == {"dry": "run"}
    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "demo", {"metadata": {"labels": {"a": "b"}}}, dry_run="All"
    )
    assert patched["metadata"]["labels"] == {"a": "b"}
    with pytest.raises(ApiException) as taken:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, aws_cluster(), dry_run="All"
        )
    assert taken.value.status == 409
    assert server.store.current_resource_version() == before
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo") == created


def test_custom_resources_refuse_an_unconditional_update(
    api: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    created = create(custom)
    del created["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as refused:
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo", created)
    assert refused.value.status == 422
    assert "metadata.resourceVersion" in refused.value.body

    # Built-in kinds allow it, as the API server does.
    core = client.CoreV1Api(api)
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"k": "v"}})
    replaced = core.replace_namespaced_secret("s", "default", {"metadata": {"name": "s"}, "data": {}})
    assert not replaced.data
    deleted = core.delete_namespaced_secret("s", "default")
    assert (deleted["kind"], deleted["status"], deleted["details"]["name"]) == ("Status", "Success", "s")


def test_generate_name_picks_a_free_name(custom: client.CustomObjectsApi) -> None:
    body = aws_cluster()
    body["metadata"] = {"generateName": "demo-"}
    first = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    second = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    names = {first["metadata"]["name"], second["metadata"]["name"]}
    assert len(names) == 2
    assert all(name.startswith("demo-") for name in names)


def test_foreground_deletion_waits_for_the_dependents(
    api: client.ApiClient, custom: client.CustomObjectsApi
) -> None:
    owner = create(custom)
    reference = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AWSCluster",
        "name": "demo",
        "uid": owner["metadata"]["uid"],
    }
    core = client.CoreV1Api(api)
    core.create_namespaced_secret("default", {"metadata": {"name": "free", "ownerReferences": [reference]}})
    core.create_namespaced_secret(
        "default",
        {"metadata": {"name": "held", "ownerReferences": [reference], "finalizers": ["example.com/hold"]}},
    )

    marked = custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "demo", propagation_policy="Foreground"
    )
    assert marked["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in marked["metadata"]["finalizers"]

    def secret_names() -> list[str]:
        return [s.metadata.name for s in core.list_namespaced_secret("default").items]

    # The free dependent goes; the held one is marked and keeps its owner in place.
    assert wait_for(lambda: secret_names() == ["held"], timeout=30)
    assert wait_for(
        lambda: core.read_namespaced_secret("held", "default").metadata.deletion_timestamp, timeout=30
    )
    assert custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "demo")["metadata"][
        "deletionTimestamp"
    ]

    core.patch_namespaced_secret("held", "default", {"metadata": {"finalizers": None}})
    assert wait_for(
        lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)["items"],
        timeout=30,
    )
    assert secret_names() == []
