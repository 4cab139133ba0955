"""Who a request to ``capa serve`` is from, compared with a real kube-apiserver that authenticates the same
way: client certificates of its CA, a static token file (``--token-auth-file``), ServiceAccount tokens it
issues, and anonymous requests admitted to the public information endpoints only (an
``AuthenticationConfiguration`` whose ``anonymous`` block lists ``/version``, ``/healthz``, ``/livez`` and
``/readyz``). Before ``capa serve`` authenticated, every one of these requests was answered as if an admin
made it (an anonymous read of a Secret was 200)."""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from capa_py.apiserver import RunningServer, start_in_thread
from capa_py.apiserver.authentication import CREDENTIAL_ID, ServiceAccountTokens, read_token_file
from capa_py.apiserver.certificates import Authority, new_signing_key
from capa_py.runtime.leader import STORE_LEASE_NAME, STORE_LEASE_NAMESPACE
from capa_py.store import SQLiteStore
from tests.peers.cluster import PeerCluster, client_cert_user, kubeconfig, running
from tests.peers.kubectl import find_kubectl

TOKENS = 'alice-token,alice,uid-alice,"dev,ops"\nbob-token,bob,uid-bob\n'
ANONYMOUS_ON_PUBLIC_PATHS = {
    "apiVersion": "apiserver.config.k8s.io/v1",
    "kind": "AuthenticationConfiguration",
    "anonymous": {
        "enabled": True,
        "conditions": [{"path": p} for p in ("/livez", "/readyz", "/healthz", "/version")],
    },
}
SSR = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kept"}, "stringData": {"key": "hidden"}}


