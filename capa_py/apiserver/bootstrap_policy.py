"""The default roles and bindings the API server creates for itself and clients rely on.

``cluster-admin`` (everything, bound to the group ``system:masters``), ``system:discovery`` (reading the
discovery and health paths, bound to every authenticated user), ``system:basic-user`` (asking
SelfSubjectReview, SelfSubjectAccessReview and SelfSubjectRulesReview what one is and may do, bound to every
authenticated user) and ``system:public-info-viewer`` (the health and version paths, bound to every user,
authenticated or not) and ``system:service-account-issuer-discovery`` (the service-account issuer's
OpenID discovery paths, bound to every ServiceAccount). Each carries the label
``kubernetes.io/bootstrapping: rbac-defaults`` and the annotation
``rbac.authorization.kubernetes.io/autoupdate: "true"``.

``capa serve`` creates the missing ones when it starts serving a store, as the API server does. One that
exists keeps what it has: with ``autoupdate`` true it gets the rules (or subjects) it lacks added, as the API
server reconciles them; with ``autoupdate`` false it is left exactly as it is.
"""

from __future__ import annotations

from typing import Any

from capa_py.api.meta import KubeObject
from capa_py.api.workloads import ClusterRole, ClusterRoleBinding
from capa_py.logging import get_logger
from capa_py.store.errors import AlreadyExists, Conflict
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore

AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
BOOTSTRAPPING = "kubernetes.io/bootstrapping"
RBAC_DEFAULTS = "rbac-defaults"
RBAC_GROUP = "rbac.authorization.k8s.io"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
MASTERS = "system:masters"
SERVICE_ACCOUNTS = "system:serviceaccounts"

_HEALTH = ["/healthz", "/livez", "/readyz", "/version", "/version/"]

CLUSTER_ROLES: dict[str, list[dict[str, Any]]] = {
    "cluster-admin": [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]},
    ],
    "system:discovery": [
        {
            "nonResourceURLs": sorted(
                ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", *_HEALTH]
            ),
            "verbs": ["get"],
        }
    ],
    "system:basic-user": [
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
            "verbs": ["create"],
        },
        {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
    ],
    "system:public-info-viewer": [{"nonResourceURLs": list(_HEALTH), "verbs": ["get"]}],
    "system:service-account-issuer-discovery": [
        {
            "nonResourceURLs": [
                "/.well-known/openid-configuration",
                "/.well-known/openid-configuration/",
                "/openid/v1/jwks",
                "/openid/v1/jwks/",
            ],
            "verbs": ["get"],
        }
    ],
}
"""Each bootstrap ClusterRole's rules."""

CLUSTER_ROLE_BINDINGS: dict[str, list[str]] = {
    "cluster-admin": [MASTERS],
    "system:discovery": [AUTHENTICATED],
    "system:basic-user": [AUTHENTICATED],
    "system:public-info-viewer": [AUTHENTICATED, UNAUTHENTICATED],
    "system:service-account-issuer-discovery": [SERVICE_ACCOUNTS],
}
"""Each bootstrap ClusterRoleBinding (named as the ClusterRole it binds) and the groups it binds it to."""

_log = get_logger("apiserver.bootstrap_policy")


def _metadata(name: str) -> dict[str, Any]:
    return {"name": name, "labels": {BOOTSTRAPPING: RBAC_DEFAULTS}, "annotations": {AUTOUPDATE: "true"}}


def cluster_role(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": _metadata(name),
        "rules": [dict(rule) for rule in CLUSTER_ROLES[name]],
    }


def cluster_role_binding(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _metadata(name),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [
            {"apiGroup": RBAC_GROUP, "kind": "Group", "name": group} for group in CLUSTER_ROLE_BINDINGS[name]
        ],
    }


def _reconcile(store: ObjectStore, wanted: KubeObject, field: str) -> str | None:
    """Create ``wanted`` if missing, else add the entries of ``field`` (rules or subjects) it lacks when it
    may be updated; what was done (``created``, ``updated``) or ``None``."""
    kind = type(wanted)
    existing = get_or_none(store, kind, wanted.metadata.name, None)
    if existing is None:
        try:
            store.create(wanted)
        except AlreadyExists:
            return None  # another process serving the same store got there first
        return "created"
    if existing.metadata.annotations.get(AUTOUPDATE, "true") == "false":
        return None
    have: list[dict[str, Any]] = getattr(existing, field)
    missing = [entry for entry in getattr(wanted, field) if entry not in have]
    if not missing:
        return None
    setattr(existing, field, [*have, *missing])
    try:
        store.update(existing)
    except Conflict:
        return None  # changed meanwhile: the next start reconciles it
    return "updated"


def ensure_bootstrap_policy(store: ObjectStore) -> list[str]:
    """Create (or complete) the bootstrap ClusterRoles and ClusterRoleBindings; what changed, as
    ``clusterroles/NAME`` and ``clusterrolebindings/NAME``."""
    changed: list[str] = []
    for name in CLUSTER_ROLES:
        if _reconcile(store, ClusterRole.model_validate(cluster_role(name)), "rules"):
            changed.append(f"clusterroles/{name}")
    for name in CLUSTER_ROLE_BINDINGS:
        if _reconcile(store, ClusterRoleBinding.model_validate(cluster_role_binding(name)), "subjects"):
            changed.append(f"clusterrolebindings/{name}")
    if changed:
        _log.info("bootstrap RBAC policy written", objects=changed)
    return changed
