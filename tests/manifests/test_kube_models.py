"""Every document ``capa manifests all`` prints is a valid object of the official Kubernetes client's models.

The client's models know every field of every built-in kind (and of CustomResourceDefinition itself):
reading a document into its model and writing it back drops any field the API does not have and refuses a
missing required one, so a document that survives the round trip unchanged has only real fields, with the
right nesting. This needs no API server.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes.client import ApiClient

from capa_py.manifests import documents


def _round_trip(doc: dict[str, Any]) -> Any:
    api = ApiClient()
    model = api.deserialize(json.dumps(doc), f"V1{doc['kind']}", "application/json")
    return api.sanitize_for_serialization(model)


# cert-manager's kinds are not Kubernetes' own: the client has no model of them
# (tests/manifests/test_webhook_manifests.py checks them).
BUILT_IN = [d for d in documents("all") if not d["apiVersion"].startswith("cert-manager.io/")]


@pytest.mark.parametrize("doc", BUILT_IN, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_document_has_only_fields_the_kubernetes_api_has(doc: dict[str, Any]) -> None:
    assert _round_trip(doc) == doc


def test_only_cert_managers_documents_are_left_out_of_the_round_trip() -> None:
    left_out = [f"{d['kind']}/{d['metadata']['name']}" for d in documents("all") if d not in BUILT_IN]
    assert left_out == ["Issuer/capa-py-selfsigned-issuer", "Certificate/capa-py-serving-cert"]


def test_a_misspelled_field_does_not_survive_the_round_trip() -> None:
    role = next(d for d in documents("rbac") if d["kind"] == "ClusterRole")
    misspelled = copy.deepcopy(role)
    misspelled["rules"][0]["apiGroup"] = misspelled["rules"][0].pop("apiGroups")
    assert _round_trip(misspelled) != misspelled
