"""RBAC enforced by ``capa serve`` (given an authorizer), judged by kube-apiserver, which authorizes with
RBAC: the same roles and bindings on both, the same callers, the same answers — what a refused request is
told, what a SubjectAccessReview answers and why, and what each caller may do.

The callers are named by a test-only stand-in for authentication on capa serve (see
:mod:`tests.apiserver.rbac_support`) and by client certificates on kube-apiserver.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest

from capa_py.apiserver.request_info import resolve
from tests.apiserver.rbac_support import (
    ADMIN,
    ANONYMOUS,
    Caller,
    Side,
    apply_all,
    enforcing_server,
    peer_side,
)
from tests.peers import cluster
from tests.peers.cluster import PeerCluster
from tests.support.eventually import eventually

NS = "rbac-test-team"
RBAC = "rbac.authorization.k8s.io/v1"
SAR = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SSRR = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"

ALICE = Caller("rbac-test-alice")
BOB = Caller("rbac-test-bob", ("rbac-test-team", "system:authenticated"))
ROBOT = Caller(
    f"system:serviceaccount:{NS}:robot",
    ("system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"),
)
CAROL = Caller("rbac-test-carol")
DAVE = Caller("rbac-test-dave")
ERIN = Caller("rbac-test-erin")
NOBODY = Caller("rbac-test-nobody")


def _role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta, "rules": rules}


def _binding(
    kind: str,
    name: str,
    role_kind: str,
    role: str,
    subjects: list[dict[str, Any]],
    namespace: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": RBAC,
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects,
    }


def _user(name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}


POLICY: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    _role(
        "Role",
        "rbac-test-reader",
        [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": ["special"],
                "verbs": ["get", "list"],
            },
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        ],
        NS,
    ),
    _binding(
        "RoleBinding",
        "rbac-test-readers",
        "Role",
        "rbac-test-reader",
        [
            _user(ALICE.user),
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "rbac-test-team"},
            {"kind": "ServiceAccount", "name": "robot"},  # the binding's namespace
        ],
        NS,
    ),
    _role(
        "ClusterRole",
        "rbac-test-status-writer",
        [
            {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["update", "patch"]},
            {"nonResourceURLs": ["/rbac-test/*"], "verbs": ["get"]},
        ],
    ),
    _binding(
        "ClusterRoleBinding",
        "rbac-test-status-writers",
        "ClusterRole",
        "rbac-test-status-writer",
        [{"kind": "ServiceAccount", "name": "robot", "namespace": NS}, _user(CAROL.user)],
    ),
    _role(
        "ClusterRole",
        "rbac-test-crd-viewer",
        [
            {
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"],
                "verbs": ["get"],
            }
        ],
    ),
    _binding(
        "RoleBinding", "rbac-test-crds-here", "ClusterRole", "rbac-test-crd-viewer", [_user(DAVE.user)], NS
    ),
    _binding("RoleBinding", "rbac-test-dangling", "Role", "rbac-test-missing", [_user(ERIN.user)], NS),
    _binding(
        "ClusterRoleBinding",
        "rbac-test-dangling",
        "ClusterRole",
        "rbac-test-missing-cluster-role",
        [_user(ERIN.user)],
    ),
]
"""The same roles and bindings on both servers (created once on the shared kube-apiserver)."""


def _resource(verb: str, resource: str, namespace: str = "", group: str = "", **more: str) -> dict[str, Any]:
    attributes = {"verb": verb, "resource": resource, "group": group, **more}
    if namespace:
        attributes["namespace"] = namespace
    return {"resourceAttributes": attributes}


QUESTIONS: list[tuple[Caller, dict[str, Any]]] = [
    (ALICE, _resource("get", "configmaps", NS)),
    (ALICE, _resource("list", "configmaps", "default")),
    (BOB, _resource("watch", "configmaps", NS)),
    (ROBOT, _resource("get", "configmaps", NS)),
    (ROBOT, _resource("update", "awsclusters", NS, "infrastructure.cluster.x-k8s.io", subresource="status")),
    (ROBOT, _resource("update", "awsclusters", NS, "infrastructure.cluster.x-k8s.io")),
    (ROBOT, {"nonResourceAttributes": {"verb": "get", "path": "/rbac-test/thing"}}),
    (ROBOT, {"nonResourceAttributes": {"verb": "get", "path": "/rbac-test"}}),
    (ALICE, _resource("get", "secrets", NS, name="special")),
    (ALICE, _resource("get", "secrets", NS, name="other")),
    (ALICE, _resource("list", "secrets", NS)),
    (ALICE, _resource("list", "secrets", NS, name="special")),
    (ALICE, _resource("create", "secrets", NS)),
    (ALICE, _resource("get", "pods", NS, subresource="log", name="p")),
    (ALICE, _resource("get", "pods", NS, name="p")),
    (CAROL, _resource("patch", "deployments", "default", "apps", subresource="status", name="d")),
    (CAROL, _resource("patch", "deployments", "default", "apps", name="d")),
    (DAVE, _resource("get", "customresourcedefinitions", NS, "apiextensions.k8s.io")),
    (DAVE, _resource("get", "customresourcedefinitions", "", "apiextensions.k8s.io")),
    (ERIN, _resource("get", "pods", NS)),
    (ERIN, _resource("get", "pods")),
    (
        Caller("system:anonymous", ("system:unauthenticated",)),
        {"nonResourceAttributes": {"verb": "get", "path": "/healthz"}},
    ),
    (
        Caller("system:anonymous", ("system:unauthenticated",)),
        {"nonResourceAttributes": {"verb": "get", "path": "/api"}},
    ),
    (NOBODY, {"nonResourceAttributes": {"verb": "get", "path": "/apis/apps"}}),
    (NOBODY, _resource("create", "selfsubjectaccessreviews", group="authorization.k8s.io")),
    (NOBODY, _resource("delete", "namespaces", name=NS)),
    (ADMIN, _resource("delete", "namespaces", name=NS)),
]
"""Who asks what: every kind of subject, rule and binding of :data:`POLICY`, allowed and not."""


@pytest.fixture
def sides(peer_cluster: PeerCluster, tmp_path: Path) -> Iterator[list[Side]]:
    peer = peer_side(peer_cluster, tmp_path / "certs")
    apply_all(peer, POLICY)
    with enforcing_server(tmp_path / "state.db") as capa:
        apply_all(capa, POLICY)
        yield [capa, peer]


def _review(caller: Caller, question: dict[str, Any]) -> dict[str, Any]:
    spec = {**question, "user": caller.user, "groups": list(caller.groups)}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def test_subject_access_reviews_answer_as_the_api_server_does(sides: list[Side]) -> None:
    """Allowed or not, and the reason: which binding of which role to which subject allowed it, or why a
    binding could not be used."""
    answers: dict[str, list[Any]] = {}
    for side in sides:
        answers[side.name] = []
        for caller, question in QUESTIONS:
            answer = side.send(ADMIN, "POST", SAR, _review(caller, question))
            assert answer.status == 201, (side.name, answer)
            answers[side.name].append((caller.user, question, answer.body["status"]))
    assert answers["capa serve"] == answers["kube-apiserver"]
    decided = [status["allowed"] for _, _, status in answers["capa serve"]]
    assert decided.count(True) >= 10
    assert decided.count(False) >= 10


# Anonymous requests are not among them: this peer admits anonymous callers and its RBAC refuses them 403,
# while capa serve refuses them 401 at authentication, as a kube-apiserver admitting anonymous callers on the
# public endpoints only does (tests/apiserver/test_authentication.py compares that).
REQUESTS: list[tuple[Caller, str, str, Any]] = [
    (NOBODY, "GET", f"/api/v1/namespaces/{NS}/secrets/x", None),
    (NOBODY, "GET", f"/api/v1/namespaces/{NS}/secrets", None),
    (NOBODY, "GET", f"/api/v1/namespaces/{NS}/secrets?watch=true", None),
    (NOBODY, "POST", f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": "c"}}),
    (NOBODY, "DELETE", f"/api/v1/namespaces/{NS}/configmaps", None),
    (NOBODY, "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", None),
    (NOBODY, "DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin", None),
    (NOBODY, "GET", f"/api/v1/namespaces/{NS}", None),
    (NOBODY, "PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/d/status", {"status": {}}),
    (NOBODY, "GET", "/apis/infrastructure.cluster.x-k8s.io/v1beta2/namespaces/default/awsclusters", None),
    (NOBODY, "GET", "/rbac-test/elsewhere", None),
    (ALICE, "PUT", f"/api/v1/namespaces/{NS}/configmaps/c", {"metadata": {"name": "c"}}),
    (ALICE, "GET", "/api/v1/configmaps", None),
    (ROBOT, "GET", f"/api/v1/namespaces/{NS}/secrets?fieldSelector=metadata.name%3Dother", None),
]
"""Requests each caller may not make, of every shape: a named object, a collection, a watch, the cluster
scope, a subresource, an unknown resource, a path, and the anonymous caller."""


def test_refusals_are_worded_as_the_api_server_words_them(sides: list[Side]) -> None:
    refusals: dict[str, list[Any]] = {}
    for side in sides:
        answers = [side.send(caller, method, path, body) for caller, method, path, body in REQUESTS]
        refusals[side.name] = [(answer.status, answer.body) for answer in answers]
    assert refusals["capa serve"] == refusals["kube-apiserver"]
    assert {status for status, _ in refusals["capa serve"]} == {403}


ALLOWED: list[tuple[Caller, str, str]] = [
    (ALICE, "GET", f"/api/v1/namespaces/{NS}/configmaps"),
    (ALICE, "GET", f"/api/v1/namespaces/{NS}/configmaps?watch=1"),
    (ALICE, "GET", f"/api/v1/namespaces/{NS}/configmaps/absent"),
    (ALICE, "GET", f"/api/v1/namespaces/{NS}/secrets?fieldSelector=metadata.name%3Dspecial"),
    (ALICE, "GET", f"/api/v1/namespaces/{NS}/secrets/special"),
    (BOB, "GET", f"/api/v1/namespaces/{NS}/configmaps"),
    (ROBOT, "GET", f"/api/v1/namespaces/{NS}/configmaps"),
    (ANONYMOUS, "GET", "/version"),
    (NOBODY, "GET", "/version"),
    (NOBODY, "GET", "/api"),
    (ADMIN, "GET", "/api/v1/namespaces/default/secrets"),
]


def test_what_a_role_allows_is_served_and_self_reviews_agree(sides: list[Side]) -> None:
    """An allowed request is served (200, or 404 for an object that does not exist) on both servers; the
    caller's own SelfSubjectAccessReview agrees with what was enforced, for what was allowed and for what
    was refused."""
    served = {side.name: [side.send(c, m, p, None).status for c, m, p in ALLOWED] for side in sides}
    assert served["capa serve"] == served["kube-apiserver"]
    assert set(served["capa serve"]) <= {200, 404}
    capa = sides[0]
    for caller, method, path, _ in REQUESTS + [(c, m, p, None) for c, m, p in ALLOWED]:
        if not caller.user:
            continue  # the anonymous caller may not ask
        review = capa.send(caller, "POST", SSAR, _self_review(method, path))
        enforced = capa.send(caller, method, path, None).status != 403
        assert review.status == 201, review
        assert review.body["status"]["allowed"] is enforced, (caller, method, path)


def _self_review(method: str, path: str) -> dict[str, Any]:
    bare, _, query = path.partition("?")
    info = resolve(method, bare, dict(parse_qsl(query)))
    key = "resourceAttributes" if info.is_resource_request else "nonResourceAttributes"
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {key: info.review_attributes()},
    }


def test_an_aggregated_cluster_role_allows_what_its_selected_roles_allow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-apiserver's aggregation controller (in kube-controller-manager) fills an aggregated role's rules
    with those of the roles its selectors match, including a second one matching a second selector; capa
    serve evaluates that union. A control plane of its own runs that controller (the shared peer does
    not); once it has filled the role in, both answer the same reviews."""
    monkeypatch.setattr(cluster, "CONTROLLERS", f"{cluster.CONTROLLERS},clusterrole-aggregation-controller")
    label = "rbac-test/aggregate-to-agg"
    policy = [
        {
            "apiVersion": RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": "rbac-test-agg"},
            "aggregationRule": {
                "clusterRoleSelectors": [
                    {"matchLabels": {label: "true"}},
                    {"matchExpressions": [{"key": "rbac-test/tier", "operator": "In", "values": ["gold"]}]},
                ]
            },
        },
        {
            **_role("ClusterRole", "", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]),
            "metadata": {"name": "rbac-test-part", "labels": {label: "true"}},
        },
        {
            **_role(
                "ClusterRole", "", [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}]
            ),
            "metadata": {"name": "rbac-test-gold", "labels": {"rbac-test/tier": "gold"}},
        },
        {
            **_role("ClusterRole", "", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
            "metadata": {
                "name": "rbac-test-unselected",
                "labels": {label: "false", "rbac-test/tier": "silver"},
            },
        },
        _binding("ClusterRoleBinding", "rbac-test-agg", "ClusterRole", "rbac-test-agg", [_user(ALICE.user)]),
    ]
    questions = [
        _resource("get", "nodes", name="n"),
        _resource("list", "deployments", NS, "apps"),
        _resource("get", "pods", NS, name="p"),
        _resource("list", "nodes"),
    ]
    answers: dict[str, list[Any]] = {}
    with (
        cluster.running(directory=tmp_path / "peer") as own_peer,
        enforcing_server(tmp_path / "state.db") as capa,
    ):
        peer = peer_side(own_peer, tmp_path / "certs")
        for side in (capa, peer):
            apply_all(side, policy)
        aggregated = f"/apis/{RBAC}/clusterroles/rbac-test-agg"
        eventually(
            lambda: len(peer.send(ADMIN, "GET", aggregated).body.get("rules") or []) >= 2,
            "the aggregation controller filling the role in",
            timeout=60,
            interval=0.2,
        )
        for side in (capa, peer):
            answers[side.name] = [
                side.send(ADMIN, "POST", SAR, _review(ALICE, question)).body["status"]
                for question in questions
            ]
    assert answers["capa serve"] == answers["kube-apiserver"]
    assert [status["allowed"] for status in answers["capa serve"]] == [True, True, False, False]


