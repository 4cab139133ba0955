"""Which Hardware a workflow-server caller is: the credentials an agent presents, and what they prove.

Upstream Tinkerbell believes the ``agent_id`` a client sends. Here a call proves a Hardware with either
of two credentials, both optional per call, and every credential a call presents must prove the same
Hardware:

* **A token**: call metadata ``authorization: Bearer TOKEN``, equal (compared in constant time) to the
  ``token`` key of the Secret the Hardware's ``spec.agentCredentialsRef`` names, in the Hardware's
  namespace. ``capa tink agent-credentials HARDWARE`` issues one (:func:`issue_token`).
* **A client certificate** (mutual TLS: the server is given ``--tls-client-ca`` and then requires one,
  verified against that CA) whose Common Name or one of whose DNS Subject Alternative Names is
  ``<hardware name>.<namespace>`` (:func:`certificate_name`).

A call presenting neither is *unauthenticated*: refused ``UNAUTHENTICATED``, unless the server allows
unauthenticated agents (an explicit option, off by default), and then only for Hardware that has no
``agentCredentialsRef``. A call whose credentials do not prove the Hardware it asks about is refused
``PERMISSION_DENIED``. Tokens are never logged nor put in a refusal's message.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import grpc

from capa_py.api.core import Secret
from capa_py.api.meta import ObjectMeta
from capa_py.api.tinkerbell import Hardware, LocalObjectReference
from capa_py.store.errors import NotFound
from capa_py.store.protocol import ObjectStore

TOKEN_KEY = "token"
"""The key of the credentials Secret that holds the agent's token."""
AUTHORIZATION = "authorization"
BEARER = "bearer "
TOKEN_ENV = "CAPA_TINK_AGENT_TOKEN"
"""The environment variable ``capa tink agent`` reads its token from (or ``--token-file``)."""

HardwareKey = tuple[str, str]
Problem = tuple[grpc.StatusCode, str]


@dataclass(frozen=True)
class Credentials:
    """What one call presented. ``names`` are the verified client certificate's CN and DNS SANs;
    ``malformed`` says why an ``authorization`` header was not a bearer token."""

    token: str | None = field(default=None, repr=False)
    names: frozenset[str] = frozenset()
    malformed: str | None = None

    @property
    def presented(self) -> bool:
        return self.token is not None or bool(self.names) or self.malformed is not None


NONE = Credentials()


def from_call(
    metadata: Iterable[tuple[str, str | bytes]] | None, auth: Mapping[str, Iterable[bytes]]
) -> Credentials:
    """The credentials of a call: its ``authorization`` metadata and the peer's verified certificate
    (gRPC's auth context: ``x509_common_name`` and ``x509_subject_alternative_name``)."""
    values = [value for key, value in metadata or () if key.lower() == AUTHORIZATION]
    token: str | None = None
    malformed: str | None = None
    if len(values) > 1:
        malformed = "more than one authorization header"
    elif values:
        text = values[0].decode("utf-8", "replace") if isinstance(values[0], bytes) else values[0]
        if text[: len(BEARER)].lower() != BEARER or not text[len(BEARER) :].strip():
            malformed = "the authorization header is not 'Bearer TOKEN'"
        else:
            token = text[len(BEARER) :].strip()
    names = frozenset(
        value.decode("utf-8", "replace")
        for key in ("x509_common_name", "x509_subject_alternative_name")
        for value in auth.get(key, ())
    )
    return Credentials(token, names, malformed)


def certificate_name(hardware: HardwareKey) -> str:
    """The name (CN or DNS SAN) a client certificate carries to prove ``(namespace, name)``."""
    return f"{hardware[1]}.{hardware[0]}"


def token_matches(presented: str, expected: bytes) -> bool:
    """Constant-time comparison (of digests, so the lengths do not show either)."""
    return hmac.compare_digest(
        hashlib.sha256(presented.encode()).digest(), hashlib.sha256(expected.strip()).digest()
    )


