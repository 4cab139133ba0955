"""The EventRecorder on the SQLite store: naming, namespaces, aggregation, failures, scrubbing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from capa_py.api.aws import AWSCluster
from capa_py.api.core import Event, Namespace
from capa_py.api.meta import ObjectMeta
from capa_py.runtime.events import MAX_MESSAGE, EventRecorder, events_for, scrub
from capa_py.store import SQLiteStore
from capa_py.store.errors import Unavailable

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "state.db")
    yield opened
    opened.close()


def _cluster(store: SQLiteStore, name: str = "demo", namespace: str = "team-a") -> AWSCluster:
    return store.create(
        AWSCluster.model_validate(
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}},
            }
        )
    )


def test_event_is_written_in_the_objects_namespace_named_like_client_go(store: SQLiteStore) -> None:
    cluster = _cluster(store)
    recorder = EventRecorder(store, instance="host-1", clock=Clock())
    recorder.normal(cluster, "SuccessfulCreateVPC", "Created new managed VPC vpc-123")
    [event] = store.list(Event, namespace="team-a")
    assert re.fullmatch(r"demo\.[0-9a-f]+", event.name), event.name
    assert event.to_dict()["involvedObject"] == {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
        "kind": "AWSCluster",
        "name": "demo",
        "namespace": "team-a",
        "uid": cluster.uid,
        "resourceVersion": cluster.metadata.resource_version,
    }
    assert (event.type, event.reason, event.message) == (
        "Normal",
        "SuccessfulCreateVPC",
        "Created new managed VPC vpc-123",
    )
    assert event.count == 1
    assert event.first_timestamp == event.last_timestamp == T0
    assert event.source.component == event.reporting_component == "capa-py-controller"
    assert event.source.host == event.reporting_instance == "host-1"
    assert store.list(Event, namespace="default") == []


def test_cluster_scoped_object_events_go_to_default(store: SQLiteStore) -> None:
    namespace = store.create(Namespace(metadata=ObjectMeta(name="team-b")))
    EventRecorder(store).warning(namespace, "Stuck", "namespace is stuck")
    [event] = store.list(Event, namespace="default")
    assert event.involved_object.kind == "Namespace"
    assert event.involved_object.namespace is None
    assert event.type == "Warning"


def test_a_repeat_counts_on_the_same_object(store: SQLiteStore) -> None:
    cluster = _cluster(store)
    clock = Clock()
    recorder = EventRecorder(store, clock=clock)
    recorder.warning(cluster, "FailedReconcileVpc", "UnauthorizedOperation: denied")
    clock.now = T0 + timedelta(seconds=30)
    recorder.warning(cluster, "FailedReconcileVpc", "UnauthorizedOperation: denied")
    clock.now = T0 + timedelta(seconds=90)
    recorder.warning(cluster, "FailedReconcileVpc", "UnauthorizedOperation: denied")
    [event] = store.list(Event, namespace="team-a")
    assert event.count == 3
    assert event.first_timestamp == T0
    assert event.last_timestamp == T0 + timedelta(seconds=90)


def test_a_different_message_type_or_object_is_a_new_event(store: SQLiteStore) -> None:
    demo, other = _cluster(store), _cluster(store, "other")
    recorder = EventRecorder(store)
    recorder.normal(demo, "DeletionBlocked", "waiting for 2 AWSMachine(s)")
    recorder.normal(demo, "DeletionBlocked", "waiting for 1 AWSMachine(s)")
    recorder.warning(demo, "DeletionBlocked", "waiting for 1 AWSMachine(s)")
    recorder.normal(other, "DeletionBlocked", "waiting for 1 AWSMachine(s)")
    events = store.list(Event, namespace="team-a")
    assert len(events) == 4
    assert {e.count for e in events} == {1}
    assert [e.message for e in events_for(store, demo)] == [
        "waiting for 2 AWSMachine(s)",
        "waiting for 1 AWSMachine(s)",
        "waiting for 1 AWSMachine(s)",
    ]


def test_a_repeat_after_its_event_was_deleted_writes_a_new_one(store: SQLiteStore) -> None:
    cluster = _cluster(store)
    recorder = EventRecorder(store)
    recorder.normal(cluster, "SuccessfulCreateVPC", "Created new managed VPC vpc-1")
    [first] = store.list(Event, namespace="team-a")
    store.delete(Event, first.name, "team-a")
    recorder.normal(cluster, "SuccessfulCreateVPC", "Created new managed VPC vpc-1")
    [second] = store.list(Event, namespace="team-a")
    assert second.name != first.name
    assert second.count == 1


class BrokenStore:
    """A store whose every write fails, as a store that went away does."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, obj: Any) -> Any:
        self.calls += 1
        raise Unavailable("state.db", "disk I/O error")


def test_a_failed_write_is_logged_and_never_raised(store: SQLiteStore) -> None:
    cluster = _cluster(store)
    broken = BrokenStore(store)
    with capture_logs() as logs:
        EventRecorder(broken).normal(cluster, "SuccessfulCreateVPC", "Created new managed VPC vpc-1")  # type: ignore[arg-type]
    assert broken.calls == 1
    assert store.list(Event) == []
    [entry] = [e for e in logs if e["event"] == "could not record an event"]
    assert entry["reason"] == "SuccessfulCreateVPC"
    assert entry["log_level"] == "warning"


def test_messages_never_carry_credentials_or_blobs() -> None:
    access_key = "AKIA" + "ABCDEFGHIJKLMNOP"
    blob = "QUJD" * 60
    message = scrub(
        f"denied for {access_key}: aws_secret_access_key=wJalr/XUtnFEMI token: abc.def "
        f'password="hunter 2" userData {blob} in vpc-123'
    )
    assert access_key not in message
    assert "wJalr" not in message
    assert "abc.def" not in message
    assert "hunter" not in message
    assert blob not in message
    assert message.endswith("in vpc-123")
    assert len(scrub("vpc-123 " * 1000)) == MAX_MESSAGE


def test_recorded_message_is_scrubbed(store: SQLiteStore) -> None:
    cluster = _cluster(store)
    EventRecorder(store).warning(cluster, "FailedReconcileVpc", "bad key AKIAABCDEFGHIJKLMNOP")
    [event] = store.list(Event, namespace="team-a")
    assert event.message == "bad key ***"
