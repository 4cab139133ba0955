"""A move interrupted after any write, then run again, ends exactly as an uninterrupted move: every object
once on the target, none of the graph on the source, the clusters unpaused on the target. While it is
interrupted, no cluster is unpaused on both sides: the source's stays paused until the target has all."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.api.cluster import Cluster
from capa_py.api.contract import InfrastructureStatus
from capa_py.move import MOVABLE_KINDS, move
from capa_py.store.sqlite import SQLiteStore
from tests.move.scenario import populate


class Interrupted(Exception):
    pass


def _stop_after(writes: int) -> object:
    done: list[str] = []

    def after_write(what: str) -> None:
        done.append(what)
        if len(done) == writes:
            raise Interrupted(what)

    return after_write


def _state(store: SQLiteStore) -> dict[tuple[str, str | None, str], object]:
    """Every object of a movable kind, by key, with what a move must preserve."""
    found: dict[tuple[str, str | None, str], object] = {}
    for kind in MOVABLE_KINDS:
        for obj in store.list(kind):
            data = obj.to_dict()
            meta = data["metadata"]
            for volatile in ("uid", "resourceVersion", "creationTimestamp", "generation", "annotations"):
                meta.pop(volatile, None)
            for ref in meta.get("ownerReferences", []):
                owner = store.get(
                    next(k for k in MOVABLE_KINDS if ref["kind"] == k.KIND), ref["name"], obj.namespace
                )
                ref["uid"] = "the owner's" if ref["uid"] == owner.uid else "another's"
            found[(obj.kind, obj.namespace, obj.name)] = data
    return found


def _writes_of_a_whole_move(tmp_path: Path) -> tuple[int, dict[tuple[str, str | None, str], object]]:
    source, target = SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")
    populate(source)
    writes: list[str] = []
    move(source, target, namespace="default", after_write=writes.append)
    reference = _state(target)
    source.close()
    target.close()
    return len(writes), reference


def test_a_move_interrupted_after_every_write_completes_when_run_again(tmp_path: Path) -> None:
    total, reference = _writes_of_a_whole_move(tmp_path / "reference")
    assert total > 40, "the scenario is too small to exercise every step"

    for stop in range(1, total):
        here = tmp_path / str(stop)
        here.mkdir()
        source, target = SQLiteStore(here / "a.db"), SQLiteStore(here / "b.db")
        populate(source)
        with pytest.raises(Interrupted):
            move(source, target, namespace="default", after_write=_stop_after(stop))  # type: ignore[arg-type]
        on_source = {c.name: c for c in source.list(Cluster)}
        on_target = {c.name: c for c in target.list(Cluster)}
        for name in on_source.keys() & on_target.keys():
            assert on_source[name].spec.paused, (
                f"after write {stop}: {name} copied while unpaused on the source"
            )
            assert on_target[name].spec.paused, f"after write {stop}: {name} unpaused on both sides"

        move(source, target, namespace="default")

        assert _state(target) == reference, f"interrupted after write {stop}"
        assert all(not source.list(k, namespace="default") for k in (Cluster,)), stop
        source.close()
        target.close()


def test_a_move_of_every_namespace_interrupted_before_unpausing_unpauses_when_run_again(
    tmp_path: Path,
) -> None:
    total, reference = _writes_of_a_whole_move(tmp_path / "reference")
    source, target = SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")
    populate(source)
    with pytest.raises(Interrupted, match="deleted Cluster"):
        move(source, target, after_write=_stop_after(total - 2))  # type: ignore[arg-type]
    assert source.list(Cluster) == []
    assert all(c.spec.paused for c in target.list(Cluster))

    result = move(source, target)

    assert result.objects == []
    assert _state(target) == reference
    assert not any(c.spec.paused for c in target.list(Cluster))
    source.close()
    target.close()


def test_a_status_written_on_the_target_between_the_moves_writes_does_not_stop_it(tmp_path: Path) -> None:
    """A controller on the target writes each object's status as soon as it is created (its Paused
    condition, the Cluster being paused); the move's own status write then conflicted and the move
    stopped (a pivot under load failed so). The move's status is written again over the fresh copy."""
    source, target = SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")
    populate(source)
    raced: list[str] = []

    def controller_on_the_target(what: str) -> None:
        if not what.startswith("created "):
            return
        kind_name, namespace_name = what.removeprefix("created ").removesuffix(" on the target").split(" ")
        kind = next(k for k in MOVABLE_KINDS if kind_name == k.KIND)
        namespace, name = namespace_name.split("/")
        current = target.get(kind, name, namespace)
        status = getattr(current, "status", None)
        if not isinstance(status, InfrastructureStatus):
            return
        status.sync_contract(current.metadata.generation, paused="cluster default/demo is paused")
        target.update_status(current)
        raced.append(what)

    move(source, target, namespace="default", after_write=controller_on_the_target)

    assert raced, "no status write raced the move; the test is void"
    reference_source, reference_target = SQLiteStore(tmp_path / "c.db"), SQLiteStore(tmp_path / "d.db")
    populate(reference_source)
    move(reference_source, reference_target, namespace="default")
    assert _state(target) == _state(reference_target)
    assert list(source.list(Cluster)) == []
    for store in (source, target, reference_source, reference_target):
        store.close()
