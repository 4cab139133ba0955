"""Who a request to ``capa serve`` is from, found out as the API server finds it out.

Credentials, tried in this order:

- a client certificate signed by the server's certificate authority (verified in the TLS handshake; one
  from another authority is refused there): the user is its ``CN``, the groups its ``O`` attributes;
- a bearer token listed in a static token file (``--token-auth-file``, the API server's CSV form
  ``token,user,uid,"group1,group2"``);
- a bearer token ``capa serve`` issued for a ServiceAccount (the TokenRequest subresource, ``kubectl create
  token``): an RS256-signed JWT, verified on each use (signature, expiry, audience, and the ServiceAccount
  still existing with the same uid), for user ``system:serviceaccount:NS:NAME`` in the groups
  ``system:serviceaccounts`` and ``system:serviceaccounts:NS``.

Every authenticated user is also in ``system:authenticated``. Credentials that do not authenticate (an
unknown, forged or expired token) are answered 401 ``Unauthorized``. A request without credentials is
anonymous (``system:anonymous`` in ``system:unauthenticated``) and is admitted to the public information
endpoints only (``/version``, ``/healthz``, ``/livez``, ``/readyz``); anywhere else it is answered 401.
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import json
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from capa_py.apiserver import reviews
from capa_py.apiserver.reviews import User
from capa_py.apiserver.status import ApiError
from capa_py.logging import get_logger
from capa_py.store.errors import NotFound, StoreError
from capa_py.store.protocol import ObjectStore

_log = get_logger("apiserver.authentication")

AUTHENTICATED = "system:authenticated"
ANONYMOUS = User("system:anonymous", groups=("system:unauthenticated",))
PUBLIC_PATHS = frozenset({"/version", "/version/", "/healthz", "/livez", "/readyz"})
"""What an anonymous request may reach (the API server's ``system:public-info-viewer`` paths)."""
MASTERS = "system:masters"
ADMIN = User("capa-serve-admin", groups=(MASTERS,))
"""The user of the kubeconfig ``capa serve --write-kubeconfig`` writes."""

ISSUER = "https://kubernetes.default.svc.cluster.local"
"""The issuer of the ServiceAccount tokens, and the audience the server accepts (the API server's default
``--api-audiences`` is its issuer)."""
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"


class Unauthorized(Exception):
    """Credentials were presented and did not authenticate; answered 401 (never says why)."""


class TokenFileError(ValueError):
    """A static token file that cannot be used (the message names the file and the line)."""


def read_token_file(path: Path) -> dict[str, User]:
    """The users of a static token file: ``token,user,uid[,"group1,group2"]`` per line, as the API server
    reads ``--token-auth-file`` (a line with fewer than three columns is an error; an empty token is
    skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read {path}: {exc}") from exc
    users: dict[str, User] = {}
    try:
        rows = list(csv.reader(text.splitlines(), skipinitialspace=True))
    except csv.Error as exc:
        raise TokenFileError(f"{path}: {exc}") from exc
    for number, row in enumerate(rows, start=1):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) < 3:
            raise TokenFileError(
                f"{path} line {number}: must have at least 3 columns (token, user name, user uid), "
                f"found {len(row)}"
            )
        token, name, uid = (value.strip() for value in row[:3])
        if not token:
            _log.warning("empty token skipped", file=str(path), line=number)
            continue
        groups = tuple(g.strip() for g in row[3].split(",") if g.strip()) if len(row) > 3 else ()
        users[token] = User(name, uid, groups)
    return users


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class IssuedToken:
    token: str
    expires: int
    """Unix seconds."""


class ServiceAccountTokens:
    """Issues and verifies ServiceAccount tokens: RS256 JWTs signed with one RSA key."""

    def __init__(self, key_pem: bytes, issuer: str = ISSUER, audiences: tuple[str, ...] = (ISSUER,)) -> None:
        key = serialization.load_pem_private_key(key_pem, None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("the ServiceAccount token signing key is not an RSA key")
        self._key = key
        self.issuer = issuer
        self.audiences = audiences
        public = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.key_id = _b64(hashlib.sha256(public).digest())

    def issue(
        self, namespace: str, name: str, uid: str, audiences: tuple[str, ...], seconds: int
    ) -> IssuedToken:
        now = int(time.time())
        claims = {
            "aud": list(audiences),
            "exp": now + seconds,
            "iat": now,
            "iss": self.issuer,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}},
            "nbf": now,
            "sub": f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
        }
        header = {"alg": "RS256", "kid": self.key_id}
        signed = ".".join(_b64(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims))
        signature = self._key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return IssuedToken(f"{signed}.{_b64(signature)}", now + seconds)

    def claims(self, token: str) -> dict[str, Any] | None:
        """The claims of a token this server signed, for this server's audiences, not expired; else
        ``None`` (whatever is wrong with it). Whether its ServiceAccount still exists is not checked here."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = json.loads(_unb64(parts[0]))
            signature = _unb64(parts[2])
            self._key.public_key().verify(
                signature, f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, binascii.Error, InvalidSignature, UnicodeDecodeError):
            return None
        if not isinstance(header, dict) or header.get("alg") != "RS256" or not isinstance(claims, dict):
            return None
        now = time.time()
        expires, not_before = claims.get("exp"), claims.get("nbf", 0)
        if not isinstance(expires, int) or not isinstance(not_before, int) or not not_before <= now < expires:
            return None
        audiences = claims.get("aud")
        audiences = [audiences] if isinstance(audiences, str) else audiences
        if claims.get("iss") != self.issuer or not isinstance(audiences, list):
            return None
        if not set(self.audiences) & {a for a in audiences if isinstance(a, str)}:
            return None
        return claims


def _service_account_user(claims: Mapping[str, Any], store: ObjectStore) -> User | None:
    """The user a verified token's claims name, if its ServiceAccount still exists with the same uid."""
    from capa_py.api.workloads import ServiceAccount

    private = claims.get("kubernetes.io")
    account = private.get("serviceaccount") if isinstance(private, dict) else None
    if not isinstance(private, dict) or not isinstance(account, dict):
        return None
    namespace, name, uid = private.get("namespace"), account.get("name"), account.get("uid")
    if not all(isinstance(v, str) and v for v in (namespace, name, uid)):
        return None
    if claims.get("sub") != f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}":
        return None
    try:
        found = store.get(ServiceAccount, str(name), str(namespace))
    except NotFound:
        return None
    if found.metadata.uid != uid or found.metadata.deletion_timestamp is not None:
        return None
    extra: dict[str, tuple[str, ...]] = {}
    if isinstance(claims.get("jti"), str):
        extra[CREDENTIAL_ID] = (f"JTI={claims['jti']}",)
    return User(
        f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}",
        str(uid),
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
        extra,
    )


