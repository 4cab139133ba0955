"""capa-py's components installed beside Cluster API Provider AWS (CAPA) in one management cluster.

CAPA's components (its kustomize ``namePrefix: capa-`` and ``namespace: capa-system``, its controller's
leader-election ID, its CRDs' short names) are listed here as facts. capa-py's must not take any of those
names: an object of the same kind and name would overwrite CAPA's on apply, and ``clusterctl delete`` of one
provider would delete the other's namespace.
"""

from __future__ import annotations

from typing import Any

import yaml

from capa_py.runtime.leader import STORE_LEASE_NAME, STORE_LEASE_NAMESPACE
from capa_py.store.identity import IDENTITY_NAMESPACE
from tests.cli.cli_support import Cli

CAPA_NAMESPACE = "capa-system"
CAPA_NAMES: dict[str, set[str]] = {
    "Namespace": {CAPA_NAMESPACE},
    "ServiceAccount": {"capa-controller-manager"},
    "ClusterRole": {"capa-manager-role"},
    "ClusterRoleBinding": {"capa-manager-rolebinding"},
    "Role": {"capa-leader-elect-role"},
    "RoleBinding": {"capa-leader-elect-rolebinding"},
    "Deployment": {"capa-controller-manager"},
    "Service": {"capa-webhook-service"},
    "Secret": {"capa-manager-bootstrap-credentials", "capa-webhook-service-cert"},
    "Issuer": {"capa-selfsigned-issuer"},
    "Certificate": {"capa-serving-cert"},
    "ValidatingWebhookConfiguration": {"capa-validating-webhook-configuration"},
    "MutatingWebhookConfiguration": {"capa-mutating-webhook-configuration"},
    "Lease": {"controller-leader-elect-capa"},
}
"""What CAPA names its objects, by kind."""


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def test_no_object_of_capa_manifests_all_takes_a_name_capa_ships(cli: Cli) -> None:
    """Failed before capa-py renamed its RBAC objects and namespace (they were CAPA's)."""
    result = cli("manifests", "all")
    assert result.exit_code == 0, result
    clashes = [
        f"{doc['kind']}/{doc['metadata']['name']}"
        for doc in _docs(result.stdout)
        if doc["metadata"]["name"] in CAPA_NAMES.get(doc["kind"], set())
    ]
    assert clashes == []
    in_capa_namespace = [
        f"{doc['kind']}/{doc['metadata']['name']}"
        for doc in _docs(result.stdout)
        if doc["metadata"].get("namespace") == CAPA_NAMESPACE
    ]
    assert in_capa_namespace == []
    subjects = [
        subject
        for doc in _docs(result.stdout)
        for subject in doc.get("subjects", [])
        if subject.get("namespace") == CAPA_NAMESPACE or subject["name"] in CAPA_NAMES["ServiceAccount"]
    ]
    assert subjects == []


def test_the_lease_and_the_store_identity_live_in_capa_py_s_namespace(cli: Cli) -> None:
    """The controller's Lease and the store's identity ConfigMap are in the namespace capa-py installs (and
    owns), not in CAPA's."""
    namespaces = [
        d["metadata"]["name"] for d in _docs(cli("manifests", "rbac").stdout) if d["kind"] == "Namespace"
    ]
    assert namespaces == [STORE_LEASE_NAMESPACE]
    assert IDENTITY_NAMESPACE == STORE_LEASE_NAMESPACE
    assert STORE_LEASE_NAMESPACE != CAPA_NAMESPACE
    assert STORE_LEASE_NAME not in CAPA_NAMES["Lease"]
