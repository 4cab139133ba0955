"""Whose credentials a cluster's controllers use: the identity an AWSCluster's ``spec.identityRef`` names.

:class:`Identities` resolves an AWSCluster's identity to a :class:`~capa_py.aws.session.ClientPool`, and
every AWS call of that cluster's controllers (the AWSCluster's and its AWSMachines') goes through that
pool:

* no ``identityRef``: the controller's own pool (its credential chain), as before identities existed;
* ``AWSClusterControllerIdentity`` ``default``: the controller's own pool, once the object allows the
  cluster's namespace;
* ``AWSClusterStaticIdentity``: a pool signing with the key in the identity's Secret (in the controller's
  namespace, :data:`~capa_py.manifests.rbac.NAMESPACE`);
* ``AWSClusterRoleIdentity``: a pool signing with the role's assumed credentials, assumed from its
  ``sourceIdentityRef``'s credentials (resolved the same way, so roles chain) or the controller's own.

Every identity of the chain must allow the cluster's namespace (``allowedNamespaces``, Cluster API
Provider AWS's semantics): otherwise :class:`IdentityRefused` with CAPA's condition
``PrincipalUsageAllowed`` and reason ``PrincipalUsageUnauthorized`` (the cluster's own identity) or
``SourcePrincipalUsageUnauthorized`` (one of its sources), before any AWS call. An identity, Secret or key
that is missing, or an ``AssumeRole`` AWS refuses, is :class:`IdentityUnavailable`
(``PrincipalCredentialRetrieved``, ``PrincipalCredentialRetrievalFailed``).

Pools are cached per chain: the key is every identity of the chain with its ``resourceVersion`` (and the
static identity's Secret's), so an edited identity or a rotated key makes a new pool and the old one is
dropped; an unchanged identity costs no STS call per reconcile (botocore renews assumed credentials
before they expire).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass

from botocore.credentials import Credentials

from capa_py.api.aws import AWSCluster
from capa_py.api.aws_identity import (
    CONTROLLER_IDENTITY_KIND,
    CONTROLLER_IDENTITY_NAME,
    MODEL_OF_KIND,
    ROLE_IDENTITY_KIND,
    STATIC_IDENTITY_KIND,
    AWSClusterRoleIdentity,
    AWSClusterStaticIdentity,
    AWSIdentityReference,
)
from capa_py.api.core import NAMESPACE_NAME_LABEL, Namespace, Secret
from capa_py.api.meta import KubeObject
from capa_py.aws.credentials import SESSION_NAME_PREFIX, RoleRequest, StaticKey, assume_role
from capa_py.aws.errors import AWSError, Retryable
from capa_py.aws.session import ClientPool
from capa_py.ctrlkit.result import Result, requeue_after
from capa_py.logging import get_logger
from capa_py.manifests.rbac import NAMESPACE
from capa_py.store.helpers import get_or_none
from capa_py.store.protocol import ObjectStore

IAM_ACTIONS: tuple[str, ...] = ("sts:AssumeRole",)
"""The IAM actions an identity's source needs to reach a role identity's role."""

PRINCIPAL_USAGE_ALLOWED = "PrincipalUsageAllowed"
PRINCIPAL_CREDENTIAL_RETRIEVED = "PrincipalCredentialRetrieved"
USAGE_UNAUTHORIZED = "PrincipalUsageUnauthorized"
SOURCE_USAGE_UNAUTHORIZED = "SourcePrincipalUsageUnauthorized"
RETRIEVAL_FAILED = "PrincipalCredentialRetrievalFailed"
CONDITIONS = (PRINCIPAL_USAGE_ALLOWED, PRINCIPAL_CREDENTIAL_RETRIEVED)

SECRET_KEYS = ("AccessKeyID", "SecretAccessKey", "SessionToken")
MAX_CHAIN = 8
"""The longest chain of role identities followed (a longer one is surely a mistake)."""
RECHECK_AFTER = 30.0
"""How soon a cluster whose identity failed looks again (identities are not watched)."""

_log = get_logger("controller.identity")


class IdentityError(Exception):
    """The cluster's identity cannot be used; ``condition`` False with ``reason`` says why."""

    condition = PRINCIPAL_CREDENTIAL_RETRIEVED

    def __init__(self, reason: str, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.retryable = retryable


class IdentityRefused(IdentityError):
    """An identity of the chain does not allow the cluster's namespace."""

    condition = PRINCIPAL_USAGE_ALLOWED


class IdentityUnavailable(IdentityError):
    """An identity, its Secret or a key is missing, or AWS refused the role."""


@dataclass(frozen=True)
class _Link:
    identity: KubeObject
    secret: Secret | None = None


class Identities:
    """The client pool of each identity clusters use, built on the controller's own ``pool``."""

    def __init__(self, store: ObjectStore, pool: ClientPool, secret_namespace: str = NAMESPACE) -> None:
        self.store = store
        self.base = pool
        self.secret_namespace = secret_namespace
        self._pools: dict[tuple[str, str], tuple[tuple[tuple[str, str, str], ...], ClientPool]] = {}
        self._lock = threading.Lock()

    def pool_for(self, awscluster: AWSCluster) -> ClientPool:
        """The pool whose clients act for ``awscluster`` (raises :class:`IdentityError`)."""
        ref = awscluster.spec.identity_ref
        if ref is None:
            return self.base
        return self._pool_of(ref, awscluster.namespace or "default")

    def pool_or_wait(
        self, awscluster: AWSCluster, waiting: Callable[[str, str, str], object]
    ) -> ClientPool | Result:
        """The pool of ``awscluster``'s identity, or, when it cannot be had, the result that looks again
        after :data:`RECHECK_AFTER` (identities are not watched), once ``waiting(reason, message,
        severity)`` has said why on the object."""
        try:
            return self.pool_for(awscluster)
        except IdentityError as exc:
            waiting(exc.reason, f"the cluster's identity: {exc}", "Error")
            return requeue_after(RECHECK_AFTER)

    def pool_for_identity(self, ref: AWSIdentityReference) -> ClientPool:
        """The pool of an identity itself, whoever asks (no namespace check): what an administrator's
        ``capa audit --identity`` looks into the identity's account with."""
        return self._pool_of(ref, None)

    def _pool_of(self, ref: AWSIdentityReference, namespace: str | None) -> ClientPool:
        chain = self._chain(ref, namespace)
        key = tuple(
            part
            for link in chain
            for part in (
                (link.identity.KIND, link.identity.name, link.identity.metadata.resource_version or ""),
                *(
                    [("Secret", link.secret.name, link.secret.metadata.resource_version or "")]
                    if link.secret is not None
                    else []
                ),
            )
        )
        with self._lock:
            cached = self._pools.get((ref.kind, ref.name))
            if cached is not None and cached[0] == key:
                return cached[1]
            pool = self._build(chain)
            self._pools[(ref.kind, ref.name)] = (key, pool)
            return pool

    # -- the chain -------------------------------------------------------------------------------
    def _chain(self, ref: AWSIdentityReference, namespace: str | None) -> list[_Link]:
        """The identities from the cluster's to the first that holds credentials (a static identity,
        the controller's, or a role without a source), each checked against ``namespace`` (unless None)."""
        chain: list[_Link] = []
        seen: set[tuple[str, str]] = set()
        current: AWSIdentityReference | None = ref
        labels: dict[str, str] | None = None
        while current is not None:
            if (current.kind, current.name) in seen or len(chain) >= MAX_CHAIN:
                raise IdentityUnavailable(
                    RETRIEVAL_FAILED,
                    f"{current.kind} {current.name}: the chain of source identities loops or is longer than "
                    f"{MAX_CHAIN}",
                )
            seen.add((current.kind, current.name))
            identity = self._identity(current)
            if namespace is not None:
                labels = self._check_allowed(
                    identity, namespace, labels, source_of=None if not chain else ref
                )
            if isinstance(identity, AWSClusterStaticIdentity):
                chain.append(_Link(identity, self._secret(identity)))
                current = None
            elif isinstance(identity, AWSClusterRoleIdentity):
                chain.append(_Link(identity))
                current = identity.spec.source_identity_ref
            else:
                chain.append(_Link(identity))
                current = None
        return chain

    def _check_allowed(
        self,
        identity: KubeObject,
        namespace: str,
        labels: dict[str, str] | None,
        source_of: AWSIdentityReference | None,
    ) -> dict[str, str] | None:
        """Raise :class:`IdentityRefused` unless ``identity`` allows ``namespace``; returns the namespace's
        labels once read (a selector needs them), so a chain reads them at most once."""
        allowed = identity.allowed  # type: ignore[attr-defined]
        if allowed is not None and not allowed.allows_every_namespace() and labels is None:
            labels = self._namespace_labels(namespace)
        if allowed is None or not allowed.allows(namespace, labels or {}):
            where = (
                f"{identity.KIND} {identity.name} does not allow namespace {namespace!r} "
                "(spec.allowedNamespaces)"
            )
            if source_of is None:
                raise IdentityRefused(USAGE_UNAUTHORIZED, where)
            raise IdentityRefused(
                SOURCE_USAGE_UNAUTHORIZED, f"{where}, as the source of {source_of.kind} {source_of.name}"
            )
        return labels

    def _identity(self, ref: AWSIdentityReference) -> KubeObject:
        if ref.kind == CONTROLLER_IDENTITY_KIND and ref.name != CONTROLLER_IDENTITY_NAME:
            raise IdentityUnavailable(
                RETRIEVAL_FAILED,
                f"{ref.kind} {ref.name}: the controller identity is named {CONTROLLER_IDENTITY_NAME!r}",
            )
        identity = get_or_none(self.store, MODEL_OF_KIND[ref.kind], ref.name, None)
        if identity is None:
            raise IdentityUnavailable(RETRIEVAL_FAILED, f"{ref.kind} {ref.name} does not exist")
        return identity

    def _namespace_labels(self, namespace: str) -> dict[str, str]:
        found = get_or_none(self.store, Namespace, namespace, None)
        # The API server labels every namespace with its name; a store without the object still has it.
        labels = dict(found.metadata.labels) if found is not None else {}
        labels.setdefault(NAMESPACE_NAME_LABEL, namespace)
        return labels

    def _secret(self, identity: AWSClusterStaticIdentity) -> Secret:
        name = identity.spec.secret_ref
        secret = get_or_none(self.store, Secret, name, self.secret_namespace)
        where = f"{STATIC_IDENTITY_KIND} {identity.name}: spec.secretRef"
        if secret is None:
            raise IdentityUnavailable(
                RETRIEVAL_FAILED, f"{where}: Secret {self.secret_namespace}/{name} does not exist"
            )
        for key in SECRET_KEYS[:2]:
            if not _value(secret, key):
                raise IdentityUnavailable(
                    RETRIEVAL_FAILED, f"{where}: Secret {self.secret_namespace}/{name} has no key {key}"
                )
        return secret

    # -- the pools -------------------------------------------------------------------------------
    def _build(self, chain: list[_Link]) -> ClientPool:
        """Credentials from the end of the chain back to the cluster's identity; AssumeRole for each role."""
        root = chain[-1]
        credentials: Credentials | None = None
        if root.secret is not None:
            credentials = StaticKey(
                _value(root.secret, "AccessKeyID") or "",
                _value(root.secret, "SecretAccessKey") or "",
                _value(root.secret, "SessionToken"),
            ).credentials()
        for link in reversed(chain):
            identity = link.identity
            if not isinstance(identity, AWSClusterRoleIdentity):
                continue
            source = self.base if credentials is None else self._pool(credentials)
            sts = source.for_region().client("sts")
            spec = identity.spec
            request = RoleRequest(
                role_arn=spec.role_arn,
                session_name=spec.session_name or (SESSION_NAME_PREFIX + identity.name)[:64],
                duration_seconds=spec.duration_seconds,
                external_id=spec.external_id,
                inline_policy=spec.inline_policy,
                policy_arns=tuple(spec.policy_arns),
            )
            try:
                credentials = assume_role(functools.partial(sts.call, "AssumeRole"), request)
            except AWSError as exc:
                raise IdentityUnavailable(
                    RETRIEVAL_FAILED,
                    f"{ROLE_IDENTITY_KIND} {identity.name}: AssumeRole {spec.role_arn} failed: "
                    f"{exc.code or type(exc).__name__}: {exc}",
                    retryable=isinstance(exc, Retryable),
                ) from exc
        _log.info(
            "identity resolved",
            identity=f"{chain[0].identity.KIND} {chain[0].identity.name}",
            chain=[f"{link.identity.KIND} {link.identity.name}" for link in chain],
        )
        return self.base if credentials is None else self._pool(credentials)

    def _pool(self, credentials: Credentials) -> ClientPool:
        # The rate limiter is shared: a conservative choice (AWS limits each account on its own).
        return ClientPool(self.base.settings, self.base.limiter, credentials)


def _value(secret: Secret, key: str) -> str | None:
    try:
        return secret.value(key).decode() or None
    except (KeyError, UnicodeDecodeError, ValueError):
        return None
