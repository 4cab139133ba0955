"""The SQLite store's indexes, and how a list turns its selectors into an indexed query.

Three tables stand beside ``objects``:

* ``labels``: one row per label of every object, looked up by (kind, key, value);
* ``field_index``: the value of a few fields that lists filter on (:data:`INDEXED_FIELDS`: the controlling
  owner's name and an event's involved object);
* ``owner_index``: one row per owner reference (owner uid, dependent uid), which garbage collection reads too.

Triggers on ``objects`` rewrite an object's rows on every insert, update and delete, so the index changes in
the same transaction as every write — create, update, status write, deletion mark, finalizer removal,
removal, and garbage collection's cascading writes — whichever code path (or process) makes it, and a list
never sees an index that disagrees with the objects. A store file written before the index existed (or with
an older layout) is indexed when it is opened: :func:`ensure_indexes` compares the layout version kept in
``index_layout``, installs the triggers and rebuilds every index from the objects, in SQL.

:func:`plan_list` translates a label selector (every operator: ``=``, ``in`` and exists select rows through
the index, ``!=``, ``notin`` and ``!key`` exclude them) and the field selector requirements on
``metadata.name``, ``metadata.namespace``, ``metadata.uid``, the owner uid and the indexed fields into SQL;
any other field requirement is left for the caller to check on the document.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from capa_py.api.meta import KubeObject
from capa_py.logging import get_logger
from capa_py.store.selectors import CONTROLLER_FIELD, OWNER_UID_FIELD, FieldSelector, LabelSelector

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
CREATE TABLE IF NOT EXISTS index_layout (version TEXT NOT NULL);
"""

# Bump when the tables above, or what goes in them, change: files indexed by another layout are re-indexed.
INDEX_VERSION = "2"

# The fields, besides name, namespace, uid and owner uid, that a list finds through the index: the
# controlling owner (ctrlkit states select dependents by it) and an event's object (what ``describe`` lists).
INDEXED_FIELDS = (
    "metadata.controller",
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.uid",
)

_log = get_logger("store.sqlite")


def _index_statements(row: str, objects: str) -> list[str]:
    """The statements that index one object's labels, indexed fields and owner references: in a trigger
    ``row`` is ``NEW`` and ``objects`` empty; rebuilding, ``row`` is ``o`` and ``objects`` ``objects o``."""
    identity = f"{row}.api_version, {row}.kind, {row}.namespace, {row}.name"
    joined = f"{objects}, " if objects else ""
    where_from = f"FROM {objects} " if objects else ""
    statements = [
        "INSERT INTO labels (api_version, kind, namespace, name, key, value) "
        f"SELECT {identity}, j.key, j.value FROM {joined}json_each({row}.doc, '$.metadata.labels') AS j",
        "INSERT OR IGNORE INTO owner_index (owner_uid, dependent_uid) "
        f"SELECT json_extract(r.value, '$.uid'), {row}.uid "
        f"FROM {joined}json_each({row}.doc, '$.metadata.ownerReferences') AS r",
        # The controlling owner: the first owner reference marked controller (as field_value reads it).
        "INSERT INTO field_index (api_version, kind, namespace, name, field, value) "
        f"SELECT {identity}, '{CONTROLLER_FIELD}', json_extract(r.value, '$.name') "
        f"FROM {joined}json_each({row}.doc, '$.metadata.ownerReferences') AS r "
        "WHERE json_extract(r.value, '$.controller') AND r.key = ("
        f"SELECT min(c.key) FROM json_each({row}.doc, '$.metadata.ownerReferences') AS c "
        "WHERE json_extract(c.value, '$.controller'))",
    ]
    for field in INDEXED_FIELDS:
        if field == CONTROLLER_FIELD:
            continue
        # A scalar's string form, as field_value gives it (JSON booleans as true/false); objects, arrays
        # and nulls are absent.
        kind_of = f"json_type({row}.doc, '$.{field}')"
        statements.append(
            "INSERT INTO field_index (api_version, kind, namespace, name, field, value) "
            f"SELECT {identity}, '{field}', CASE {kind_of} WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' "
            f"ELSE CAST(json_extract({row}.doc, '$.{field}') AS TEXT) END {where_from}"
            f"WHERE {kind_of} IN ('text', 'integer', 'real', 'true', 'false')"
        )
    return statements


def _unindex_statements(row: str) -> list[str]:
    where = (
        f"api_version={row}.api_version AND kind={row}.kind AND namespace={row}.namespace AND name={row}.name"
    )
    return [
        f"DELETE FROM labels WHERE {where}",
        f"DELETE FROM field_index WHERE {where}",
        f"DELETE FROM owner_index WHERE dependent_uid={row}.uid",
    ]


def _trigger(name: str, event: str, statements: list[str]) -> str:
    body = "".join(f"    {statement};\n" for statement in statements)
    return f"CREATE TRIGGER {name} AFTER {event} ON objects\nBEGIN\n{body}END"


# Triggers, so that every write of an object (whatever code path, or version of capa-py, makes it) rewrites
# its index rows inside the writing transaction. An upsert's update fires the UPDATE trigger.
_TRIGGERS = {
    "objects_index_insert": _trigger("objects_index_insert", "INSERT", _index_statements("NEW", "")),
    "objects_index_update": _trigger(
        "objects_index_update", "UPDATE", [*_unindex_statements("OLD"), *_index_statements("NEW", "")]
    ),
    "objects_index_delete": _trigger("objects_index_delete", "DELETE", _unindex_statements("OLD")),
}


