"""A status write to the SQLite store stores the status alone: it validates the status (not a spec it does
not store), changes the stored document in place under the same resourceVersion check, records one
MODIFIED event with the document as written, and returns that document."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from capa_py.api import AWSCluster, Cluster
from capa_py.api.meta import ManagedFieldsEntry
from capa_py.store import Conflict, Invalid, SQLiteStore


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "state.db") as store:
        yield store


def aws_cluster() -> AWSCluster:
    return AWSCluster.model_validate(
        {"metadata": {"name": "demo"}, "spec": {"region": "us-east-1", "network": {"vpc": {"id": "vpc-1"}}}}
    )


def test_a_status_write_does_not_validate_the_spec_it_does_not_store(sqlite: SQLiteStore) -> None:
    cluster = sqlite.create(aws_cluster())
    # A spec no create or update would accept (a bring-your-own VPC is never tagged), set in memory only:
    # the status write ignores the spec, so it neither refuses nor stores it.
    cluster.spec.network.vpc.tags = {"team": "a"}
    cluster.status.ready = True
    written = sqlite.update_status(cluster)
    assert written.status.ready is True
    stored = sqlite.get(AWSCluster, "demo")
    assert stored.status.ready is True
    assert stored.spec.network.vpc.tags == {}, "the status write stored the caller's spec"


def test_an_invalid_status_writes_nothing(sqlite: SQLiteStore) -> None:
    created = sqlite.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    created.status.phase = "Exploded"  # type: ignore[assignment]
    with pytest.raises(Invalid) as caught:
        sqlite.update_status(created)
    assert caught.value.field == "status.phase"
    assert sqlite.current_resource_version() == created.metadata.resource_version
    assert list(sqlite.watch(Cluster, resource_version=created.metadata.resource_version, timeout=0)) == []


def test_a_status_write_records_one_modified_event_with_the_document_written(sqlite: SQLiteStore) -> None:
    created = sqlite.create(Cluster.model_validate({"metadata": {"name": "demo", "labels": {"app": "web"}}}))
    created.status.phase = "Provisioning"
    written = sqlite.update_status(created)

    events = list(sqlite.watch(Cluster, resource_version=created.metadata.resource_version, timeout=0))
    assert [(e.type, e.resource_version) for e in events] == [("MODIFIED", written.metadata.resource_version)]
    assert events[0].object == written == sqlite.get(Cluster, "demo")
    assert int(written.metadata.resource_version or 0) == int(created.metadata.resource_version or 0) + 1
    # A status write changes no label: a selector watch sees the object change, not appear.
    selected = list(
        sqlite.watch(
            Cluster, resource_version=created.metadata.resource_version, label_selector="app=web", timeout=0
        )
    )
    assert [e.type for e in selected] == ["MODIFIED"]


def test_a_stale_status_write_conflicts_and_changes_nothing(sqlite: SQLiteStore) -> None:
    created = sqlite.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    first = created.model_copy(deep=True)
    first.status.phase = "Provisioning"
    sqlite.update_status(first)
    stale = created.model_copy(deep=True)
    stale.status.phase = "Failed"
    with pytest.raises(Conflict):
        sqlite.update_status(stale)
    assert sqlite.get(Cluster, "demo").status.phase == "Provisioning"


def test_a_status_write_keeps_managed_fields_unless_it_carries_them(sqlite: SQLiteStore) -> None:
    created = sqlite.create(Cluster.model_validate({"metadata": {"name": "demo"}}))
    entry = ManagedFieldsEntry(manager="capa", operation="Update", subresource="status")
    created.metadata.managed_fields = [entry]
    created.status.phase = "Provisioning"
    first = sqlite.update_status(created)
    assert first.metadata.managed_fields == [entry]
    first.metadata.managed_fields = None
    first.status.phase = "Provisioned"
    second = sqlite.update_status(first)
    assert second.metadata.managed_fields == [entry], "a write carrying no managedFields dropped them"


def test_writers_of_one_process_on_one_file_take_turns_without_losing_a_write(tmp_path: Path) -> None:
    # Two stores on one file in one process, eight threads each: every status write is kept, each got
    # its own resourceVersion (the writers queue on the process's lock for the file, not in SQLite's
    # busy handler).
    path = tmp_path / "state.db"
    with SQLiteStore(path) as one, SQLiteStore(path) as two:
        for index in range(16):
            one.create(Cluster.model_validate({"metadata": {"name": f"c{index}"}}))
        versions: list[str] = []
        lock = threading.Lock()

        def write(store: SQLiteStore, index: int) -> None:
            for round_ in range(5):
                cluster = store.get(Cluster, f"c{index}")
                cluster.status.failure_message = f"round {round_}"
                written = store.update_status(cluster)
                with lock:
                    versions.append(written.metadata.resource_version or "")

        threads = [threading.Thread(target=write, args=(one if i % 2 else two, i)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(versions) == len(set(versions)) == 80
        assert all(one.get(Cluster, f"c{i}").status.failure_message == "round 4" for i in range(16))
