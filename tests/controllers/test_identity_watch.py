"""Identities are watched: a change of an identity, or of a static identity's Secret, wakes the clusters
(and their machines) whose identity chain names it, and drops the client pools built from it.

Each test sets the identity re-check (``RECHECK_AFTER``) to an hour, so what it shows happens because of
the watch, not the re-check: without the watch the manager would sit idle and the test would time out.
moto's STS serves the roles and the second account (see ``test_identities.py``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_identity import AWSClusterRoleIdentity, AWSClusterStaticIdentity
from capa_py.api.core import Secret
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.aws.session import register_client_hook
from capa_py.manifests.rbac import NAMESPACE
from capa_py.runtime.manager import Manager, key_of
from capa_py.runtime.process import ControllerProcess
from capa_py.runtime.queue import ObjectKey
from controllers import aws_controllers
from controllers.identity import PRINCIPAL_CREDENTIAL_RETRIEVED, RETRIEVAL_FAILED, Identities
from controllers.run import ConvergeResult
from controllers.scope import reconcile_scope
from tests.controllers.conftest import Harness
from tests.controllers.test_identities import (
    SECOND,
    AssumeRoleRecorder,
    cluster_in,
    cluster_vpcs,
    role_identity,
    targets,
    with_identity,
)
from tests.support.eventually import eventually

TIMEOUT = 90.0
AN_HOUR = 3600.0


@pytest.fixture(autouse=True)
def identity_recheck_an_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    # The AWSCluster controller's own wait, and the one the machine and pool controllers share.
    for module in ("controllers.awscluster", "controllers.identity"):
        monkeypatch.setattr(f"{module}.RECHECK_AFTER", AN_HOUR)


class SigningKeys:
    """The access key that signed each EC2 request, in order."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self._lock = threading.Lock()

    def hook(self, client: Any, service: str) -> None:
        if service == "ec2":
            client.meta.events.register("before-send.ec2", self._signed)

    def _signed(self, request: Any, **_: Any) -> None:
        header = request.headers.get("Authorization", b"")
        text = header.decode() if isinstance(header, bytes) else str(header)
        match = re.search(r"Credential=([^/]+)/", text)
        with self._lock:
            self.keys.append(match.group(1) if match else "")


@pytest.fixture
def assume_calls() -> Iterator[AssumeRoleRecorder]:
    recorder = AssumeRoleRecorder()
    unregister = register_client_hook(recorder.hook)
    yield recorder
    unregister()


@pytest.fixture
def signing_keys() -> Iterator[SigningKeys]:
    recorder = SigningKeys()
    unregister = register_client_hook(recorder.hook)
    yield recorder
    unregister()


def second_account_key(harness: Harness, session: str) -> dict[str, str]:
    """A temporary key of the second account, as a user would paste into the identity's Secret."""
    issued = boto3.client(
        "sts",
        endpoint_url=harness.server.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).assume_role(RoleArn=f"arn:aws:iam::{SECOND}:role/static-key", RoleSessionName=session)["Credentials"]
    return {
        "AccessKeyID": issued["AccessKeyId"],
        "SecretAccessKey": issued["SecretAccessKey"],
        "SessionToken": issued["SessionToken"],
    }


def keys_secret(values: dict[str, str]) -> Secret:
    return Secret(metadata=ObjectMeta(name="workload-keys", namespace=NAMESPACE), string_data=values)


def static_identity() -> AWSClusterStaticIdentity:
    return AWSClusterStaticIdentity.model_validate(
        {"metadata": {"name": "keys"}, "spec": {"secretRef": "workload-keys", "allowedNamespaces": {}}}
    )


def awscluster(harness: Harness) -> AWSCluster:
    return harness.store.get(AWSCluster, "demo", "default")


def condition_status(harness: Harness, condition: str) -> tuple[str, str | None] | None:
    found = next((c for c in awscluster(harness).status.conditions if c.type == condition), None)
    return None if found is None else (found.status, found.reason)


