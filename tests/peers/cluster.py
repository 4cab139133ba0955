"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-controller-manager from the
peers' binary, as envtest starts them for controller-runtime projects.

:func:`start` generates a CA, the API server's serving certificate (127.0.0.1, localhost and the in-cluster
names), an admin client certificate (``system:masters``) and the service-account signing key, starts the three
components on free loopback ports with their data under one directory, and returns once ``/readyz`` answers
and the system namespaces exist. The API server authorizes with RBAC and writes an audit log (every request at
the Metadata level, JSON lines) that tests read to see what a client asked for.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.peers.build import build
from tests.support.eventually import eventually

READY_TIMEOUT = 180.0
CONTROLLERS = "garbage-collector-controller,namespace-controller,serviceaccount-controller"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class Authority:
    """A certificate authority that signs serving and client certificates."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, common_name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.now(UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @property
    def pem(self) -> bytes:
        return _pem_cert(self.cert)

    def issue(
        self,
        common_name: str,
        organizations: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        client: bool = False,
    ) -> tuple[bytes, bytes]:
        """A certificate and its key (PEM): for serving ``hosts``/``ips``, or for a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.now(UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
        )
        if hosts or ips:
            names: list[x509.GeneralName] = [x509.DNSName(h) for h in hosts]
            names += [x509.IPAddress(IPv4Address(ip)) for ip in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return _pem_cert(cert), _pem_key(key)


def kubeconfig(server: str, ca_pem: bytes, user: dict[str, Any], name: str = "peer") -> dict[str, Any]:
    """A kubeconfig with one cluster, one user and one context, current."""
    import base64

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def client_cert_user(cert_pem: bytes, key_pem: bytes) -> dict[str, str]:
    import base64

    return {
        "client-certificate-data": base64.b64encode(cert_pem).decode(),
        "client-key-data": base64.b64encode(key_pem).decode(),
    }


@dataclass
class PeerCluster:
    """A running control plane. ``admin_kubeconfig`` authenticates as ``system:masters``."""

    directory: Path
    url: str
    etcd_url: str
    authority: Authority
    admin_kubeconfig: Path
    audit_log: Path
    binary: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    owns_directory: bool = False

    @property
    def ca_pem(self) -> bytes:
        return self.authority.pem

    def ssl_context(self, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        if cert is not None and key is not None:
            context.load_cert_chain(str(cert), str(key))
        return context

    def admin_context(self) -> ssl.SSLContext:
        return self.ssl_context(self.directory / "pki" / "admin.crt", self.directory / "pki" / "admin.key")

    def request(self, path: str, method: str = "GET", body: Any = None) -> Any:
        """One request as the admin (JSON in and out); HTTPError for an error status."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, context=self.admin_context(), timeout=30) as response:
            return json.loads(response.read() or b"null")

    def user_kubeconfig(self, path: Path, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig authenticating with a client certificate for ``user`` in ``groups``."""
        cert, key = self.authority.issue(user, groups, client=True)
        path.write_text(yaml.safe_dump(kubeconfig(self.url, self.ca_pem, client_cert_user(cert, key))))
        return path

    def service_account_kubeconfig(
        self, path: Path, namespace: str, name: str, expiration_seconds: int = 86400
    ) -> Path:
        """A kubeconfig carrying a token the API server issues for the ServiceAccount (created here if
        missing, with its namespace), as ``kubectl create token`` would get one."""
        with contextlib.suppress(urllib.error.HTTPError):
            self.request("/api/v1/namespaces", "POST", {"metadata": {"name": namespace}})
        with contextlib.suppress(urllib.error.HTTPError):
            self.request(
                f"/api/v1/namespaces/{namespace}/serviceaccounts", "POST", {"metadata": {"name": name}}
            )
        review = self.request(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            "POST",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": expiration_seconds},
            },
        )
        token = review["status"]["token"]
        path.write_text(yaml.safe_dump(kubeconfig(self.url, self.ca_pem, {"token": token})))
        return path

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (older resourceVersions are then gone); the revision."""
        out = subprocess.run(
            [str(self.binary), "etcd-compact", "--endpoint", self.etcd_url],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return int(out.stdout.strip())

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event written so far (the ResponseComplete and Panic stages)."""
        if not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        """Stop the components (controller-manager, API server, etcd, in that order) and, when this cluster
        made its own directory, remove it."""
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            process = self.processes.pop(name, None)
            if process is None:
                continue
            _terminate(process)
        if self.owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PeerCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate(process: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


_PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Have the kernel send this process ``signum`` when the thread that started it ends (Linux; elsewhere
    nothing), so that a test process or a ``make`` killed outright leaves no control plane behind. SIGKILL by
    default: a kube-apiserver sent SIGTERM once etcd (signalled at the same moment) is gone waits in its
    graceful shutdown and ran on, orphaned; with nobody left to wait for it, a component need not shut down
    gracefully."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _spawn(binary: Path, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(binary), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509  (only prctl, safe between fork and exec)
        )


def _log_tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _wait(
    what: str,
    probe: Any,
    process: subprocess.Popen[bytes],
    log: Path,
    timeout: float = READY_TIMEOUT,
) -> None:

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{_log_tail(log)}")
        return bool(probe())

    try:
        eventually(
            ready, what, timeout=timeout, interval=0.2, ignoring=(OSError, urllib.error.URLError, ValueError)
        )
    except AssertionError as exc:
        raise RuntimeError(f"{what} was not ready after {timeout:.0f} s:\n{_log_tail(log)}") from exc


def _write_pki(directory: Path, authority: Authority) -> None:
    pki = directory / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    (pki / "ca.crt").write_bytes(authority.pem)
    (pki / "ca.key").write_bytes(_pem_key(authority.key))
    serving, serving_key = authority.issue(
        "kube-apiserver",
        hosts=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ips=("127.0.0.1", "10.0.0.1"),
    )
    (pki / "apiserver.crt").write_bytes(serving)
    (pki / "apiserver.key").write_bytes(serving_key)
    admin, admin_key = authority.issue("capa-peers-admin", ("system:masters",), client=True)
    (pki / "admin.crt").write_bytes(admin)
    (pki / "admin.key").write_bytes(admin_key)
    account_key = ec.generate_private_key(ec.SECP256R1())
    (pki / "sa.key").write_bytes(_pem_key(account_key))
    (pki / "sa.pub").write_bytes(
        account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def apiserver_args(directory: Path, port: int, etcd_url: str) -> list[str]:
    pki = directory / "pki"
    (directory / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    return [
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--etcd-servers={etcd_url}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        "--profiling=false",
        f"--audit-policy-file={directory / 'audit-policy.yaml'}",
        f"--audit-log-path={directory / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
    ]


def _write_kubeconfig(path: Path, url: str, authority: Authority, pki: Path) -> None:
    user = client_cert_user((pki / "admin.crt").read_bytes(), (pki / "admin.key").read_bytes())
    path.write_text(yaml.safe_dump(kubeconfig(url, authority.pem, user)))


def start(
    directory: Path | None = None,
    controller_manager: bool = True,
    extra_apiserver_args: tuple[str, ...] = (),
) -> PeerCluster:
    """Start etcd, kube-apiserver and (unless told not to) kube-controller-manager; see the module doc.
    Without ``directory`` a temporary one is made and removed by :meth:`PeerCluster.stop`."""
    binary = build()
    owns = directory is None
    directory = Path(tempfile.mkdtemp(prefix="capa-peers-")) if directory is None else directory
    directory.mkdir(parents=True, exist_ok=True)
    authority = Authority.create("capa-peers-ca")
    _write_pki(directory, authority)
    etcd_url = f"http://127.0.0.1:{free_port()}"
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    cluster = PeerCluster(
        directory=directory,
        url=url,
        etcd_url=etcd_url,
        authority=authority,
        admin_kubeconfig=directory / "admin.kubeconfig",
        audit_log=directory / "audit.log",
        binary=binary,
        owns_directory=owns,
    )
    try:
        etcd_log = directory / "etcd.log"
        etcd = _spawn(
            binary,
            [
                "etcd",
                f"--data-dir={directory / 'etcd'}",
                f"--listen-client-url={etcd_url}",
                f"--listen-peer-url=http://127.0.0.1:{free_port()}",
            ],
            etcd_log,
        )
        cluster.processes["etcd"] = etcd

        def etcd_ready() -> bool:
            with urllib.request.urlopen(etcd_url + "/health", timeout=2) as response:
                return bool(json.loads(response.read()).get("health") == "true")

        _wait("etcd", etcd_ready, etcd, etcd_log)
        api_log = directory / "kube-apiserver.log"
        args = apiserver_args(directory, port, etcd_url) + list(extra_apiserver_args)
        api = _spawn(binary, ["kube-apiserver", *args], api_log)
        cluster.processes["kube-apiserver"] = api
        _write_kubeconfig(cluster.admin_kubeconfig, url, authority, directory / "pki")

        def api_ready() -> bool:
            request = urllib.request.Request(url + "/readyz")
            with urllib.request.urlopen(request, context=cluster.admin_context(), timeout=5) as response:
                if response.status != 200:
                    return False
            names = {n["metadata"]["name"] for n in cluster.request("/api/v1/namespaces")["items"]}
            return {"default", "kube-system", "kube-public"} <= names

        _wait("kube-apiserver", api_ready, api, api_log)
        if controller_manager:
            kcm_log = directory / "kube-controller-manager.log"
            kcm = _spawn(
                binary,
                [
                    "kube-controller-manager",
                    f"--kubeconfig={cluster.admin_kubeconfig}",
                    f"--controllers={CONTROLLERS}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--use-service-account-credentials=false",
                    f"--service-account-private-key-file={directory / 'pki' / 'sa.key'}",
                    f"--root-ca-file={directory / 'pki' / 'ca.crt'}",
                    "--concurrent-gc-syncs=5",
                    "--profiling=false",
                ],
                kcm_log,
            )
            cluster.processes["kube-controller-manager"] = kcm

            def default_account() -> bool:
                with contextlib.suppress(urllib.error.HTTPError):
                    cluster.request("/api/v1/namespaces/default/serviceaccounts/default")
                    return True
                return False

            _wait("kube-controller-manager", default_account, kcm, kcm_log)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[PeerCluster]:
    cluster = start(**kwargs)
    try:
        yield cluster
    finally:
        cluster.stop()
