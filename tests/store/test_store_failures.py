"""The SQLite store when its file or disk fails, or a newer capa-py wrote it: store errors, never a raw
SQLite or validation traceback, and the file left as it was.

* a full disk (SQLite's own ``database or disk is full``, by ``max_page_count`` on every connection) during
  an apply of 400 objects: :class:`WriteFailed`, and none of them stored (it once stored the first few);
* a newer layout version, a newer index layout, a renamed column, objects of an unknown API version from a
  newer capa-py: :class:`Newer` naming both versions, the file not rewritten (a newer index layout was once
  rebuilt to the old one; a renamed column failed at the first list with ``no such column``);
* an object with a field this version does not know: :class:`Unreadable` naming the object, the field and
  the capa-py that wrote the store (it was a pydantic ``ValidationError``);
* a corrupted page: :class:`Damaged` naming the file and ``sqlite3 .recover`` (it was ``database disk image
  is malformed`` from wherever it was met).
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capa_py import __version__
from capa_py.api import AWSCluster, Cluster, Secret
from capa_py.api.meta import ObjectMeta
from capa_py.operations import apply_objects
from capa_py.store import SQLiteStore
from capa_py.store.errors import Damaged, Newer, Unreadable, WriteFailed
from capa_py.store.sqlite import LAYOUT_VERSION
from capa_py.store.sqlite_index import INDEX_VERSION

NEWER = "99.0.0"


def _aws_cluster(name: str = "demo") -> AWSCluster:
    return AWSCluster.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"region": "us-east-1", "network": {"vpc": {"cidrBlock": "10.0.0.0/16"}}},
        }
    )


def _secrets(count: int) -> list[Secret]:
    payload = "x" * 2000
    return [
        Secret(metadata=ObjectMeta(name=f"s-{i:03d}", namespace="default"), string_data={"v": payload})
        for i in range(count)
    ]


def _edit(path: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Change the file as another program (a newer capa-py) would, with plain SQLite."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            for sql, params in statements:
                conn.execute(sql, params)
    finally:
        conn.close()


def _rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def _written_by_newer(path: Path) -> tuple[str, tuple[Any, ...]]:
    return ("UPDATE store_meta SET value=? WHERE name='newest_writer'", (NEWER,))


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SQLiteStore(path) as store:
        store.create(Cluster(metadata=ObjectMeta(name="demo", namespace="default")))
        store.create(_aws_cluster())
    return path


# -- a full disk ------------------------------------------------------------------------------------------
def _full_disk(free_pages: int) -> Callable[..., sqlite3.Connection]:
    connect = sqlite3.connect

    def limited(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        conn.execute(f"PRAGMA max_page_count={pages + free_pages}")
        return conn

    return limited


def test_an_apply_on_a_full_disk_stores_none_of_its_objects(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SQLiteStore(stored) as store:
        before = store.current_resource_version()
    monkeypatch.setattr(sqlite3, "connect", _full_disk(free_pages=40))
    with SQLiteStore(stored) as store, pytest.raises(WriteFailed) as failed:
        apply_objects(store, _secrets(400))
    monkeypatch.undo()
    assert "database or disk is full" in str(failed.value)
    assert str(failed.value).startswith(f"cannot write the store at {stored}: "), str(failed.value)
    with SQLiteStore(stored) as store:
        assert list(store.list(Secret)) == [], "some objects of the failed apply were stored"
        assert store.current_resource_version() == before
        # The store still works once there is room again: the same apply stores all of them.
        assert len(apply_objects(store, _secrets(400))) == 400
        assert len(store.list(Secret)) == 400


def test_a_failed_apply_leaves_earlier_writes_and_the_store_usable(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite3, "connect", _full_disk(free_pages=40))
    with SQLiteStore(stored) as store:
        apply_objects(store, _secrets(3))
        with pytest.raises(WriteFailed):
            apply_objects(store, _secrets(400))
        # The same connection goes on: reads and small writes after the failure work.
        assert [s.name for s in store.list(Secret)] == ["s-000", "s-001", "s-002"]
        store.create(Cluster(metadata=ObjectMeta(name="after", namespace="default")))
    monkeypatch.undo()
    with SQLiteStore(stored) as store:
        assert {c.name for c in store.list(Cluster)} == {"demo", "after"}


# -- a newer capa-py's file -------------------------------------------------------------------------------
def test_a_newer_layout_is_refused_naming_both_versions_and_never_rewritten(stored: Path) -> None:
    _edit(
        stored,
        ("UPDATE store_meta SET value=? WHERE name='layout'", (str(LAYOUT_VERSION + 1),)),
        _written_by_newer(stored),
    )
    with pytest.raises(Newer) as refused:
        SQLiteStore(stored)
    message = str(refused.value)
    assert f"its layout is version {LAYOUT_VERSION + 1}, written by capa-py {NEWER}" in message, message
    assert f"this capa-py ({__version__}) knows layout {LAYOUT_VERSION}" in message, message
    with pytest.raises(Newer):
        SQLiteStore(stored, create=False)
    assert _rows(stored, "SELECT value FROM store_meta WHERE name='layout'") == [(str(LAYOUT_VERSION + 1),)]


def test_a_newer_index_layout_is_refused_not_rebuilt_to_the_old_one(stored: Path) -> None:
    newer = str(int(INDEX_VERSION) + 1)
    _edit(stored, ("UPDATE index_layout SET version=?", (newer,)), _written_by_newer(stored))
    with pytest.raises(Newer) as refused:
        SQLiteStore(stored)
    assert f"its index layout is version {newer}, written by capa-py {NEWER}" in str(refused.value)
    assert f"knows index layout {INDEX_VERSION}" in str(refused.value)
    assert _rows(stored, "SELECT version FROM index_layout") == [(newer,)]


def test_a_renamed_column_is_refused_when_the_store_is_opened(stored: Path) -> None:
    _edit(stored, ("ALTER TABLE objects RENAME COLUMN doc TO document", ()))
    with pytest.raises(Newer) as refused:
        SQLiteStore(stored)
    assert "its table objects has no column doc" in str(refused.value), str(refused.value)
    assert f"this capa-py ({__version__}) cannot read it" in str(refused.value)


def test_objects_of_an_api_version_a_newer_capa_py_wrote_are_refused(stored: Path) -> None:
    future = "infrastructure.cluster.x-k8s.io/v1beta9"
    _edit(
        stored,
        ("UPDATE objects SET api_version=? WHERE kind='AWSCluster'", (future,)),
        _written_by_newer(stored),
    )
    with pytest.raises(Newer) as refused:
        SQLiteStore(stored)
    message = str(refused.value)
    assert f"it holds objects of AWSCluster {future}, written by capa-py {NEWER}" in message, message
    assert f"this capa-py ({__version__}) does not know that API version" in message, message


def _add_field(path: Path) -> None:
    ((doc,),) = _rows(path, "SELECT doc FROM objects WHERE kind='AWSCluster'")
    document = json.loads(doc)
    document["spec"]["futureField"] = {"enabled": True}
    _edit(path, ("UPDATE objects SET doc=? WHERE kind='AWSCluster'", (json.dumps(document),)))


def test_an_object_with_a_field_from_a_newer_capa_py_is_refused_naming_the_field_and_version(
    stored: Path,
) -> None:
    _add_field(stored)
    _edit(stored, _written_by_newer(stored))
    with SQLiteStore(stored) as store:
        for read in (lambda: store.get(AWSCluster, "demo"), lambda: store.list(AWSCluster)):
            with pytest.raises(Unreadable) as refused:
                read()
            message = str(refused.value)
            assert message.startswith("cannot read AWSCluster default/demo from the store: "), message
            assert f"spec.futureField is not a field this capa-py ({__version__}) knows" in message, message
            assert f"the store was written by capa-py {NEWER}: use that version or newer" in message, message
        # The other objects are read as ever.
        assert store.get(Cluster, "demo").name == "demo"


def test_an_unknown_field_in_a_store_this_version_wrote_is_still_named(stored: Path) -> None:
    _add_field(stored)
    with SQLiteStore(stored) as store, pytest.raises(Unreadable) as refused:
        store.get(AWSCluster, "demo")
    assert "spec.futureField is not a field" in str(refused.value)
    assert "written by a newer capa-py?" in str(refused.value)


# -- a corrupt file ---------------------------------------------------------------------------------------
def corrupt(path: Path) -> None:
    """Overwrite bytes in the middle of every page but the first few (the header and schema stay)."""
    size = path.stat().st_size
    page = 4096
    with path.open("r+b") as file:
        for offset in range(3 * page, size - page, page):
            file.seek(offset + 100)
            file.write(os.urandom(200))


def test_a_corrupted_page_is_damaged_naming_the_file_and_recover(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SQLiteStore(path) as store:
        apply_objects(store, _secrets(60))
    corrupt(path)
    # Met at open or at the first read of a damaged page.
    with pytest.raises(Damaged) as damaged, SQLiteStore(path) as store:  # noqa: PT012
        store.list(Secret)
        apply_objects(store, _secrets(80))
    message = str(damaged.value)
    assert message.startswith(f"the store at {path} is damaged ("), message
    assert f"'sqlite3 {path} .recover | sqlite3 recovered.db'" in message, message


def test_a_new_store_and_its_journal_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    """A store holds Secrets (bootstrap data, agent tokens): it was created 0644, readable by every local
    user whatever the umask allowed."""
    path = tmp_path / "state.db"
    with SQLiteStore(path) as store:
        store.create(Secret(metadata=ObjectMeta(name="s", namespace="default"), string_data={"k": "v"}))
        made = [p for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()]
        assert len(made) >= 2, made
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in made}
    assert set(modes.values()) == {0o600}, modes


def test_an_existing_store_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SQLiteStore(path).close()
    path.chmod(0o640)
    SQLiteStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
