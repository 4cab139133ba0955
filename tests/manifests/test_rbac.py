"""The ClusterRole grants exactly what the controllers do: derived by recording a real create and delete."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from capa_py.api.aws import AWSCluster, AWSMachine
from capa_py.api.aws_identity import (
    AWSClusterControllerIdentity,
    AWSClusterRoleIdentity,
    AWSClusterStaticIdentity,
    AWSIdentityReference,
)
from capa_py.api.cluster import Cluster
from capa_py.api.core import ConfigMap, Event, Secret
from capa_py.api.loader import load_manifests
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.manifests.rbac import (
    IDENTITY_ACCESS,
    MACHINE_POOL_ACCESS,
    MACHINE_SET_ACCESS,
    NAMESPACE,
    OUTSIDE_THE_RECORDING,
    READ_FROM_THE_CACHE,
    TINKERBELL_ACCESS,
    cluster_role,
)
from capa_py.runtime.events import EventRecorder
from capa_py.runtime.leader import LeaderElector, LeaseTiming
from controllers import aws_controllers
from controllers.run import converge
from tests.controllers.conftest import Harness
from tests.manifests.recording_store import RecordingStore
from tests.support.eventually import eventually


def _granted(role: dict) -> set[tuple[str, str, str]]:  # type: ignore[type-arg]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _record_controllers(
    harness: Harness, objects: list[KubeObject], cluster: str = "demo"
) -> set[tuple[str, str, str]]:
    recording = RecordingStore(harness.store)
    controllers = aws_controllers(recording, harness.pool, harness.engine)  # type: ignore[arg-type]
    targets = [o for o in objects if not isinstance(o, Secret)]
    created = converge(recording, controllers, targets, timeout=120)  # type: ignore[arg-type]
    assert created.converged, f"the example did not converge: {created.states}"
    # The user deletes the Cluster; the controllers cascade to the rest and remove their finalizers.
    harness.store.delete(Cluster, cluster, "default")
    gone = converge(recording, controllers, targets, goal="gone", timeout=120)  # type: ignore[arg-type]
    assert gone.converged, f"the example was not deleted: {gone.states}"
    return recording.requests


def _record_leader_election(harness: Harness) -> set[tuple[str, str, str]]:
    recording = RecordingStore(harness.store)
    first = LeaderElector(recording, "first", timing=LeaseTiming.for_duration(15))  # type: ignore[arg-type]
    first.acquire(wait=False)  # creates the record
    assert first.try_acquire_or_renew()  # renews it
    second = LeaderElector(recording, "second", timing=LeaseTiming.for_duration(15))  # type: ignore[arg-type]
    # A waiting candidate watches the record and takes it over once it is released.
    waiting = threading.Thread(target=second.acquire, kwargs={"wait": True, "timeout": 30})
    waiting.start()
    eventually(
        lambda: ("coordination.k8s.io", "leases", "watch") in recording.requests,
        "the second candidate waiting on the record",
        timeout=30,
        interval=0.01,
    )
    first.release()
    waiting.join(30)
    assert second.held
    second.release()
    return recording.requests


def _record_repeated_event(harness: Harness) -> set[tuple[str, str, str]]:
    """A repeat is counted on the stored event; whether the flow above repeats one depends on timing."""
    recording = RecordingStore(harness.store)
    recorder = EventRecorder(recording)  # type: ignore[arg-type]
    subject = harness.store.create(ConfigMap(metadata=ObjectMeta(name="subject", namespace="default")))
    recorder.normal(subject, "Tested", "the same event twice")
    recorder.normal(subject, "Tested", "the same event twice")
    [event] = harness.store.list(Event, namespace="default", field_selector="reason=Tested")
    assert event.count == 2
    return recording.requests


def test_cluster_role_grants_exactly_what_the_controllers_and_leader_election_request(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    used = (
        _record_controllers(harness, harness.apply(example()))
        | _record_leader_election(harness)
        | _record_repeated_event(harness)
    )
    cached = {(m.API_VERSION.rpartition("/")[0], m.PLURAL, verb) for m, verb, _why in READ_FROM_THE_CACHE}
    assert cached <= used, "a read said to come from the cache is no longer made at all"
    used -= cached
    granted = _granted(cluster_role())
    elsewhere = {
        (model.API_VERSION.rpartition("/")[0], model.PLURAL + (f"/{sub}" if sub else ""), verb)
        for model, sub, verbs, _why in OUTSIDE_THE_RECORDING
        for verb in verbs
    } | {
        (model.API_VERSION.rpartition("/")[0], model.PLURAL + (f"/{sub}" if sub else ""), verb)
        for model, sub, verbs in (
            *TINKERBELL_ACCESS,
            *MACHINE_SET_ACCESS,
            *IDENTITY_ACCESS,
            *MACHINE_POOL_ACCESS,
        )
        for verb in verbs
    }
    assert used - granted == set(), f"requests the ClusterRole does not allow: {sorted(used - granted)}"
    unused = granted - used - elsewhere
    assert unused == set(), f"verbs granted that no controller uses: {sorted(unused)}"
    assert elsewhere <= granted
    # Sanity: the recording saw the kinds the controllers own and the lease.
    resources = {resource for _, resource, _ in used}
    for model in (AWSCluster, AWSMachine):
        assert f"{model.PLURAL}/status" in resources
    assert "leases" in resources
    assert {("", "events", verb) for verb in ("create", "get", "update")} <= used, "events are recorded"


def test_a_cluster_with_an_identity_needs_exactly_the_identity_access_more(
    harness: Harness, example: Callable[[], list[KubeObject]]
) -> None:
    """A role identity whose source is a static identity, allowed by a namespace selector: every request
    the controllers make is granted, and every grant of IDENTITY_ACCESS is used."""
    secret = Secret(
        metadata=ObjectMeta(name="keys", namespace=NAMESPACE),
        string_data={"AccessKeyID": "AKIAEXAMPLEKEY000000", "SecretAccessKey": "not-a-real-secret"},
    )
    selector = {"selector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}}
    identities = [
        AWSClusterStaticIdentity.model_validate(
            {"metadata": {"name": "keys"}, "spec": {"secretRef": "keys", "allowedNamespaces": selector}}
        ),
        AWSClusterRoleIdentity.model_validate(
            {
                "metadata": {"name": "workload"},
                "spec": {
                    "roleARN": "arn:aws:iam::222222222222:role/workload",
                    "allowedNamespaces": {},
                    "sourceIdentityRef": {"kind": "AWSClusterStaticIdentity", "name": "keys"},
                },
            }
        ),
    ]
    objects = example()
    for obj in objects:
        if isinstance(obj, AWSCluster):
            obj.spec.identity_ref = AWSIdentityReference(kind="AWSClusterRoleIdentity", name="workload")
    harness.apply([secret, *identities])
    used = _record_controllers(harness, harness.apply(objects))
    cached = {(m.API_VERSION.rpartition("/")[0], m.PLURAL, verb) for m, verb, _why in READ_FROM_THE_CACHE}
    used -= cached
    granted = _granted(cluster_role())
    assert used - granted == set(), f"requests the ClusterRole does not allow: {sorted(used - granted)}"
    # The controller identity is read as the others are, when a cluster names it (not in this chain).
    identity = {
        (model.API_VERSION.rpartition("/")[0], model.PLURAL, verb)
        for model, _sub, verbs in IDENTITY_ACCESS
        if model is not AWSClusterControllerIdentity
        for verb in verbs
    }
    assert identity <= used, f"granted for identities, never used: {sorted(identity - used)}"


def test_the_machine_pool_controllers_request_what_the_cluster_role_grants_them(harness: Harness) -> None:
    """Recorded over the machine pool example (a create and a delete): every request is granted, and every
    verb MACHINE_POOL_ACCESS grants is used."""
    example = Path(__file__).resolve().parents[2] / "examples" / "aws-cluster-machinepool.yaml"
    used = _record_controllers(harness, harness.apply(load_manifests([example])), cluster="pool")
    used -= {(m.API_VERSION.rpartition("/")[0], m.PLURAL, verb) for m, verb, _why in READ_FROM_THE_CACHE}
    granted = _granted(cluster_role())
    assert used - granted == set(), f"requests the ClusterRole does not allow: {sorted(used - granted)}"
    pool_grants = {
        (model.API_VERSION.rpartition("/")[0], model.PLURAL + (f"/{sub}" if sub else ""), verb)
        for model, sub, verbs in MACHINE_POOL_ACCESS
        for verb in verbs
    }
    assert pool_grants - used == set(), (
        f"granted for machine pools but never used: {sorted(pool_grants - used)}"
    )
