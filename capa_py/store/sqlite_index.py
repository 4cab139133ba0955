"""The SQLite store's indexes, and how a list turns its selectors into an indexed query.

Three tables stand beside ``objects``, each rewritten for an object in the same transaction as every write
of it (create, update, status write, deletion mark, finalizer removal, removal and the cascading writes and
removals of garbage collection), so a list never sees an index that disagrees with the objects:

* ``labels``: one row per label of every object, looked up by (kind, key, value);
* ``field_index``: the value of a few fields that lists filter on (:data:`INDEXED_FIELDS`: the controlling
  owner's name and an event's involved object);
* ``owner_index``: one row per owner reference (owner uid, dependent uid), which garbage collection reads too.

A store file written before an index existed (or before its current layout) is indexed when it is opened:
:func:`ensure_indexes` compares the layout version kept in ``store_meta`` and rebuilds every index from the
objects when it differs.

:func:`plan_list` translates a label selector (every operator: ``=``, ``in`` and exists select rows through
the index, ``!=``, ``notin`` and ``!key`` exclude them) and the field selector requirements on
``metadata.name``, ``metadata.namespace``, ``metadata.uid``, the owner uid and the indexed fields into SQL;
any other field requirement is left for the caller to check on the document.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from capa_py.api.meta import KubeObject
from capa_py.logging import get_logger
from capa_py.store.selectors import OWNER_UID_FIELD, FieldSelector, LabelSelector, field_value

INDEX_SCHEMA = """
CREATE TABLE IF NOT EXISTS labels (
    api_version TEXT NOT NULL,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (api_version, kind, namespace, name, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS labels_by_value ON labels (api_version, kind, key, value, namespace, name);
CREATE TABLE IF NOT EXISTS field_index (
    api_version TEXT NOT NULL,
    kind        TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    field       TEXT NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (api_version, kind, namespace, name, field)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS field_index_by_value
    ON field_index (api_version, kind, field, value, namespace, name);
"""

# Bump when the tables above, or what goes in them, change: files indexed by another layout are re-indexed.
INDEX_VERSION = "1"
INDEX_VERSION_KEY = "index_version"

# The fields, besides name, namespace, uid and owner uid, that a list finds through the index: the
# controlling owner (ctrlkit states select dependents by it) and an event's object (what ``describe`` lists).
INDEXED_FIELDS = (
    "metadata.controller",
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.uid",
)

_log = get_logger("store.sqlite")


def _identity(doc: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = doc["metadata"]
    return doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"]


def index_object(conn: sqlite3.Connection, doc: dict[str, Any], replace: bool = True) -> None:
    """Write the index rows of the object ``doc`` (its labels, indexed fields and owner references),
    replacing those of its previous state unless ``replace`` is false (an object just created has none)."""
    if replace:
        drop_object(conn, doc)
    identity = _identity(doc)
    meta = doc["metadata"]
    labels: dict[str, str] = meta.get("labels") or {}
    if labels:
        conn.executemany(
            "INSERT INTO labels (api_version, kind, namespace, name, key, value) VALUES (?,?,?,?,?,?)",
            [(*identity, key, str(value)) for key, value in labels.items()],
        )
    fields = [(path, field_value(doc, path)) for path in INDEXED_FIELDS]
    present = [(*identity, path, value) for path, value in fields if value is not None]
    if present:
        conn.executemany(
            "INSERT INTO field_index (api_version, kind, namespace, name, field, value) VALUES (?,?,?,?,?,?)",
            present,
        )
    refs = meta.get("ownerReferences") or []
    if refs:
        conn.executemany(
            "INSERT OR IGNORE INTO owner_index (owner_uid, dependent_uid) VALUES (?, ?)",
            [(ref["uid"], meta["uid"]) for ref in refs],
        )


def drop_object(conn: sqlite3.Connection, doc: dict[str, Any]) -> None:
    """Remove every index row of the object ``doc``."""
    identity = _identity(doc)
    where = "WHERE api_version=? AND kind=? AND namespace=? AND name=?"
    conn.execute(f"DELETE FROM labels {where}", identity)
    conn.execute(f"DELETE FROM field_index {where}", identity)
    conn.execute("DELETE FROM owner_index WHERE dependent_uid=?", (doc["metadata"]["uid"],))


def ensure_indexes(conn: sqlite3.Connection) -> None:
    """Index every stored object when the file's index layout is not the current one (a file written
    before the index existed). Runs inside the transaction that opens the store."""
    row = conn.execute("SELECT value FROM store_meta WHERE name=?", (INDEX_VERSION_KEY,)).fetchone()
    if row is not None and row[0] == INDEX_VERSION:
        return
    conn.execute("DELETE FROM labels")
    conn.execute("DELETE FROM field_index")
    conn.execute("DELETE FROM owner_index")
    count = 0
    for (text,) in conn.execute("SELECT doc FROM objects").fetchall():
        index_object(conn, json.loads(text), replace=False)
        count += 1
    conn.execute(
        "INSERT INTO store_meta (name, value) VALUES (?, ?) "
        "ON CONFLICT (name) DO UPDATE SET value=excluded.value",
        (INDEX_VERSION_KEY, INDEX_VERSION),
    )
    if count:
        _log.info("store indexed", objects=count, index_version=INDEX_VERSION)


@dataclass(frozen=True)
class ListPlan:
    """A list's SQL (selecting each document, in namespace/name order), its parameters, and
    the field requirements SQL does not cover, to check on each document."""

    sql: str
    params: tuple[Any, ...]
    residual: FieldSelector


def _marks(values: tuple[str, ...]) -> str:
    return ",".join("?" * len(values))


def plan_list(
    kind: type[KubeObject], namespace: str | None, labels: LabelSelector, fields: FieldSelector
) -> ListPlan:
    """The query that lists ``kind`` (in ``namespace`` when given and the kind is namespaced) matching the
    selectors: the same objects, in the same order, as filtering every object of the kind would give."""
    where = ["o.api_version=?", "o.kind=?"]
    params: list[Any] = [kind.API_VERSION, kind.KIND]
    scope = ""
    scope_params: list[Any] = []
    if namespace is not None and kind.NAMESPACED:
        where.append("o.namespace=?")
        params.append(namespace)
        scope = " AND namespace=?"
        scope_params = [namespace]

    def label_rows(key: str, values: tuple[str, ...]) -> tuple[str, list[Any]]:
        query = f"SELECT namespace, name FROM labels WHERE api_version=? AND kind=? AND key=?{scope}"
        args: list[Any] = [kind.API_VERSION, kind.KIND, key, *scope_params]
        if values:
            query += f" AND value IN ({_marks(values)})"
            args.extend(values)
        return query, args

    # Positive requirements first: SQLite drives the lookup from the first IN it can use.
    ordered = sorted(labels.requirements, key=lambda r: r.operator not in ("=", "in", "exists"))
    for requirement in ordered:
        values = () if requirement.operator in ("exists", "!") else requirement.values
        query, args = label_rows(requirement.key, values)
        negated = requirement.operator in ("!=", "notin", "!")
        where.append(f"(o.namespace, o.name) {'NOT IN' if negated else 'IN'} ({query})")
        params.extend(args)

    residual: list[tuple[str, bool, str]] = []
    for path, equal, value in fields.requirements:
        field = path.lstrip(".")
        op = "=" if equal else "!="
        if field == "metadata.name":
            where.append(f"o.name {op} ?")
            params.append(value)
        elif field == "metadata.uid":
            where.append(f"o.uid {op} ?")
            params.append(value)
        elif field == "metadata.namespace":
            if kind.NAMESPACED:
                where.append(f"o.namespace {op} ?")
                params.append(value)
            elif equal:
                # A cluster-scoped object has no namespace field: nothing equals a value.
                where.append("0")
        elif field == OWNER_UID_FIELD:
            # Named by (namespace, name) like the label lookups, so the owner's dependents drive the
            # query through the primary key rather than a pass over the kind; CROSS JOIN and the unary
            # plus keep SQLite reading the owner's rows first and finding each dependent by its uid.
            query = (
                "SELECT d.namespace, d.name FROM owner_index i "
                "CROSS JOIN objects d ON d.uid = i.dependent_uid "
                "WHERE i.owner_uid=? AND +d.api_version=? AND +d.kind=?"
            )
            where.append(f"(o.namespace, o.name) {'IN' if equal else 'NOT IN'} ({query})")
            params.extend([value, kind.API_VERSION, kind.KIND])
        elif field in INDEXED_FIELDS:
            query = (
                "SELECT namespace, name FROM field_index "
                f"WHERE api_version=? AND kind=? AND field=? AND value=?{scope}"
            )
            where.append(f"(o.namespace, o.name) {'IN' if equal else 'NOT IN'} ({query})")
            params.extend([kind.API_VERSION, kind.KIND, field, value, *scope_params])
        else:
            residual.append((path, equal, value))
    sql = "SELECT o.doc FROM objects o WHERE " + " AND ".join(where) + " ORDER BY o.namespace, o.name"
    return ListPlan(sql, tuple(params), FieldSelector(tuple(residual)))
