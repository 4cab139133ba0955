"""The certificates ``capa serve`` serves and authenticates with: a certificate authority of its own, the
serving certificate it issues itself, client certificates (``CN`` the user, ``O`` the groups, as the API
server reads them) and the key that signs ServiceAccount tokens.

:func:`ensure_serving_files` keeps them in a directory (mode 0700, keys 0600), made once and reused;
:func:`ephemeral_serving_files` makes a fresh set in a temporary directory (an in-process server's).
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from capa_py.scratch import process_directory

CA_CERT, CA_KEY = "ca.crt", "ca.key"
SERVING_CERT, SERVING_KEY = "tls.crt", "tls.key"
SIGNING_KEY = "sa.key"
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
CA_DAYS = 3650
LEAF_DAYS = 365


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Authority:
    """A certificate authority: its certificate and key (PEM)."""

    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def create(cls, name: str = "capa-serve-ca") -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))

    def _issue(
        self, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> tuple[bytes, bytes]:
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem)
        ca_key = serialization.load_pem_private_key(self.key_pem, None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise ValueError("the certificate authority's key is not an ECDSA key")
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _private_pem(key)

    def issue_client(self, user: str, groups: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
        """A client certificate and key for ``user`` in ``groups`` (``CN`` and ``O`` attributes)."""
        names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        subject = x509.Name([*names, x509.NameAttribute(NameOID.COMMON_NAME, user)])
        return self._issue(subject, ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def issue_serving(self, hosts: tuple[str, ...]) -> tuple[bytes, bytes]:
        """A serving certificate and key for ``hosts`` (IP addresses and DNS names)."""
        sans: list[x509.GeneralName] = []
        for host in dict.fromkeys(hosts):
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "capa-serve")])
        return self._issue(subject, ExtendedKeyUsageOID.SERVER_AUTH, sans)


def serving_hosts(bind: str) -> tuple[str, ...]:
    """The names a serving certificate covers: loopback, and the bind address unless it is a wildcard."""
    extra = () if bind in ("", "0.0.0.0", "::") else (bind.strip("[]"),)
    return (*LOOPBACK_HOSTS, *extra)


def _covers(cert_pem: bytes, hosts: tuple[str, ...]) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    if cert.not_valid_after_utc < _now() + datetime.timedelta(days=1):
        return False
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    named = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    named |= set(sans.get_values_for_type(x509.DNSName))
    wanted = set()
    for host in hosts:
        try:
            wanted.add(str(ipaddress.ip_address(host)))
        except ValueError:
            wanted.add(host)
    return wanted <= named


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by its owner only, replacing ``path`` at once (never half-written)."""
    partial = path.with_name(path.name + ".partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.chmod(partial, 0o600)
    os.replace(partial, path)


def new_signing_key() -> bytes:
    """A new RSA key (PEM) that signs ServiceAccount tokens (RS256)."""
    return _private_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))


@dataclass(frozen=True)
class ServingFiles:
    """Where one server's certificate authority, serving certificate and token signing key are."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / CA_CERT

    @property
    def serving_cert(self) -> Path:
        return self.directory / SERVING_CERT

    @property
    def serving_key(self) -> Path:
        return self.directory / SERVING_KEY

    @property
    def signing_key(self) -> Path:
        return self.directory / SIGNING_KEY

    def authority(self) -> Authority:
        return Authority((self.directory / CA_CERT).read_bytes(), (self.directory / CA_KEY).read_bytes())

    def server_context(self) -> ssl.SSLContext:
        """The TLS context to serve with: this serving certificate, client certificates of this CA asked
        for (and verified when given; a request without one is not refused here)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.serving_cert, self.serving_key)
        context.load_verify_locations(cafile=str(self.ca_cert))
        context.verify_mode = ssl.CERT_OPTIONAL
        return context


def ensure_serving_files(directory: Path, hosts: tuple[str, ...]) -> ServingFiles:
    """The serving files in ``directory``, made where missing: a CA (kept for good), a serving certificate
    for ``hosts`` (issued again when it does not cover them or is about to expire) and a token signing key.
    The directory is made mode 0700 and every key file 0600."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    descriptor = os.open(directory / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # two servers starting at once make one authority
        return _ensure(directory, hosts)
    finally:
        os.close(descriptor)


def _ensure(directory: Path, hosts: tuple[str, ...]) -> ServingFiles:
    files = ServingFiles(directory)
    if not (directory / CA_CERT).is_file() or not (directory / CA_KEY).is_file():
        authority = Authority.create()
        _write_private(directory / CA_KEY, authority.key_pem)
        _write_private(directory / CA_CERT, authority.cert_pem)
        for stale in (SERVING_CERT, SERVING_KEY):
            (directory / stale).unlink(missing_ok=True)
    if not files.serving_cert.is_file() or not _covers(files.serving_cert.read_bytes(), hosts):
        cert, key = files.authority().issue_serving(hosts)
        _write_private(files.serving_key, key)
        _write_private(files.serving_cert, cert)
    if not files.signing_key.is_file():
        _write_private(files.signing_key, new_signing_key())
    return files


def ephemeral_serving_files(hosts: tuple[str, ...]) -> tuple[ServingFiles, tempfile.TemporaryDirectory[str]]:
    """A fresh set of serving files in a new temporary directory (removed when it is cleaned up), inside
    this process's scratch directory: a killed process's files are removed by the next one."""
    scratch = process_directory()
    holder = tempfile.TemporaryDirectory(prefix="capa-serve-", dir=None if scratch is None else str(scratch))
    return ensure_serving_files(Path(holder.name) / "pki", hosts), holder


def kubeconfig_document(
    url: str, ca_pem: bytes, name: str, cert_pem: bytes, key_pem: bytes, namespace: str = "default"
) -> dict[str, Any]:
    """A kubeconfig whose current context is the server at ``url`` (trusting ``ca_pem``) with a client
    certificate (its data inline)."""
    import base64

    def encode(data: bytes) -> str:
        return base64.b64encode(data).decode()

    cluster = {"server": url, "certificate-authority-data": encode(ca_pem)}
    user = {"client-certificate-data": encode(cert_pem), "client-key-data": encode(key_pem)}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: Path, document: dict[str, Any]) -> None:
    """Write a kubeconfig readable by its owner only (it carries credentials), all at once."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, yaml.safe_dump(document, sort_keys=False).encode())