def _with_authenticated(user: User) -> User:
    if AUTHENTICATED in user.groups:
        return user
    return User(user.username, user.uid, (*user.groups, AUTHENTICATED), user.extra)


def certificate_user(peer: Mapping[str, Any] | None, der: bytes | None = None) -> User | None:
    """The user a verified client certificate names (``ssl`` peer certificate form): ``CN`` and ``O``s;
    with the certificate itself (``der``), its SHA-256 as the credential id, as the API server gives it."""
    if not peer:
        return None
    common_name = ""
    organizations: list[str] = []
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                common_name = value
            elif key == "organizationName":
                organizations.append(value)
    if not common_name:
        return None
    extra = {CREDENTIAL_ID: (f"X509SHA256={hashlib.sha256(der).hexdigest()}",)} if der else {}
    return User(common_name, groups=tuple(organizations), extra=extra)


@dataclass
class Authenticator:
    """Finds out who a request is from. ``tokens``: the static token file's users; ``service_accounts``:
    the ServiceAccount token issuer and verifier (``None``: no ServiceAccount tokens)."""

    store: ObjectStore
    service_accounts: ServiceAccountTokens | None = None
    tokens: Mapping[str, User] = field(default_factory=dict)

    async def authenticate(self, request: web.Request) -> User | None:
        """The request's user; ``None`` for a request without credentials; raises :class:`Unauthorized`
        when the credentials presented do not authenticate."""
        transport = request.transport
        tls = transport.get_extra_info("ssl_object") if transport is not None else None
        if isinstance(tls, ssl.SSLObject):
            user = certificate_user(tls.getpeercert(), tls.getpeercert(binary_form=True))
        else:
            user = None
        if user is not None:
            return _with_authenticated(user)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = token.strip()
        if not token:  # no token at all: anonymous, as the API server takes it
            return None
        if token in self.tokens:
            return _with_authenticated(self.tokens[token])
        if self.service_accounts is not None:
            claims = self.service_accounts.claims(token)
            if claims is not None:
                import asyncio

                found = await asyncio.to_thread(_service_account_user, claims, self.store)
                if found is not None:
                    return _with_authenticated(found)
        raise Unauthorized()


def unauthorized() -> web.Response:
    error = ApiError(401, "Unauthorized", "Unauthorized")
    return web.Response(
        body=json.dumps(error.status(), separators=(",", ":")).encode(),
        status=401,
        content_type="application/json",
    )


def middleware(authenticator: Authenticator) -> Middleware:
    """The aiohttp middleware that authenticates every request (records its user with
    :func:`reviews.authenticated`) or answers 401."""

    @web.middleware
    async def authenticate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            user = await authenticator.authenticate(request)
        except Unauthorized:
            _log.info("unauthorized request", method=request.method, path=request.path)
            return unauthorized()
        except StoreError:
            _log.warning("cannot verify a ServiceAccount token: the store is unavailable")
            return unauthorized()
        if user is None:
            if request.path not in PUBLIC_PATHS:
                return unauthorized()
            user = ANONYMOUS
        reviews.authenticated(request, user)
        return await handler(request)

    return authenticate
