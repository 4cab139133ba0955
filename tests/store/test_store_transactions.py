"""``apply_objects`` stores a manifest's objects in one transaction where the store offers transactions (the
:class:`~capa_py.store.protocol.Transactions` capability, found on the store's class), and one by one
elsewhere: the capability decides, not the store's type."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capa_py.api.cluster import Cluster
from capa_py.api.meta import KubeObject, ObjectMeta
from capa_py.operations import apply_objects
from capa_py.store.errors import StoreError, Unavailable
from capa_py.store.protocol import atomic_of
from capa_py.store.sqlite import SQLiteStore


class FailingSecondCreate(SQLiteStore):
    """The embedded store whose second create fails (a disk full, say), after the first one succeeded."""

    creates = 0

    def create(self, obj: Any) -> Any:
        self.creates += 1
        if self.creates == 2:
            raise Unavailable(str(self.path), "the disk is full")
        return super().create(obj)


class Delegating:
    """A wrapper passing every call on to another store, with no transactions of its own."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _clusters(*names: str) -> list[KubeObject]:
    return [Cluster(metadata=ObjectMeta(name=n, namespace="default")) for n in names]


@pytest.fixture
def failing(tmp_path: Path) -> Iterator[FailingSecondCreate]:
    store = FailingSecondCreate(tmp_path / "state.db")
    yield store
    store.close()


def test_the_embedded_store_offers_transactions_and_a_delegating_wrapper_does_not(
    failing: FailingSecondCreate,
) -> None:
    assert atomic_of(failing) is not None
    assert atomic_of(Delegating(failing)) is None


def test_a_store_with_transactions_keeps_none_of_an_apply_that_failed_half_way(
    failing: FailingSecondCreate,
) -> None:
    with pytest.raises(StoreError, match="the disk is full"):
        apply_objects(failing, _clusters("one", "two", "three"))
    assert [c.name for c in failing.list(Cluster)] == []


def test_a_store_without_transactions_keeps_what_was_written_before_the_failure(
    failing: FailingSecondCreate,
) -> None:
    with pytest.raises(StoreError, match="the disk is full"):
        apply_objects(Delegating(failing), _clusters("one", "two", "three"))  # type: ignore[arg-type]
    assert [c.name for c in failing.list(Cluster)] == ["one"]
