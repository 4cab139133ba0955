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

Identities are watched: the AWSCluster, AWSMachine and AWSMachinePool controllers watch the three identity
kinds and Secrets, and :meth:`Identities.users_of` maps a changed identity (or a static identity's Secret)
to the AWSClusters whose chain names it, dropping the pools built from it on the way. A cluster waiting for
a missing identity, a Secret or an allowed namespace is woken by the change that fixes it;
:data:`RECHECK_AFTER` is only the safety net for what is not watched (AWS starting to accept an
``AssumeRole``, a Namespace's labels changing).
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
    IDENTITY_KINDS_BY_NAME,
    MODEL_OF_KIND,
    ROLE_IDENTITY_KIND,
    STATIC_IDENTITY_KIND,
    AWSClusterControllerIdentity,
    AWSClusterRoleIdentity,
    AWSClusterStaticIdentity,
    AWSIdentityReference,
)
from capa_py.api.cluster import CLUSTER_NAME_LABEL, Cluster
from capa_py.api.core import NAMESPACE_NAME_LABEL, Namespace, Secret
from capa_py.api.meta import KubeObject
from capa_py.aws.credentials import SESSION_NAME_PREFIX, RoleRequest, StaticKey, assume_role
from capa_py.aws.errors import AWSError, Retryable
from capa_py.aws.session import ClientPool
from capa_py.ctrlkit.result import Result, requeue_after
from capa_py.engine.engine import Engine
from capa_py.logging import get_logger
from capa_py.manifests.rbac import NAMESPACE
from capa_py.runtime.events import EventRecorder
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
"""How soon a cluster whose identity failed looks again: identities and their Secrets are watched, so this
covers only what is not (an ``AssumeRole`` AWS refused, then allowed; a Namespace's labels)."""

WATCHED_KINDS: tuple[type[KubeObject], ...] = (
    AWSClusterControllerIdentity,
    AWSClusterStaticIdentity,
    AWSClusterRoleIdentity,
    Secret,
)
"""What the AWS controllers watch to wake the clusters an identity change concerns."""

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

    def users_of(self, obj: KubeObject, deleted: bool = False) -> list[AWSCluster]:
        """The AWSClusters whose identity chain names ``obj`` (an identity, or the Secret of a static
        identity): what a watch event on ``obj`` must wake. The pools built from another version of it (any,
        once ``deleted``) are dropped on the way; one built from this very version is kept, so the several
        controllers mapping one event do not drop a pool a reconcile has just built. Anything else: none."""
        version = None if deleted else obj.metadata.resource_version
        if isinstance(obj, Secret):
            if (obj.metadata.namespace or "") != self.secret_namespace:
                return []
            changed = {
                (STATIC_IDENTITY_KIND, s.name)
                for s in self.store.list(AWSClusterStaticIdentity)
                if s.spec.secret_ref == obj.name
            }
            self.forget("Secret", obj.name, version)
        elif obj.KIND in IDENTITY_KINDS_BY_NAME:
            changed = {(obj.KIND, obj.name)}
            self.forget(obj.KIND, obj.name, version)
        else:
            return []
        if not changed:
            return []
        reaching = _reaching(changed, self.store.list(AWSClusterRoleIdentity))
        return [
            cluster
            for cluster in self.store.list(AWSCluster)
            if (ref := cluster.spec.identity_ref) is not None and (ref.kind, ref.name) in reaching
        ]

    def forget(self, kind: str, name: str, keep_version: str | None = None) -> None:
        """Drop every pool built from ``kind`` ``name`` (an identity of its chain, or its Secret), but for
        those built from its ``keep_version``."""
        with self._lock:
            for cached, (key, _) in list(self._pools.items()):
                if any(part[:2] == (kind, name) and part[2] != keep_version for part in key):
                    del self._pools[cached]

    def pool_or_wait(
        self, awscluster: AWSCluster, waiting: Callable[[str, str, str], object]
    ) -> ClientPool | Result:
        """The pool of ``awscluster``'s identity, or, when it cannot be had, the result that looks again
        after :data:`RECHECK_AFTER` (a watch event on the identity wakes it sooner), once
        ``waiting(reason, message, severity)`` has said why on the object."""
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


def cluster_name_of(store: ObjectStore, awscluster: AWSCluster) -> str | None:
    """The name of the Cluster an AWSCluster serves (its label, its owner, or the Cluster naming it before
    Cluster API core has claimed it): what its machines' ``cluster.x-k8s.io/cluster-name`` label holds."""
    labelled = awscluster.metadata.labels.get(CLUSTER_NAME_LABEL)
    if labelled:
        return labelled
    owner = next((r.name for r in awscluster.metadata.owner_references if r.kind == Cluster.KIND), None)
    if owner:
        return owner
    return next(
        (
            c.name
            for c in store.list(Cluster, namespace=awscluster.metadata.namespace)
            if c.spec.infrastructure_ref is not None
            and c.spec.infrastructure_ref.kind == AWSCluster.KIND
            and c.spec.infrastructure_ref.name == awscluster.name
        ),
        None,
    )


def _reaching(changed: set[tuple[str, str]], roles: list[AWSClusterRoleIdentity]) -> set[tuple[str, str]]:
    """``changed`` and every role identity whose chain of sources leads to one of them."""
    reaching = set(changed)
    grew = True
    while grew:
        grew = False
        for role in roles:
            source = role.spec.source_identity_ref
            key = (ROLE_IDENTITY_KIND, role.name)
            if source is not None and key not in reaching and (source.kind, source.name) in reaching:
                reaching.add(key)
                grew = True
    return reaching


def _value(secret: Secret, key: str) -> str | None:
    try:
        return secret.value(key).decode() or None
    except (KeyError, UnicodeDecodeError, ValueError):
        return None


class AWSController:
    """What every controller that calls AWS is built with: the store, the default client pool, the
    engine, where its events go, and the identities its clusters name (one pool per identity, shared)."""

    def __init__(
        self,
        store: ObjectStore,
        pool: ClientPool,
        engine: Engine,
        events: EventRecorder | None = None,
        identities: Identities | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.identities = identities if identities is not None else Identities(store, pool)
        self.engine = engine
        self.events = events if events is not None else EventRecorder(store)