def _canonical(rules: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(rule, sort_keys=True) for rule in rules)


def test_self_subject_rules_reviews_list_the_rules_the_api_server_lists(sides: list[Side]) -> None:
    """``kubectl auth can-i --list``: the rules of every role bound to the caller there (in no particular
    order, as kube-apiserver lists them), and whether a binding's role could not be read."""
    listed: dict[str, list[Any]] = {}
    for side in sides:
        listed[side.name] = []
        for caller, namespace in ((ALICE, NS), (ROBOT, NS), (ERIN, NS), (NOBODY, "default")):
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview"}
            answer = side.send(caller, "POST", SSRR, {**body, "spec": {"namespace": namespace}})
            assert answer.status == 201, (side.name, answer)
            status = answer.body["status"]
            assert (answer.body["metadata"], answer.body["spec"]) == ({}, {})
            listed[side.name].append(
                (
                    _canonical(status["resourceRules"]),
                    _canonical(status["nonResourceRules"]),
                    status["incomplete"],
                    status.get("evaluationError"),
                )
            )
    assert listed["capa serve"] == listed["kube-apiserver"]


def test_a_subject_access_review_without_a_subject_is_refused_as_the_api_server_refuses_it(
    sides: list[Side],
) -> None:
    question = {"spec": _resource("get", "pods", NS)}
    refused = [side.send(ADMIN, "POST", SAR, question) for side in sides]
    assert refused[0] == refused[1]
    assert refused[0].status == 422


