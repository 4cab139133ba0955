"""The SQLite store's tables, and the check that refuses a file this version cannot read.

The file records its layout version (:data:`LAYOUT_VERSION`) and the newest capa-py that wrote it. A newer
layout, a newer index layout, a table without a column this version reads, or objects of an API version this
one does not know (in a file a newer capa-py wrote) are refused with :class:`~capa_py.store.errors.Newer`
before anything is written, never rewritten.
"""

from __future__ import annotations

import sqlite3

from capa_py import __version__
from capa_py.api.registry import KindRegistry
from capa_py.store.errors import Newer
from capa_py.store.sqlite_index import INDEX_VERSION

SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('rv', 0), ('compacted', 0);
CREATE TABLE IF NOT EXISTS objects (
    api_version TEXT NOT NULL,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    uid         TEXT NOT NULL UNIQUE,
    rv          INTEGER NOT NULL,
    doc         TEXT NOT NULL,
    PRIMARY KEY (api_version, kind, namespace, name)
);
CREATE TABLE IF NOT EXISTS owner_index (
    owner_uid   TEXT NOT NULL,
    dependent_uid TEXT NOT NULL,
    PRIMARY KEY (owner_uid, dependent_uid)
);
CREATE INDEX IF NOT EXISTS owner_index_dependent ON owner_index (dependent_uid);
CREATE TABLE IF NOT EXISTS events (
    seq         INTEGER PRIMARY KEY,
    type        TEXT NOT NULL,
    api_version TEXT NOT NULL,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    doc         TEXT NOT NULL,
    prev_labels TEXT
);
CREATE INDEX IF NOT EXISTS events_kind ON events (api_version, kind, seq);
CREATE TABLE IF NOT EXISTS store_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
STORE_UID_KEY = "uid"
LAYOUT_KEY = "layout"
WRITER_KEY = "newest_writer"
LAYOUT_VERSION = 1
"""The layout of the tables above: bump when a table or column changes meaning. A file with a newer layout is
refused, never rewritten; a file without the record is layout 1 (written before it was kept)."""
COLUMNS = {
    "counters": {"name", "value"},
    "objects": {"api_version", "kind", "namespace", "name", "uid", "rv", "doc"},
    "owner_index": {"owner_uid", "dependent_uid"},
    "events": {"seq", "type", "api_version", "kind", "namespace", "name", "doc", "prev_labels"},
    "store_meta": {"name", "value"},
    "labels": {"api_version", "kind", "namespace", "name", "key", "value"},
    "field_index": {"api_version", "kind", "namespace", "name", "field", "value"},
    "index_layout": {"version"},
}


def version_key(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


def newer(version: str | None) -> bool:
    """Whether ``version`` (a capa-py version a store records) is newer than this one."""
    return version is not None and version_key(version) > version_key(__version__)


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The column names of ``table``."""
    return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}


def check_layout(conn: sqlite3.Connection, path: str, registry: KindRegistry) -> None:
    """Refuse a file a newer capa-py wrote in a layout this version does not know (before anything is
    written to it)."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    meta: dict[str, str] = {}
    if "store_meta" in tables and "name" in columns(conn, "store_meta"):
        meta = {
            str(k): str(v)
            for k, v in conn.execute(
                "SELECT name, value FROM store_meta WHERE name IN (?, ?)", (LAYOUT_KEY, WRITER_KEY)
            )
        }
    writer = meta.get(WRITER_KEY)
    by = f"capa-py {writer}" if writer else "another capa-py"
    layout = meta.get(LAYOUT_KEY, "1")
    if not layout.isdigit() or int(layout) > LAYOUT_VERSION:
        raise Newer(
            path,
            f"its layout is version {layout}, written by {by}; this capa-py ({__version__}) knows layout "
            f"{LAYOUT_VERSION} and never rewrites a newer one: use {by} or newer",
        )
    if "index_layout" in tables:
        row = conn.execute("SELECT version FROM index_layout").fetchone()
        if row is not None and (not str(row[0]).isdigit() or int(row[0]) > int(INDEX_VERSION)):
            raise Newer(
                path,
                f"its index layout is version {row[0]}, written by {by}; this capa-py ({__version__}) "
                f"knows index layout {INDEX_VERSION}: use {by} or newer",
            )
    for table, wanted in COLUMNS.items():
        if table not in tables:
            continue
        missing = sorted(wanted - columns(conn, table))
        if missing:
            raise Newer(
                path,
                f"its table {table} has no column {', '.join(missing)} (a layout written by {by}); "
                f"this capa-py ({__version__}) cannot read it",
            )
    if newer(writer) and "objects" in tables:
        unknown = sorted(
            f"{kind} {api_version}"
            for api_version, kind in conn.execute("SELECT DISTINCT api_version, kind FROM objects")
            if (api_version, kind) not in {(k.API_VERSION, k.KIND) for k in registry.kinds()}
        )
        if unknown:
            raise Newer(
                path,
                f"it holds objects of {', '.join(unknown)}, written by {by}; this capa-py "
                f"({__version__}) does not know that API version: use {by} or newer",
            )