def test_creating_the_missing_identity_makes_the_waiting_apply_converge(
    harness: Harness, example: Callable[[], list[KubeObject]], assume_calls: AssumeRoleRecorder
) -> None:
    """``capa apply``'s wait (the scoped in-process manager) hears the identity being created by another
    writer: the cluster converges in the role's account although its re-check is an hour away."""
    stored = harness.apply(with_identity(example(), "AWSClusterRoleIdentity", "workload"))
    outcome: list[ConvergeResult] = []
    waiting = threading.Thread(
        target=lambda: outcome.append(harness.converge(targets(stored), timeout=TIMEOUT)), daemon=True
    )
    waiting.start()

    eventually(
        lambda: condition_status(harness, PRINCIPAL_CREDENTIAL_RETRIEVED) == ("False", RETRIEVAL_FAILED),
        "the cluster reports its missing identity",
    )
    assert cluster_vpcs(harness, SECOND) == []
    harness.apply([role_identity()])  # another writer: the waiting manager hears it by its watch
    waiting.join(TIMEOUT + 10)

    assert outcome, "the wait did not end"
    assert outcome[0].converged, outcome[0].states
    assert (condition_status(harness, PRINCIPAL_CREDENTIAL_RETRIEVED) or ("",))[0] == "True"
    assert len(cluster_vpcs(harness, SECOND)) == 1
    assert cluster_vpcs(harness, "123456789012") == []
    # One pool for the cluster and its machines: the controllers mapping the identity's event drop none.
    assert len(assume_calls.calls) == 1, assume_calls.calls


def test_a_rotated_secret_key_is_used_by_the_next_calls(
    harness: Harness, example: Callable[[], list[KubeObject]], signing_keys: SigningKeys
) -> None:
    """One manager, one set of controllers (so one pool cache): the cluster converges with the first key;
    the Secret's keys are replaced; the watch wakes the AWSCluster and its AWSMachine, whose calls are
    signed with the new key and never again with the old one."""
    first, second = second_account_key(harness, "first"), second_account_key(harness, "second")
    objects = with_identity(example(), "AWSClusterStaticIdentity", "keys")
    harness.apply([keys_secret(first), static_identity(), *objects])
    manager = Manager(harness.store, harness.controllers())
    keys = [key_of(o) for o in (*harness.store.list(AWSCluster), *harness.store.list(AWSMachine))]
    rotated_at: list[tuple[int, int, int]] = []

    def settled() -> bool:
        return not manager.has_work(keys) and set(keys) <= manager.reconciled_keys

    def until() -> bool:
        if not settled():
            return False
        if not rotated_at:
            if not awscluster(harness).status.ready:
                return False
            secret = harness.store.get(Secret, "workload-keys", NAMESPACE)
            secret.string_data = second
            secret.data = {}
            rotated_at.append(
                (len(signing_keys.keys), manager.reconciles["awscluster"], manager.reconciles["awsmachine"])
            )
            harness.store.update(secret)  # another writer's edit
            return False
        _calls, clusters, machines = rotated_at[0]
        return manager.reconciles["awscluster"] > clusters and manager.reconciles["awsmachine"] > machines

    assert manager.run(until=until, timeout=TIMEOUT), "the rotation woke no reconcile"
    calls = rotated_at[0][0]
    before, after = set(signing_keys.keys[:calls]), set(signing_keys.keys[calls:])
    assert first["AccessKeyID"] in before
    assert after == {second["AccessKeyID"]}, "every call after the rotation is signed with the new key"
    assert len(cluster_vpcs(harness, SECOND)) == 1


