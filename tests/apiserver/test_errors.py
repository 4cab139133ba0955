"""Failures are Status objects with the API server's reason, code and field causes."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.apiserver.apiserver_support import GROUP, VERSION, Server, aws_cluster

PATH = f"/apis/{GROUP}/{VERSION}/namespaces/default/awsclusters"


def status_of(error: ApiException) -> dict:  # type: ignore[type-arg]
    document = json.loads(error.body)
    assert document["kind"] == "Status"
    assert document["apiVersion"] == "v1"
    assert document["status"] == "Failure"
    assert document["code"] == error.status
    return document  # type: ignore[no-any-return]


def test_not_found_and_already_exists(custom: client.CustomObjectsApi) -> None:
    with pytest.raises(ApiException) as missing:
        custom.get_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", "nope")
    status = status_of(missing.value)
    assert (status["code"], status["reason"]) == (404, "NotFound")
    assert status["details"]["name"] == "nope"
    assert status["details"]["group"] == GROUP
    assert status["message"] == f'awsclusters.{GROUP} "nope" not found'

    custom.create_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", aws_cluster())
    with pytest.raises(ApiException) as taken:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", aws_cluster())
    assert (status_of(taken.value)["reason"], taken.value.status) == ("AlreadyExists", 409)


def test_stale_resource_version_is_a_conflict(custom: client.CustomObjectsApi) -> None:
    first = custom.create_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", aws_cluster())
    stale = json.loads(json.dumps(first))
    first["metadata"]["labels"] = {"a": "1"}
    custom.replace_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", "demo", first)
    stale["metadata"]["labels"] = {"a": "2"}
    with pytest.raises(ApiException) as conflict:
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", "demo", stale)
    assert (conflict.value.status, status_of(conflict.value)["reason"]) == (409, "Conflict")


def test_invalid_objects_name_the_field(custom: client.CustomObjectsApi) -> None:
    wrong_type = aws_cluster()
    wrong_type["spec"]["sshKeyName"] = ["not", "a", "string"]
    with pytest.raises(ApiException) as rejected:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", wrong_type)
    status = status_of(rejected.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["details"]["kind"] == "AWSCluster"
    assert status["details"]["name"] == "demo"
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.sshKeyName"]

    # An unknown field is refused only with fieldValidation=Strict, as a decoding error
    # (tests/apiserver/test_fieldvalidation.py compares every mode with the API server's).
    unknown = aws_cluster()
    unknown["spec"]["bogus"] = True
    with pytest.raises(ApiException) as strict:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "awsclusters", unknown, field_validation="Strict"
        )
    assert (strict.value.status, status_of(strict.value)["reason"]) == (400, "BadRequest")
    assert 'strict decoding error: unknown field "spec.bogus"' in status_of(strict.value)["message"]

    # A semantic issue (a zone outside the region) names its field too.
    wrong_zone = aws_cluster()
    wrong_zone["spec"]["network"]["subnets"][0]["availabilityZone"] = "eu-west-1a"
    with pytest.raises(ApiException) as semantic:
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", wrong_zone)
    fields = [c["field"] for c in status_of(semantic.value)["details"]["causes"]]
    assert fields == ["spec.network.subnets[0].availabilityZone"]


def test_immutable_fields_are_refused_on_update_and_patch(custom: client.CustomObjectsApi) -> None:
    current = custom.create_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", aws_cluster())
    current["spec"]["region"] = "us-west-2"
    for subnet, zone in zip(current["spec"]["network"]["subnets"], "aabbcc", strict=True):
        subnet["availabilityZone"] = f"us-west-2{zone}"
    with pytest.raises(ApiException) as replaced:
        custom.replace_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", "demo", current)
    status = status_of(replaced.value)
    assert status["code"] == 422
    assert "spec.region" in [c["field"] for c in status["details"]["causes"]]

    with pytest.raises(ApiException) as patched:
        custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            "default",
            "awsclusters",
            "demo",
            {"spec": {"network": {"vpc": {"cidrBlock": "10.1.0.0/16"}}}},
        )
    assert status_of(patched.value)["code"] == 422
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, "default", "awsclusters", "demo")
    assert stored["spec"]["region"] == "us-east-1"


def test_bad_requests_methods_and_paths(server: Server) -> None:
    code, status = server.http("POST", PATH, b"{not json")
    assert (code, status["reason"]) == (400, "BadRequest")

    code, status = server.http("DELETE", PATH)
    assert (code, status["reason"]) == (405, "MethodNotAllowed")

    code, status = server.http("GET", f"/apis/{GROUP}/{VERSION}/namespaces/default/widgets")
    assert (code, status["reason"]) == (404, "NotFound")

    other = aws_cluster()
    other["metadata"]["namespace"] = "elsewhere"
    code, status = server.http("POST", PATH, other)
    assert (code, status["reason"]) == (400, "BadRequest")

    code, status = server.http("GET", PATH + "?limit=many")
    assert code == 400
    assert status["kind"] == "Status"
