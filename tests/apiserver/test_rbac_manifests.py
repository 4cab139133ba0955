"""The RBAC ``capa manifests`` generates, enforced by ``capa serve``: the controller's ServiceAccount may make
every request the controller makes (each verb on each kind and subresource the manifests list, sent as
that ServiceAccount), and is refused what it does not need.

The ServiceAccount is named by the test-only stand-in for authentication
(:mod:`tests.apiserver.rbac_support`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capa_py.api.apiextensions import CustomResourceDefinition
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject
from capa_py.manifests.rbac import (
    ACCESS,
    IDENTITY_ACCESS,
    MACHINE_SET_ACCESS,
    NAMESPACE,
    OUTSIDE_THE_RECORDING,
    SERVICE_ACCOUNT,
    TINKERBELL_ACCESS,
    rbac,
)
from tests.apiserver.rbac_support import ADMIN, Caller, Side, apply_all, enforcing_server

NS = "team-a"
CONTROLLER = Caller(
    f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}",
    ("system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"),
)


def _collection(model: type[KubeObject], namespace: str = NS) -> str:
    version = model.API_VERSION
    base = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    scope = f"/namespaces/{namespace}" if model.NAMESPACED else ""
    return f"{base}{scope}/{model.PLURAL}"


def _request(model: type[KubeObject], subresource: str, verb: str) -> tuple[str, str, Any]:
    """The request the controller's store makes for ``verb`` (method, path, body)."""
    named = f"{_collection(model)}/rbac-probe" + (f"/{subresource}" if subresource else "")
    meta: dict[str, Any] = {"name": "rbac-probe"}
    if model.NAMESPACED:
        meta["namespace"] = NS
    body = {"apiVersion": model.API_VERSION, "kind": model.KIND, "metadata": meta}
    return {
        "get": ("GET", named, None),
        "list": ("GET", _collection(model), None),
        "watch": ("GET", f"{_collection(model)}?watch=true", None),
        "create": ("POST", _collection(model), body),
        "update": ("PUT", named, body),
        "patch": ("PATCH", named, {}),
        "delete": ("DELETE", named, None),
    }[verb]


def _needed() -> list[tuple[type[KubeObject], str, str]]:
    access = [
        *ACCESS,
        *TINKERBELL_ACCESS,
        *MACHINE_SET_ACCESS,
        *IDENTITY_ACCESS,
        *((model, sub, verbs) for model, sub, verbs, _ in OUTSIDE_THE_RECORDING),
    ]
    return [(model, sub, verb) for model, sub, verbs in access for verb in verbs]


def _installed(capa: Side) -> None:
    apply_all(capa, [*rbac(), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])


def test_the_controller_may_make_every_request_it_makes(tmp_path: Path) -> None:
    with enforcing_server(tmp_path / "state.db") as capa:
        _installed(capa)
        refused = []
        for model, subresource, verb in _needed():
            method, path, body = _request(model, subresource, verb)
            answer = capa.send(CONTROLLER, method, path, body)
            if answer.status == 403:
                refused.append((model.KIND, subresource, verb, answer.body["message"]))
        assert refused == []
        assert len(_needed()) > 50


def test_the_controller_is_refused_what_it_does_not_need(tmp_path: Path) -> None:
    """Reading one Secret (it reads them from its watch), writing Secrets, deleting a CRD, granting itself
    more (a ClusterRoleBinding), reading the roles or the namespaces; and the manifests do not grant it
    before they are applied."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": NS}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "escalate"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
    }
    unneeded = [
        ("GET", f"{_collection(Secret)}/s", None),
        ("POST", _collection(Secret), secret),
        ("DELETE", f"{_collection(Secret)}/s", None),
        (
            "DELETE",
            f"{_collection(CustomResourceDefinition)}/awsclusters.infrastructure.cluster.x-k8s.io",
            None,
        ),
        ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding),
        ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", None),
        ("GET", "/api/v1/namespaces", None),
    ]
    with enforcing_server(tmp_path / "state.db") as capa:
        model, subresource, verb = _needed()[0]
        method, path, body = _request(model, subresource, verb)
        assert capa.send(CONTROLLER, method, path, body).status == 403  # nothing granted yet
        _installed(capa)
        assert capa.send(CONTROLLER, method, path, body).status != 403
        for method, path, body in unneeded:
            answer = capa.send(CONTROLLER, method, path, body)
            assert answer.status == 403, (method, path, answer)
            assert answer.body["reason"] == "Forbidden"
        assert capa.send(ADMIN, "GET", "/api/v1/namespaces").status == 200