def test_users_of_follows_the_chain_from_a_secret_to_the_clusters_and_drops_their_pools(
    harness: Harness, example: Callable[[], list[KubeObject]], assume_calls: AssumeRoleRecorder
) -> None:
    hop = role_identity("hop", sourceIdentityRef={"kind": "AWSClusterStaticIdentity", "name": "keys"})
    top = role_identity("top", sourceIdentityRef={"kind": "AWSClusterRoleIdentity", "name": "hop"})
    unrelated = role_identity("alone")
    harness.apply(
        [
            keys_secret(second_account_key(harness, "chain")),
            static_identity(),
            hop,
            top,
            unrelated,
            *with_identity(example(), "AWSClusterRoleIdentity", "top"),
        ]
    )
    identities = Identities(harness.store, harness.pool)
    pool = identities.pool_for(cluster_in("default", name="top"))
    alone = identities.pool_for(cluster_in("default", name="alone"))
    secret = harness.store.get(Secret, "workload-keys", NAMESPACE)
    assumed = len(assume_calls.calls)

    # An event of the version the pool was built from (each controller maps the same event) keeps it.
    assert [c.name for c in identities.users_of(secret)] == ["demo"]
    assert identities.pool_for(cluster_in("default", name="top")) is pool
    assert len(assume_calls.calls) == assumed, "no AssumeRole again for the version the pool has"

    # A new version of the Secret drops the pools built from it, and only those.
    secret.string_data = second_account_key(harness, "rotated")
    secret.data = {}
    rotated = harness.store.update(secret)
    assert [c.name for c in identities.users_of(rotated)] == ["demo"]
    assert pool not in [p for _, p in identities._pools.values()], "the pool of the old key is dropped"
    assert identities.pool_for(cluster_in("default", name="top")) is not pool
    assert identities.pool_for(cluster_in("default", name="alone")) is alone

    assert [c.name for c in identities.users_of(harness.store.get(AWSClusterRoleIdentity, "hop"))] == ["demo"]
    assert identities.users_of(harness.store.get(AWSClusterRoleIdentity, "alone")) == []
    identities.users_of(harness.store.get(AWSClusterRoleIdentity, "alone"), deleted=True)
    assert alone not in [p for _, p in identities._pools.values()], "a deleted identity's pool is dropped"
    elsewhere = Secret(metadata=ObjectMeta(name="workload-keys", namespace="default"), string_data={"a": "b"})
    assert identities.users_of(elsewhere) == [], "a Secret outside the identities' namespace is no key"


def test_the_identity_chain_is_in_the_scope_of_a_wait_for_the_cluster(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    hop = role_identity("hop", sourceIdentityRef={"kind": "AWSClusterStaticIdentity", "name": "keys"})
    stored = harness.apply(
        [static_identity(), hop, *with_identity(example(), "AWSClusterRoleIdentity", "hop")]
    )

    scope = reconcile_scope(harness.store, targets(stored))

    for key in (
        ObjectKey("AWSClusterRoleIdentity", "", "hop"),
        ObjectKey("AWSClusterStaticIdentity", "", "keys"),
        ObjectKey("Secret", NAMESPACE, "workload-keys"),
    ):
        assert key in scope, f"{key} is not in the scope of the cluster's wait"


def test_the_controller_process_watches_the_identities_and_wakes_the_clusters(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """``capa controller`` (informers over the store: the Kubernetes API in production) has an informer
    per identity kind, and an identity created by another writer queues the AWSCluster naming it and its
    AWSMachines (no worker runs: the queues show what the watch woke)."""
    harness.apply(with_identity(example(), "AWSClusterStaticIdentity", "keys"))
    process = ControllerProcess(
        harness.store, lambda store: aws_controllers(store, harness.pool, harness.engine)
    )
    wanted = {"AWSClusterStaticIdentity", "AWSClusterRoleIdentity", "AWSClusterControllerIdentity", "Secret"}
    assert wanted <= {informer.kind.KIND for informer in process.informers}
    process.start_informers()
    try:
        assert process.wait_for_sync(timeout=30)
        for queue in process.queues.values():  # what the first list queued
            while (key := queue.get(0)) is not None:
                queue.done(key)
        cluster = ObjectKey("AWSCluster", "default", "demo")
        machines = [key_of(m) for m in harness.store.list(AWSMachine)]
        assert not process.router.has_work([cluster, *machines])

        harness.apply([static_identity()])

        eventually(
            lambda: process.queues["AWSCluster"].has_work([cluster]), "the identity queues the AWSCluster"
        )
        eventually(
            lambda: all(process.queues["AWSMachine"].has_work([m]) for m in machines),
            "the identity queues the cluster's AWSMachines",
        )
    finally:
        process.stop_informers()