def ensure_indexes(conn: sqlite3.Connection) -> None:
    """Install the index triggers and index every stored object when the file's index layout is not the
    current one (a file written before the index existed). Runs inside the transaction that opens the
    store, so no write can slip between the rebuild and the triggers."""
    row = conn.execute("SELECT version FROM index_layout").fetchone()
    if row is not None and row[0] == INDEX_VERSION:
        return
    for name, definition in _TRIGGERS.items():
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
        conn.execute(definition)
    conn.execute("DELETE FROM labels")
    conn.execute("DELETE FROM field_index")
    conn.execute("DELETE FROM owner_index")
    for statement in _index_statements("o", "objects o"):
        conn.execute(statement)
    conn.execute("DELETE FROM index_layout")
    conn.execute("INSERT INTO index_layout (version) VALUES (?)", (INDEX_VERSION,))
    count = conn.execute("SELECT count(*) FROM objects").fetchone()[0]
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


@dataclass(frozen=True)
class _Lookup:
    """One requirement the index answers, in two forms: the (namespace, name) rows it selects, to drive the
    query from, and a test of one object ``o`` (a lookup by primary key), for the requirements that do not
    drive it."""

    rows: str
    rows_params: tuple[Any, ...]
    test: str
    test_params: tuple[Any, ...]


# Counting a candidate driver's rows stops here: past it, every candidate is as large as the next.
DRIVER_COUNT_CAP = 512


def _smallest(conn: sqlite3.Connection | None, lookups: list[_Lookup]) -> _Lookup:
    """The lookup with the fewest rows, the first when there is no connection. The counts stop at a limit
    that grows (8, 64, 512) until one lookup falls under it, so a broad requirement beside a narrow one
    costs a few rows to rule out, whichever comes first."""
    if conn is None or len(lookups) == 1:
        return lookups[0]
    limit = 8
    while True:
        counts = [
            int(
                conn.execute(
                    f"SELECT count(*) FROM ({lookup.rows} LIMIT ?)", (*lookup.rows_params, limit)
                ).fetchone()[0]
            )
            for lookup in lookups
        ]
        fewest = min(counts)
        if fewest < limit or limit >= DRIVER_COUNT_CAP:
            return lookups[counts.index(fewest)]
        limit *= 8


def plan_list(
    kind: type[KubeObject],
    namespace: str | None,
    labels: LabelSelector,
    fields: FieldSelector,
    conn: sqlite3.Connection | None = None,
) -> ListPlan:
    """The query that lists ``kind`` (in ``namespace`` when given and the kind is namespaced) matching the
    selectors: the same objects, in the same order, as filtering every object of the kind would give.

    Of the requirements that select rows (label ``=``, ``in``, exists; owner uid and indexed field
    equality), the one with the fewest rows drives the query (counted on ``conn`` when there are several);
    every other requirement, negative ones included, is tested per object found."""
    where = ["o.api_version=?", "o.kind=?"]
    params: list[Any] = [kind.API_VERSION, kind.KIND]
    scope = ""
    scope_params: tuple[Any, ...] = ()
    if namespace is not None and kind.NAMESPACED:
        where.append("o.namespace=?")
        params.append(namespace)
        scope = " AND namespace=?"
        scope_params = (namespace,)

    def in_table(table: str, column: str, key: str, values: tuple[str, ...]) -> _Lookup:
        """A lookup in ``labels`` (by key) or ``field_index`` (by field): any of ``values``, or any value."""
        marks = _marks(values)
        return _Lookup(
            f"SELECT namespace, name FROM {table} WHERE api_version=? AND kind=? AND {column}=?"
            + (f" AND value IN ({marks})" if values else "")
            + scope,
            (kind.API_VERSION, kind.KIND, key, *values, *scope_params),
            f"EXISTS (SELECT 1 FROM {table} t WHERE t.api_version=o.api_version AND t.kind=o.kind "
            f"AND t.namespace=o.namespace AND t.name=o.name AND t.{column}=?"
            + (f" AND t.value IN ({marks})" if values else "")
            + ")",
            (key, *values),
        )

    positive: list[_Lookup] = []
    negative: list[_Lookup] = []
    for requirement in labels.requirements:
        values = () if requirement.operator in ("exists", "!") else requirement.values
        lookup = in_table("labels", "key", requirement.key, values)
        (negative if requirement.operator in ("!=", "notin", "!") else positive).append(lookup)

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
            # The owner's rows first, each dependent found by its uid (CROSS JOIN fixes the order, the
            # unary plus keeps SQLite from reaching the dependents through the kind instead).
            lookup = _Lookup(
                "SELECT d.namespace, d.name FROM owner_index i "
                "CROSS JOIN objects d ON d.uid = i.dependent_uid "
                "WHERE i.owner_uid=? AND +d.api_version=? AND +d.kind=?",
                (value, kind.API_VERSION, kind.KIND),
                "EXISTS (SELECT 1 FROM owner_index i WHERE i.owner_uid=? AND i.dependent_uid=o.uid)",
                (value,),
            )
            (positive if equal else negative).append(lookup)
        elif field in INDEXED_FIELDS:
            lookup = in_table("field_index", "field", field, (value,))
            (positive if equal else negative).append(lookup)
        else:
            residual.append((path, equal, value))

    if positive:
        driver = _smallest(conn, positive)
        where.append(f"(o.namespace, o.name) IN ({driver.rows})")
        params.extend(driver.rows_params)
        for lookup in positive:
            if lookup is not driver:
                where.append(lookup.test)
                params.extend(lookup.test_params)
    for lookup in negative:
        where.append(f"NOT {lookup.test}")
        params.extend(lookup.test_params)
    sql = "SELECT o.doc FROM objects o WHERE " + " AND ".join(where) + " ORDER BY o.namespace, o.name"
    return ListPlan(sql, tuple(params), FieldSelector(tuple(residual)))
