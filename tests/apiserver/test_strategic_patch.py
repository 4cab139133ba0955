"""Strategic merge patches on Kubernetes' own kinds, as kubectl apply sends them, and merge semantics kept
for custom kinds."""

from __future__ import annotations

import json

from capa_py.apiserver.strategic import strategic_merge
from capa_py.manifests.deployment import deployment, metrics_service
from capa_py.manifests.webhooks import validating_webhook_configuration
from tests.apiserver.apiserver_support import Server, aws_cluster

STRATEGIC = "application/strategic-merge-patch+json"
DEPLOYMENTS = "/apis/apps/v1/namespaces/capa-py-system/deployments"


def test_changing_one_container_field_keeps_the_rest_of_the_container() -> None:
    stored = deployment("example.com/capa:v1")
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "manager"}],
                    "containers": [{"name": "manager", "image": "example.com/capa:v2"}],
                }
            }
        }
    }
    patched = strategic_merge(stored, patch)
    expected = deployment("example.com/capa:v2")
    assert patched == expected
    assert "$" not in json.dumps(patched)


def test_list_items_are_added_deleted_and_ordered_by_their_merge_key() -> None:
    stored = deployment()
    container = stored["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "manager",
                            "$setElementOrder/env": [{"name": "C"}, {"name": "A"}],
                            "env": [{"name": "B", "$patch": "delete"}, {"name": "C", "value": "3"}],
                            "ports": [{"containerPort": 8080, "name": "prom"}],
                        },
                        {"name": "sidecar", "image": "busybox"},
                    ]
                }
            }
        }
    }
    patched = strategic_merge(stored, patch)
    containers = patched["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["manager", "sidecar"]
    manager = containers[0]
    assert manager["env"] == [{"name": "C", "value": "3"}, {"name": "A", "value": "1"}]
    assert {p["containerPort"]: p["name"] for p in manager["ports"]} == {
        8080: "prom",
        8081: "healthz",
        9443: "webhook-server",
    }
    assert manager["args"] == container["args"]
    assert containers[1] == {"name": "sidecar", "image": "busybox"}


def test_service_ports_merge_by_port_and_replace_directive_replaces() -> None:
    service = metrics_service()
    added = strategic_merge(service, {"spec": {"ports": [{"port": 9090, "name": "extra"}]}})
    assert [p["port"] for p in added["spec"]["ports"]] == [8080, 9090]
    replaced = strategic_merge(added, {"spec": {"ports": [{"port": 9443}, {"$patch": "replace"}]}})
    assert replaced["spec"]["ports"] == [{"port": 9443}]
    whole = strategic_merge(service, {"spec": {"$patch": "replace", "selector": {"app": "x"}}})
    assert whole["spec"] == {"selector": {"app": "x"}}


def test_webhooks_merge_by_name() -> None:
    """kubectl apply sends only the webhook that changed; the others stay registered."""
    configuration = validating_webhook_configuration()
    first, *others = configuration["webhooks"]
    patched = strategic_merge(
        configuration, {"webhooks": [{"name": first["name"], "failurePolicy": "Ignore"}]}
    )
    assert patched["webhooks"] == [{**first, "failurePolicy": "Ignore"}, *others]


def test_finalizers_merge_as_a_set_and_retain_keys_drops_the_rest() -> None:
    doc = {
        "metadata": {"finalizers": ["a"]},
        "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {}}},
    }
    patched = strategic_merge(
        doc,
        {
            "metadata": {"finalizers": ["b", "a"]},
            "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}},
        },
    )
    assert patched["metadata"]["finalizers"] == ["a", "b"]
    assert patched["spec"]["strategy"] == {"type": "Recreate"}
    dropped = strategic_merge(patched, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert dropped["metadata"]["finalizers"] == ["b"]


def test_server_applies_strategic_patches_to_builtin_kinds_and_refuses_them_for_custom_kinds(
    server: Server,
) -> None:
    code, created = server.http("POST", DEPLOYMENTS, deployment("example.com/capa:v1"))
    assert code == 201, created
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": "example.com/capa:v2"}]}}}
    }
    code, patched = server.http(
        "PATCH", f"{DEPLOYMENTS}/capa-py-controller-manager", patch, content_type=STRATEGIC
    )
    assert code == 200, patched
    assert patched["spec"] == deployment("example.com/capa:v2")["spec"]

    cluster = aws_cluster()
    path = "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/default/awsclusters"
    code, created = server.http("POST", path, cluster)
    assert code == 201, created
    code, refused = server.http(
        "PATCH", f"{path}/demo", {"spec": {"additionalTags": {"team": "red"}}}, content_type=STRATEGIC
    )
    # As the API server answers (tests/apiserver/test_patch_media_types.py compares them).
    assert (code, refused["reason"]) == (415, "UnsupportedMediaType"), refused