MALLORY = Caller("rbac-test-mallory")
ESCALATION_POLICY: list[dict[str, Any]] = [
    _role(
        "Role",
        "rbac-test-role-writer",
        [
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["roles", "rolebindings"],
                "verbs": ["create", "update", "get"],
            },
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
        ],
        NS,
    ),
    _binding(
        "RoleBinding", "rbac-test-role-writers", "Role", "rbac-test-role-writer", [_user(MALLORY.user)], NS
    ),
    _role(
        "ClusterRole",
        "rbac-test-binder",
        [
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "resourceNames": ["rbac-test-crd-viewer"],
                "verbs": ["bind"],
            }
        ],
    ),
    _binding(
        "RoleBinding", "rbac-test-binders", "ClusterRole", "rbac-test-binder", [_user(MALLORY.user)], NS
    ),
]


def test_roles_and_bindings_grant_only_what_their_writer_holds(sides: list[Side]) -> None:
    """Escalation prevention: a role's rules, or a binding's role, must be held by whoever writes it,
    unless they may ``escalate`` or ``bind`` it or are in system:masters; the refusal lists what is not
    held, as kube-apiserver lists it."""
    suffix = uuid.uuid4().hex[:6]
    roles = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"
    bindings = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"
    narrow = _role(
        "Role", f"narrow-{suffix}", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}], NS
    )
    wider = {
        **narrow,
        "rules": [
            *narrow["rules"],
            {"apiGroups": [""], "resources": ["secrets", "pods"], "verbs": ["get", "list"]},
        ],
    }
    steps: list[tuple[Caller, str, str, dict[str, Any]]] = [
        (MALLORY, "POST", roles, {**wider, "metadata": {"name": f"wide-{suffix}", "namespace": NS}}),
        (MALLORY, "POST", roles, narrow),
        (MALLORY, "PUT", f"{roles}/narrow-{suffix}", wider),
        (
            MALLORY,
            "POST",
            bindings,
            _binding(
                "RoleBinding", f"admin-{suffix}", "ClusterRole", "cluster-admin", [_user(MALLORY.user)], NS
            ),
        ),
        (
            MALLORY,
            "POST",
            bindings,
            _binding(
                "RoleBinding", f"reader-{suffix}", "Role", "rbac-test-reader", [_user(MALLORY.user)], NS
            ),
        ),
        (
            MALLORY,
            "POST",
            bindings,
            _binding("RoleBinding", f"narrow-{suffix}", "Role", f"narrow-{suffix}", [_user(ALICE.user)], NS),
        ),
        (
            MALLORY,
            "POST",
            bindings,
            _binding(
                "RoleBinding",
                f"crds-{suffix}",
                "ClusterRole",
                "rbac-test-crd-viewer",
                [_user(ALICE.user)],
                NS,
            ),
        ),
        (
            MALLORY,
            "POST",
            bindings,
            _binding(
                "RoleBinding", f"missing-{suffix}", "Role", "rbac-test-missing", [_user(ALICE.user)], NS
            ),
        ),
        (ADMIN, "POST", roles, {**wider, "metadata": {"name": f"wide-{suffix}", "namespace": NS}}),
    ]
    seen: dict[str, list[Any]] = {}
    for side in sides:
        apply_all(side, ESCALATION_POLICY)
        seen[side.name] = []
        for caller, method, path, body in steps:
            answer = side.send(caller, method, path, body)
            seen[side.name].append((answer.status, answer.body if answer.status >= 400 else None))
    assert seen["capa serve"] == seen["kube-apiserver"]
    assert [status for status, _ in seen["capa serve"]].count(403) >= 4


def test_a_bindings_role_cannot_change(sides: list[Side]) -> None:
    """Pointing a binding at another role is refused (422), as kube-apiserver refuses it: without it, a
    binding could be turned into a grant of anything while keeping its subjects. Stored as written before."""
    name = f"rbac-test-fixed-{uuid.uuid4().hex[:6]}"
    bindings = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"
    first = _binding("RoleBinding", name, "Role", "rbac-test-reader", [_user(ALICE.user)], NS)
    moved = {**first, "roleRef": {**first["roleRef"], "kind": "ClusterRole", "name": "cluster-admin"}}
    relabelled = {**first, "metadata": {**first["metadata"], "labels": {"team": "a"}}}
    seen = {}
    for side in sides:
        answers = [
            side.send(ADMIN, "POST", bindings, first),
            side.send(ADMIN, "PUT", f"{bindings}/{name}", moved),
            side.send(ADMIN, "PUT", f"{bindings}/{name}", relabelled),
        ]
        seen[side.name] = [(a.status, a.body if a.status >= 400 else None) for a in answers]
    assert seen["capa serve"] == seen["kube-apiserver"]
    assert [status for status, _ in seen["capa serve"]] == [201, 422, 200]
