"""A reconcile's own writes do not wake it again, but a deletion that lands during the reconcile always does.

The race: a reconcile reads its object, someone deletes it (a finalizer holds it), and the reconcile's
status write then conflicts, re-reads the object (now carrying a deletionTimestamp) and succeeds. The view
the reconcile reports at the end includes the deletion it never acted on; the deletion's event must still
queue the object, or nothing ever handles the deletion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import pytest

from capa_py.api import Cluster
from capa_py.api.meta import KubeObject
from capa_py.ctrlkit.result import Result, no_requeue
from capa_py.runtime.manager import Manager
from capa_py.runtime.queue import ObjectKey
from capa_py.store import SQLiteStore, WatchEvent
from capa_py.store.helpers import get_or_none
from controllers.base import patch_status, remove_finalizer, settle

HOLD = "test.capa-py.io/hold"


class StatusWriter:
    """Sets the Cluster's phase and reports its final view; on deletion, lets the Cluster go."""

    name = "status-writer"
    kind = Cluster
    watched_kinds: Sequence[type[KubeObject]] = ()

    def __init__(self, store: SQLiteStore, during: Callable[[], None]) -> None:
        self.store = store
        self.during = during
        self.saw: list[str] = []

    def map_event(self, event: WatchEvent[KubeObject]) -> Iterable[ObjectKey]:
        return []

    def reconcile(self, key: ObjectKey) -> Result:
        obj = self.store.get(Cluster, key.name, key.namespace)
        if obj.being_deleted:
            self.saw.append("deletion")
            remove_finalizer(self.store, obj, HOLD)
            return no_requeue()
        self.saw.append("cluster")
        self.during()

        def provisioning(c: Cluster) -> None:
            c.status.phase = "Provisioning"

        settle(self, key, patch_status(self.store, obj, provisioning))
        return no_requeue()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "state.db")
    store.create(
        Cluster.model_validate({"metadata": {"name": "c", "namespace": "default", "finalizers": [HOLD]}})
    )
    yield store
    store.close()


def _drain(manager: Manager) -> None:
    while manager.process_one(timeout=0.0):
        pass


def test_a_deletion_during_a_reconcile_whose_status_write_retried_is_reconciled(store: SQLiteStore) -> None:
    deleted: list[bool] = []

    def delete_once() -> None:
        if not deleted:
            deleted.append(True)
            store.delete(Cluster, "c", "default")

    controller = StatusWriter(store, delete_once)
    manager = Manager(store, [controller])
    manager.prime()
    _drain(manager)
    manager.poll_changes()
    _drain(manager)
    assert controller.saw == ["cluster", "deletion"]
    assert get_or_none(store, Cluster, "c", "default") is None, "the deletion was handled"


def test_a_reconciles_own_status_write_does_not_wake_it(store: SQLiteStore) -> None:
    controller = StatusWriter(store, lambda: None)
    manager = Manager(store, [controller])
    manager.prime()
    _drain(manager)
    manager.poll_changes()
    _drain(manager)
    assert controller.saw == ["cluster"]


def _gone_during_reconcile(store: SQLiteStore) -> tuple[Manager, list[dict[str, object]]]:
    """A reconcile during which its object goes away for good (a pivot moving it to another store deletes
    it without finalizers), so its status write finds nothing."""
    import structlog.testing

    def vanish() -> None:
        current = store.get(Cluster, "c", "default")
        current.metadata.finalizers = []
        store.update(current)
        store.delete(Cluster, "c", "default")

    manager = Manager(store, [StatusWriter(store, vanish)])
    manager.prime()
    with structlog.testing.capture_logs() as logs:
        _drain(manager)
    return manager, logs


def test_an_object_gone_during_its_reconcile_ends_it_without_an_error(store: SQLiteStore) -> None:
    manager, logs = _gone_during_reconcile(store)
    assert list(manager.errors) == []
    assert not [line for line in logs if line["event"] == "reconcile raised"], logs
    assert [line["key"] for line in logs if line["event"] == "object gone during the reconcile"] == [
        "Cluster default/c"
    ]


def test_another_object_missing_during_a_reconcile_is_still_an_error(store: SQLiteStore) -> None:
    class ReadsAMissingMachine(StatusWriter):
        def reconcile(self, key: ObjectKey) -> Result:
            from capa_py.api import Machine

            self.store.get(Machine, "absent", "default")
            return no_requeue()

    manager = Manager(store, [ReadsAMissingMachine(store, lambda: None)])
    manager.prime()
    _drain(manager)
    assert [(str(key), error) for key, error in manager.errors] == [
        ("Cluster default/c", "Machine default/absent not found")
    ]