class Authenticator:
    """Decides whether a call's credentials prove a Hardware, reading Hardware and Secrets from ``store``
    (the workflow server gives it its watches' caches)."""

    def __init__(self, store: ObjectStore, allow_unauthenticated: bool = False) -> None:
        self.store = store
        self.allow_unauthenticated = allow_unauthenticated

    def unauthenticated(self, credentials: Credentials) -> Problem | None:
        """The refusal of a call that proves nothing at all (before any Hardware is known)."""
        if credentials.malformed is not None:
            return (grpc.StatusCode.UNAUTHENTICATED, credentials.malformed)
        if not credentials.presented and not self.allow_unauthenticated:
            return (
                grpc.StatusCode.UNAUTHENTICATED,
                "no agent credentials: send 'authorization: Bearer TOKEN' call metadata or a client "
                "certificate",
            )
        return None

    def check(self, credentials: Credentials, hardware: HardwareKey) -> Problem | None:
        """None when ``credentials`` prove ``hardware``; otherwise the status and message to refuse with."""
        if (problem := self.unauthenticated(credentials)) is not None:
            return problem
        denied = (grpc.StatusCode.PERMISSION_DENIED, f"the credentials do not prove hardware {_id(hardware)}")
        try:
            found = self.store.get(Hardware, hardware[1], hardware[0])
        except NotFound:
            return denied
        ref = found.spec.agent_credentials_ref
        if not credentials.presented:
            # Allowed unauthenticated agents: only for Hardware that has no credentials to present.
            if ref is None:
                return None
            return (
                grpc.StatusCode.UNAUTHENTICATED,
                f"hardware {_id(hardware)} requires agent credentials (spec.agentCredentialsRef)",
            )
        if credentials.names and certificate_name(hardware) not in credentials.names:
            return denied
        if credentials.token is not None and not self._token_proves(credentials.token, hardware, ref):
            return denied
        return None

    def _token_proves(self, token: str, hardware: HardwareKey, ref: LocalObjectReference | None) -> bool:
        if ref is None or (ref.namespace and ref.namespace != hardware[0]):
            return False
        try:
            secret = self.store.get(Secret, ref.name, hardware[0])
            expected = secret.value(TOKEN_KEY)
        except (NotFound, KeyError, ValueError):
            return False
        return bool(expected.strip()) and token_matches(token, expected)


def _id(hardware: HardwareKey) -> str:
    return f"{hardware[0]}/{hardware[1]}"


def credentials_secret_name(hardware_name: str) -> str:
    return f"{hardware_name}-agent-credentials"


def issue_token(
    store: ObjectStore, hardware: Hardware | None, name: str = "", namespace: str = "default"
) -> tuple[Secret, str]:
    """A new random token for a Hardware's agent, written to its credentials Secret (created, or its
    token replaced: the old token stops working), and ``spec.agentCredentialsRef`` pointed at it. For a
    Hardware not created yet (``hardware`` None, ``name``/``namespace`` given) the Secret is
    ``<name>-agent-credentials``, for the Hardware to reference when it is."""
    if hardware is not None:
        name, namespace = hardware.metadata.name, hardware.metadata.namespace or "default"
    ref = hardware.spec.agent_credentials_ref if hardware is not None else None
    secret_name = ref.name if ref is not None and ref.namespace in (None, "", namespace) else None
    secret_name = secret_name or credentials_secret_name(name)
    token = secrets.token_urlsafe(32)
    try:
        secret = store.get(Secret, secret_name, namespace)
        secret.string_data = {TOKEN_KEY: token}
        secret.normalise()
        written = store.update(secret)
    except NotFound:
        fresh = Secret(
            metadata=ObjectMeta(
                name=secret_name,
                namespace=namespace,
                labels={"app.kubernetes.io/component": "tinkerbell-agent-credentials"},
            ),
            string_data={TOKEN_KEY: token},
        )
        fresh.normalise()
        written = store.create(fresh)
    if hardware is not None and (ref is None or ref.name != secret_name):
        hardware.spec.agent_credentials_ref = LocalObjectReference(name=secret_name)
        store.update(hardware)
    return written, token


__all__ = [
    "AUTHORIZATION",
    "NONE",
    "TOKEN_ENV",
    "TOKEN_KEY",
    "Authenticator",
    "Credentials",
    "certificate_name",
    "credentials_secret_name",
    "from_call",
    "issue_token",
    "token_matches",
]
