"""``kubectl auth can-i`` (SelfSubjectAccessReview) and ``kubectl auth whoami`` (SelfSubjectReview) against
``capa serve``, which served neither before (kubectl found no ``authorization.k8s.io`` group). The real API
server judges discovery, the reviews' shape and their errors; the answers are capa serve's own: it has no
authentication yet, so every caller is the anonymous caller and is allowed everything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from capa_py.apiserver.reviews import UNAUTHENTICATED_CALLER, User, authenticated, caller
from tests.apiserver.apiserver_support import Server
from tests.apiserver.peer_support import Endpoint, capa_endpoint, peer_endpoint
from tests.peers.cluster import PeerCluster
from tests.peers.kubectl import kubectl_binary

GROUPS = ("authentication.k8s.io", "authorization.k8s.io")
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SSR = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


@pytest.fixture
def both(server: Server, peer_cluster: PeerCluster, tmp_path: Path) -> list[Endpoint]:
    return [capa_endpoint(server, tmp_path / "capa"), peer_endpoint(peer_cluster)]


def test_discovery_lists_the_review_groups_as_the_api_server_does(both: list[Endpoint]) -> None:
    seen: dict[str, Any] = {}
    for endpoint in both:
        listed = {g["name"]: g for g in endpoint.send("GET", "/apis").json()["groups"] if g["name"] in GROUPS}
        documents = {group: endpoint.send("GET", f"/apis/{group}").json() for group in GROUPS}
        resources = {
            group: {r["name"]: r for r in endpoint.send("GET", f"/apis/{group}/v1").json()["resources"]}
            for group in GROUPS
        }
        seen[endpoint.name] = (listed, documents, resources)
    capa, real = seen["capa serve"], seen["kube-apiserver"]
    assert capa[:2] == real[:2]
    assert set(capa[0]) == set(GROUPS)
    served = {group: sorted(capa[2][group]) for group in GROUPS}
    assert served == {
        "authentication.k8s.io": ["selfsubjectreviews"],
        "authorization.k8s.io": [
            "selfsubjectaccessreviews",
            "selfsubjectrulesreviews",
            "subjectaccessreviews",
        ],
    }
    for group, names in served.items():
        for name in names:
            assert capa[2][group][name] == real[2][group][name]


@pytest.mark.parametrize("version", ["1.27", "1.32", "1.33"])
def test_kubectl_auth_can_i(version: str, both: list[Endpoint], tmp_path: Path) -> None:
    """1.27 sends the review as JSON, 1.32 and 1.33 as protobuf."""
    binary = kubectl_binary(version)
    if binary is None:
        pytest.skip(f"kubectl.{version} is not installed")
    questions = [
        ("create", "awsclusters"),
        ("delete", "secrets", "-n", "kube-system"),
        ("patch", "awsclusters.infrastructure.cluster.x-k8s.io/status"),
        ("get", "/healthz"),
    ]
    answers = {}
    for endpoint in both:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(endpoint.kubeconfig),
        }
        answers[endpoint.name] = [
            subprocess.run(
                [binary, "auth", "can-i", *question],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            ).stdout
            for question in questions
        ]
    assert answers["capa serve"] == answers["kube-apiserver"] == ["yes\n"] * len(questions)


def test_kubectl_auth_whoami_names_the_authenticated_caller(both: list[Endpoint], tmp_path: Path) -> None:
    """Both kubeconfigs carry an admin client certificate in system:masters (capa serve answered
    system:anonymous when it authenticated no one)."""
    binary = kubectl_binary("1.33") or shutil.which("kubectl")
    if binary is None:
        pytest.skip("no kubectl")
    reviews = {}
    for endpoint in both:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(endpoint.kubeconfig),
        }
        done = subprocess.run(
            [binary, "auth", "whoami", "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (endpoint.name, done.stderr)
        reviews[endpoint.name] = json.loads(done.stdout)
    capa, real = reviews["capa serve"], reviews["kube-apiserver"]
    assert (capa["kind"], capa["apiVersion"]) == (real["kind"], real["apiVersion"])
    assert set(capa["metadata"]) == set(real["metadata"]) == {"creationTimestamp"}
    assert capa["status"]["userInfo"]["username"] == "capa-serve-admin"
    assert capa["status"]["userInfo"]["groups"] == real["status"]["userInfo"]["groups"]
    assert capa["status"]["userInfo"]["groups"] == ["system:masters", "system:authenticated"]
    assert set(capa["status"]["userInfo"]["extra"]) == set(real["status"]["userInfo"]["extra"])


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        (
            "POST",
            SSAR,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}},
        ),
        ("GET", SSAR, None),
        ("GET", f"{SSAR}/x", None),
        ("PUT", SSR, {}),
    ],
)
def test_review_errors_match_the_api_server(
    both: list[Endpoint], method: str, path: str, body: dict[str, Any] | None
) -> None:
    answers = {}
    for endpoint in both:
        reply = endpoint.send(method, path, body)
        status = reply.json()
        answers[endpoint.name] = (
            reply.status,
            status["reason"],
            status["message"],
            status.get("details", {}).get("causes"),
        )
    assert answers["capa serve"] == answers["kube-apiserver"]


def test_an_access_review_of_the_admin_is_allowed_by_its_group(server: Server, tmp_path: Path) -> None:
    """The kubeconfig's admin is in system:masters, which may do everything (no RBAC rule gives a reason,
    as on kube-apiserver)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "delete", "resource": "secrets", "namespace": "x"}},
    }
    reply = capa_endpoint(server, tmp_path).send("POST", SSAR, review)
    assert reply.status == 201
    answered = reply.json()
    assert answered["spec"] == review["spec"]
    assert answered["status"] == {"allowed": True}


def test_the_caller_is_what_authentication_sets_on_the_request() -> None:
    request = make_mocked_request("POST", SSR)
    assert caller(request) == UNAUTHENTICATED_CALLER
    alice = User("alice", uid="1", groups=("dev",))
    authenticated(request, alice)
    assert caller(request) == alice
    assert alice.user_info() == {"username": "alice", "uid": "1", "groups": ["dev"]}