@dataclass
class Side:
    """One server as a client sees it: its URL, its CA, and its admin's kubeconfig and TLS context."""

    name: str
    url: str
    ca_pem: bytes
    admin_kubeconfig: Path
    admin: ssl.SSLContext

    def context(self) -> ssl.SSLContext:
        """A context that trusts the server and presents no certificate."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())

    def ask(
        self,
        method: str,
        path: str,
        body: Any = None,
        context: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, context=context or self.context(), timeout=30) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            with exc:
                raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def token_kubeconfig(self, path: Path, token: str) -> Path:
        path.write_text(yaml.safe_dump(kubeconfig(self.url, self.ca_pem, {"token": token}, name=self.name)))
        return path


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PeerCluster]:
    """A kube-apiserver of its own: anonymous on the public endpoints only, and the token file."""
    directory = tmp_path_factory.mktemp("authn-peer")
    (directory / "authn.yaml").write_text(yaml.safe_dump(ANONYMOUS_ON_PUBLIC_PATHS))
    (directory / "tokens.csv").write_text(TOKENS)
    arguments = (
        f"--authentication-config={directory / 'authn.yaml'}",
        f"--token-auth-file={directory / 'tokens.csv'}",
    )
    with running(
        directory=directory / "cluster", controller_manager=False, extra_apiserver_args=arguments
    ) as c:
        yield c


@pytest.fixture(scope="module")
def capa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """capa serve over a store of its own, with the same token file."""
    directory = tmp_path_factory.mktemp("authn-capa")
    (directory / "tokens.csv").write_text(TOKENS)
    with SQLiteStore(directory / "state.db", poll_interval=0.02) as store:
        server = start_in_thread(store, tokens=read_token_file(directory / "tokens.csv"))
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def sides(peer: PeerCluster, capa: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> list[Side]:
    capa_config = capa.write_kubeconfig(tmp_path_factory.mktemp("authn-kubeconfig") / "capa.kubeconfig")
    return [
        Side("kube-apiserver", peer.url, peer.ca_pem, peer.admin_kubeconfig, peer.admin_context()),
        Side("capa serve", capa.url, capa.ca_pem, capa_config, capa.client_context()),
    ]


def _namespace(side: Side) -> str:
    name = f"authn-{uuid.uuid4().hex[:8]}"
    status, body = side.ask("POST", "/api/v1/namespaces", {"metadata": {"name": name}}, side.admin)
    assert status == 201, (side.name, body)
    return name


def _kubectl(kubeconfig_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    found = find_kubectl()
    if found.path is None:
        pytest.skip(found.reason)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(kubeconfig_path.parent),
        "KUBECONFIG": str(kubeconfig_path),
    }
    return subprocess.run(
        [str(found.path), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_anonymous_requests_reach_the_public_information_endpoints_only(sides: list[Side]) -> None:
    paths = (
        "/version",
        "/healthz",
        "/livez",
        "/readyz",
        "/api",
        "/apis",
        "/api/v1/namespaces",
        "/openapi/v2",
    )
    answers = {side.name: [side.ask("GET", path) for path in paths] for side in sides}
    statuses = {name: [status for status, _ in replies] for name, replies in answers.items()}
    assert statuses["capa serve"] == statuses["kube-apiserver"] == [200, 200, 200, 200, 401, 401, 401, 401]
    refused = {name: replies[4][1] for name, replies in answers.items()}
    assert refused["capa serve"] == refused["kube-apiserver"]
    assert refused["capa serve"]["reason"] == "Unauthorized"


def test_an_anonymous_read_of_a_secret_is_401_and_shows_nothing(sides: list[Side]) -> None:
    for side in sides:
        namespace = _namespace(side)
        path = f"/api/v1/namespaces/{namespace}/secrets"
        assert side.ask("POST", path, SECRET, side.admin)[0] == 201
        status, body = side.ask("GET", f"{path}/kept")
        assert (status, body["reason"]) == (401, "Unauthorized"), side.name
        assert "hidden" not in json.dumps(body)
        assert "aGlkZGVu" not in json.dumps(body)
        assert side.ask("GET", path)[0] == 401
        assert side.ask("GET", f"{path}/kept", context=side.admin)[0] == 200


def test_a_bad_token_is_401_even_where_anonymous_requests_are_admitted(sides: list[Side]) -> None:
    replies = {
        side.name: [side.ask("GET", p, token="not-a-token") for p in ("/version", "/api")] for side in sides
    }
    assert replies["capa serve"] == replies["kube-apiserver"]
    assert [status for status, _ in replies["capa serve"]] == [401, 401]


def test_an_empty_bearer_token_is_no_credential(sides: list[Side]) -> None:
    replies = {side.name: [side.ask("GET", p, token="")[0] for p in ("/version", "/api")] for side in sides}
    assert replies["capa serve"] == replies["kube-apiserver"] == [200, 401]


def test_the_token_file_authenticates_its_users_as_kube_apiserver_reads_it(sides: list[Side]) -> None:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    seen = {}
    for side in sides:
        users = []
        for token in ("alice-token", "bob-token"):
            status, body = side.ask("POST", SSR, review, token=token)
            assert status == 201, (side.name, body)
            users.append(body["status"]["userInfo"])
        seen[side.name] = users
    assert seen["capa serve"] == seen["kube-apiserver"]
    assert seen["capa serve"][0] == {
        "username": "alice",
        "uid": "uid-alice",
        "groups": ["dev", "ops", "system:authenticated"],
    }


def test_kubectl_auth_whoami_names_the_client_certificates_user_and_groups(
    sides: list[Side], peer: PeerCluster, capa: RunningServer, tmp_path: Path
) -> None:
    peer_config = peer.user_kubeconfig(tmp_path / "peer.kubeconfig", "carol", ("team-a", "team-b"))
    cert, key = capa.client_certificate("carol", ("team-a", "team-b"))
    capa_config = tmp_path / "capa.kubeconfig"
    capa_config.write_text(yaml.safe_dump(kubeconfig(capa.url, capa.ca_pem, client_cert_user(cert, key))))
    seen = []
    for path in (peer_config, capa_config):
        done = _kubectl(path, "auth", "whoami", "-o", "json")
        assert done.returncode == 0, done.stderr
        seen.append(json.loads(done.stdout)["status"]["userInfo"])
    der = x509.load_pem_x509_certificate(cert).public_bytes(serialization.Encoding.DER)
    assert seen[1].pop("extra") == {CREDENTIAL_ID: [f"X509SHA256={hashlib.sha256(der).hexdigest()}"]}
    assert list(seen[0].pop("extra")) == [CREDENTIAL_ID]
    assert seen[0] == seen[1] == {"username": "carol", "groups": ["team-a", "team-b", "system:authenticated"]}


def test_the_admin_kubeconfig_is_in_system_masters(sides: list[Side]) -> None:
    done = _kubectl(sides[1].admin_kubeconfig, "auth", "whoami", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"]["userInfo"]["groups"] == [
        "system:masters",
        "system:authenticated",
    ]


def test_a_client_certificate_of_another_authority_is_refused(capa: RunningServer, tmp_path: Path) -> None:
    """(kube-apiserver completes the handshake and answers 401; capa serve refuses it in the handshake.)"""
    cert, key = Authority.create("someone-else").issue_client("mallory", ("system:masters",))
    (tmp_path / "c.crt").write_bytes(cert)
    (tmp_path / "c.key").write_bytes(key)
    context = ssl.create_default_context(cadata=capa.ca_pem.decode())
    context.load_cert_chain(tmp_path / "c.crt", tmp_path / "c.key")
    request = urllib.request.Request(capa.url + "/api/v1/namespaces/default/secrets")
    refused = (ssl.SSLError, ConnectionError, urllib.error.URLError)
    with pytest.raises(refused), urllib.request.urlopen(request, context=context, timeout=30):
        pass


def test_kubectl_create_token_gives_a_token_that_authenticates_as_the_service_account(
    sides: list[Side], tmp_path: Path
) -> None:
    seen = {}
    for side in sides:
        namespace = _namespace(side)
        created = _kubectl(side.admin_kubeconfig, "-n", namespace, "create", "serviceaccount", "robot")
        assert created.returncode == 0, created.stderr
        issued = _kubectl(side.admin_kubeconfig, "-n", namespace, "create", "token", "robot")
        assert issued.returncode == 0, issued.stderr
        token = issued.stdout.strip()
        config_path = side.token_kubeconfig(tmp_path / f"{side.name}.kubeconfig", token)
        whoami = _kubectl(config_path, "auth", "whoami", "-o", "json")
        assert whoami.returncode == 0, whoami.stderr
        info = json.loads(whoami.stdout)["status"]["userInfo"]
        _status, account = side.ask(
            "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/robot", context=side.admin
        )
        assert info["uid"] == account["metadata"]["uid"], side.name
        seen[side.name] = {
            "username": info["username"].replace(namespace, "NS"),
            "groups": [g.replace(namespace, "NS") for g in info["groups"]],
            "extra": sorted(info.get("extra", {})),
        }
        listed = _kubectl(config_path, "get", "--raw", "/api")
        assert listed.returncode == 0, listed.stderr
    assert seen["capa serve"] == seen["kube-apiserver"]
    assert seen["capa serve"]["username"] == "system:serviceaccount:NS:robot"
    assert seen["capa serve"]["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:NS",
        "system:authenticated",
    ]


def test_token_requests_are_refused_as_kube_apiserver_refuses_them(sides: list[Side]) -> None:
    answers = {}
    for side in sides:
        namespace = _namespace(side)
        side.ask(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"metadata": {"name": "robot"}},
            side.admin,
        )
        base = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        short = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 60},
        }
        answers[side.name] = [
            side.ask("POST", f"{base}/robot/token", short, side.admin),
            side.ask("POST", f"{base}/nobody/token", {"spec": {}}, side.admin),
            side.ask("POST", f"{base}/robot/token", {"spec": {}}),
        ]
    for (capa_status, capa_body), (peer_status, peer_body) in zip(
        answers["capa serve"], answers["kube-apiserver"], strict=True
    ):
        assert capa_status == peer_status
        assert (capa_body["reason"], capa_body["message"]) == (peer_body["reason"], peer_body["message"])
    assert [status for status, _ in answers["capa serve"]] == [422, 404, 401]


def test_expired_forged_and_orphaned_service_account_tokens_are_401(
    capa: RunningServer, sides: list[Side]
) -> None:
    side = sides[1]
    namespace = _namespace(side)
    base = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    _, account = side.ask("POST", base, {"metadata": {"name": "robot"}}, side.admin)
    uid = account["metadata"]["uid"]
    own = ServiceAccountTokens(capa.files.signing_key.read_bytes())
    forged = ServiceAccountTokens(new_signing_key())
    audiences = own.audiences
    valid = own.issue(namespace, "robot", uid, audiences, 3600).token
    assert side.ask("GET", "/api", token=valid)[0] == 200
    expired = own.issue(namespace, "robot", uid, audiences, -60).token
    other_audience = own.issue(namespace, "robot", uid, ("https://elsewhere",), 3600).token
    other_uid = own.issue(namespace, "robot", str(uuid.uuid4()), audiences, 3600).token
    signed_elsewhere = forged.issue(namespace, "robot", uid, audiences, 3600).token
    header, _claims, signature = valid.split(".")
    tampered = ".".join((header, other_uid.split(".")[1], signature))
    for token in (expired, other_audience, other_uid, signed_elsewhere, tampered):
        status, body = side.ask("GET", "/api", token=token)
        assert (status, body["reason"]) == (401, "Unauthorized")
    # The ServiceAccount deleted, then made again under the same name: the old token is refused.
    assert side.ask("DELETE", f"{base}/robot", context=side.admin)[0] == 200
    assert side.ask("GET", "/api", token=valid)[0] == 401
    assert side.ask("POST", base, {"metadata": {"name": "robot"}}, side.admin)[0] == 201
    assert side.ask("GET", "/api", token=valid)[0] == 401


def test_the_controllers_lease_cannot_be_taken_without_credentials(
    capa: RunningServer, sides: list[Side]
) -> None:
    side = sides[1]
    path = f"/apis/coordination.k8s.io/v1/namespaces/{STORE_LEASE_NAMESPACE}/leases"
    side.ask("POST", "/api/v1/namespaces", {"metadata": {"name": STORE_LEASE_NAMESPACE}}, side.admin)
    lease = {"metadata": {"name": STORE_LEASE_NAME}, "spec": {"holderIdentity": "the-controller"}}
    status, held = side.ask("POST", path, lease, side.admin)
    assert status == 201, held
    taken = {**held, "spec": {**held["spec"], "holderIdentity": "intruder"}}
    for token in (None, "not-a-token"):
        status, body = side.ask("PUT", f"{path}/{STORE_LEASE_NAME}", taken, token=token)
        assert (status, body["reason"]) == (401, "Unauthorized")
    _, now = side.ask("GET", f"{path}/{STORE_LEASE_NAME}", context=side.admin)
    assert now["spec"]["holderIdentity"] == "the-controller"


def test_kubectl_and_the_official_client_with_and_without_credentials(
    capa: RunningServer, tmp_path: Path
) -> None:
    admin = capa.write_kubeconfig(tmp_path / "admin.kubeconfig")
    made = _kubectl(admin, "create", "secret", "generic", "kubectl-made", "--from-literal=k=v")
    assert made.returncode == 0, made.stderr
    listed = _kubectl(admin, "get", "secrets", "-o", "name")
    assert "secret/kubectl-made" in listed.stdout
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text(yaml.safe_dump(kubeconfig(capa.url, capa.ca_pem, {"token": "not-a-token"})))
    refused = _kubectl(bad, "get", "secrets")
    assert refused.returncode != 0
    assert "You must be logged in to the server (Unauthorized)" in refused.stderr
    with config.new_client_from_config(config_file=str(admin)) as api:
        names = [s.metadata.name for s in client.CoreV1Api(api).list_namespaced_secret("default").items]
    assert "kubectl-made" in names
    configuration = client.Configuration()
    configuration.host = capa.url
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(capa.ca_pem)
    configuration.ssl_ca_cert = str(ca_file)
    with client.ApiClient(configuration) as api, pytest.raises(ApiException) as anonymous:
        client.CoreV1Api(api).read_namespaced_secret("kubectl-made", "default")
    assert anonymous.value.status == 401
