"""retry_on_conflict: the read-modify-write loop every controller runs against optimistic concurrency."""

from __future__ import annotations

import pytest

from capa_py.api import Cluster
from capa_py.store import Conflict, SQLiteStore, retry_on_conflict


def bump(cluster: Cluster) -> None:
    annotations = cluster.metadata.annotations
    annotations["counter"] = str(int(annotations.get("counter", "0")) + 1)


def test_retry_on_conflict_writes_at_once_when_the_object_is_fresh(store: SQLiteStore) -> None:
    cluster = store.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    calls: list[str | None] = []

    def mutate(current: Cluster) -> None:
        calls.append(current.metadata.resource_version)
        bump(current)

    updated = retry_on_conflict(store, cluster, mutate)

    assert calls == [cluster.metadata.resource_version], "a fresh object needs exactly one attempt"
    assert updated.metadata.annotations["counter"] == "1"


def test_retry_on_conflict_rereads_and_reapplies_the_change(store: SQLiteStore) -> None:
    stale = store.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    other = stale.model_copy(deep=True)
    other.metadata.labels["other"] = "writer"
    store.update(other)

    updated = retry_on_conflict(store, stale, bump)

    assert updated.metadata.annotations["counter"] == "1", "the change must be applied once"
    assert updated.metadata.labels == {"other": "writer"}, "the concurrent change must not be overwritten"
    assert stale.metadata.annotations == {}, "the caller's object must not be mutated"


def test_retry_on_conflict_writes_status_through_the_status_subresource(store: SQLiteStore) -> None:
    stale = store.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    store.update_status(
        stale.model_copy(update={"status": stale.status.model_copy(update={"phase": "Pending"})})
    )

    def provision(current: Cluster) -> None:
        current.status.infrastructure_ready = True
        current.spec.paused = True  # ignored: a status write never changes the spec

    updated = retry_on_conflict(store, stale, provision, status=True)

    assert updated.status.infrastructure_ready is True
    assert updated.status.phase == "Pending", "the re-read status must be the base of the change"
    assert updated.spec.paused is False


def test_retry_on_conflict_gives_up_after_its_attempts(store: SQLiteStore) -> None:
    cluster = store.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    attempts = 0

    def always_raced(current: Cluster) -> None:
        nonlocal attempts
        attempts += 1
        racer = store.get(Cluster, "demo")
        racer.metadata.labels["race"] = str(attempts)
        store.update(racer)  # another writer gets in first, every time
        bump(current)

    with pytest.raises(Conflict):
        retry_on_conflict(store, cluster, always_raced, attempts=3)
    assert attempts == 3, f"expected 3 attempts before giving up, got {attempts}"
    assert "counter" not in store.get(Cluster, "demo").metadata.annotations
