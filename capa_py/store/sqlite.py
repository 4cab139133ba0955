"""The embedded object store: one SQLite file, Kubernetes semantics, safe for several processes.

Every write runs in a ``BEGIN IMMEDIATE`` transaction, so writers are serialised across processes by
SQLite's lock; the ``resourceVersion`` check happens inside that transaction, so of two processes racing to
update the same object one wins and the other gets ``Conflict`` — never a lost write. The database is in WAL
mode so readers never block the writer. Each write appends to an ``events`` table whose sequence number is
the new ``resourceVersion`` (a single counter, like etcd's revision); ``watch`` polls that table, which is how
it sees writes made by other processes. Labels, owner references and the fields lists select by are indexed
by triggers on the objects table (:mod:`capa_py.store.sqlite_index`), so a selector list reads and validates
only the objects it returns.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential

from capa_py.api.meta import KubeObject, utcnow
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.logging import get_logger
from capa_py.store.admission import check_registered, validated_document
from capa_py.store.errors import AlreadyExists, Conflict, Expired, Invalid, Missing, NotFound, Unavailable
from capa_py.store.protocol import ObjectList, Propagation, T, WatchEvent
from capa_py.store.selectors import FieldSelector, LabelSelector
from capa_py.store.sqlite_index import INDEX_SCHEMA, ensure_indexes, plan_list

ORPHAN_FINALIZER = "orphan"

_SCHEMA = """
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
BUSY_SECONDS = 60.0
"""How long a connection waits for another process's lock before giving up."""

_log = get_logger("store.sqlite")


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "database is locked" in str(exc)


@retry(
    retry=retry_if_exception(_locked),
    wait=wait_random_exponential(multiplier=0.01, max=0.5),
    stop=stop_after_delay(BUSY_SECONDS),
    reraise=True,
)
def _enter_wal(conn: sqlite3.Connection) -> None:
    """Switch the database to write-ahead logging. SQLite answers a journal-mode change it cannot make at
    once with "database is locked" without waiting for the busy timeout (another process is creating or
    switching the same new file), so the switch is retried for as long as a write would wait."""
    conn.execute("PRAGMA journal_mode=WAL")


def _open_failure(exc: BaseException) -> str:
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return "the file is not a capa store (not a SQLite database)"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def _labels(doc: dict[str, Any]) -> dict[str, str]:
    return dict(doc.get("metadata", {}).get("labels", {}))


def _desired(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata", "status")}


class SQLiteStore:
    """An :class:`~capa_py.store.protocol.ObjectStore` in one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        registry: KindRegistry = REGISTRY,
        poll_interval: float = 0.05,
        retain_events: int = 100_000,
        create: bool = True,
    ) -> None:
        """Open the store at ``path``; ``create=False`` never creates a file or directory and raises
        :class:`Missing` when there is no store yet. A path that is not a store raises
        :class:`Unavailable`."""
        self.path = Path(path)
        self._creates = create
        self.registry = registry
        self.poll_interval = poll_interval
        self.retain_events = retain_events
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._uid: str | None = None
        if self.path.is_dir():
            raise Unavailable(str(self.path), "it is a directory")
        if not create and not self.path.exists():
            raise Missing(str(self.path))
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._write() as conn:
                for statement in (_SCHEMA + INDEX_SCHEMA).split(";"):
                    if statement.strip():
                        conn.execute(statement)
                ensure_indexes(conn)
        except (sqlite3.DatabaseError, OSError) as exc:
            self.close()
            raise Unavailable(str(self.path), _open_failure(exc)) from exc

    @property
    def uid(self) -> str:
        """This store's identity: created once (the first time it is asked for), then read back."""
        if self._uid is None:
            with self._read() as conn:
                row = conn.execute("SELECT value FROM store_meta WHERE name=?", (STORE_UID_KEY,)).fetchone()
            if row is None:
                with self._write() as conn:
                    conn.execute(
                        "INSERT OR IGNORE INTO store_meta (name, value) VALUES (?, ?)",
                        (STORE_UID_KEY, str(uuid.uuid4())),
                    )
                    row = conn.execute(
                        "SELECT value FROM store_meta WHERE name=?", (STORE_UID_KEY,)
                    ).fetchone()
                _log.info("store identity created", store_uid=row[0])
            self._uid = str(row[0])
        return self._uid

    # -- connections -----------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # mode=rw opens an existing database only: a store opened without creating stays absent.
            target = self.path if self._creates else f"{self.path.resolve().as_uri()}?mode=rw"
            conn = sqlite3.connect(
                target,
                timeout=BUSY_SECONDS,
                isolation_level=None,
                check_same_thread=False,
                uri=not self._creates,
            )
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_SECONDS * 1000)}")
            _enter_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ------------------------------------------------------------------------------------
    def _namespace(self, kind: type[KubeObject], namespace: str | None) -> str:
        if not kind.NAMESPACED:
            return ""
        return namespace or "default"

    def _check_kind(self, kind: type[KubeObject]) -> None:
        check_registered(self.registry, kind)

    def _validated(self, obj: KubeObject) -> dict[str, Any]:
        """The object's wire form after full validation; raises Invalid naming the field."""
        return validated_document(self.registry, obj)

    def _next_rv(self, conn: sqlite3.Connection) -> int:
        row = conn.execute(
            "UPDATE counters SET value = value + 1 WHERE name = 'rv' RETURNING value"
        ).fetchone()
        return int(row[0])

    def _row(
        self, conn: sqlite3.Connection, kind: type[KubeObject], name: str, namespace: str
    ) -> tuple[int, dict[str, Any]] | None:
        row = conn.execute(
            "SELECT rv, doc FROM objects WHERE api_version=? AND kind=? AND namespace=? AND name=?",
            (kind.API_VERSION, kind.KIND, namespace, name),
        ).fetchone()
        return None if row is None else (int(row[0]), json.loads(row[1]))

    def _row_by_uid(self, conn: sqlite3.Connection, uid: str) -> dict[str, Any] | None:
        row = conn.execute("SELECT doc FROM objects WHERE uid=?", (uid,)).fetchone()
        return None if row is None else json.loads(row[0])

    def _put(
        self, conn: sqlite3.Connection, doc: dict[str, Any], event: str, prev: dict[str, Any] | None
    ) -> dict[str, Any]:
        rv = self._next_rv(conn)
        meta = doc["metadata"]
        meta["resourceVersion"] = str(rv)
        namespace = meta.get("namespace", "")
        text = json.dumps(doc, separators=(",", ":"))
        conn.execute(
            "INSERT INTO objects (api_version, kind, namespace, name, uid, rv, doc) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT (api_version, kind, namespace, name) DO UPDATE SET rv=excluded.rv, doc=excluded.doc",
            (doc["apiVersion"], doc["kind"], namespace, meta["name"], meta["uid"], rv, text),
        )
        self._record_event(conn, rv, event, doc, prev)
        return doc

    def _record_event(
        self, conn: sqlite3.Connection, rv: int, event: str, doc: dict[str, Any], prev: dict[str, Any] | None
    ) -> None:
        meta = doc["metadata"]
        conn.execute(
            "INSERT INTO events (seq, type, api_version, kind, namespace, name, doc, prev_labels) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (
                rv,
                event,
                doc["apiVersion"],
                doc["kind"],
                meta.get("namespace", ""),
                meta["name"],
                json.dumps(doc, separators=(",", ":")),
                None if prev is None else json.dumps(_labels(prev)),
            ),
        )
        # Compact in batches, but never let the table grow past twice what the caller asked us to keep.
        if rv % max(1, min(1000, self.retain_events)) == 0 and rv > self.retain_events:
            floor = rv - self.retain_events
            conn.execute("DELETE FROM events WHERE seq <= ?", (floor,))
            conn.execute("UPDATE counters SET value = ? WHERE name = 'compacted'", (floor,))

    def _remove(self, conn: sqlite3.Connection, doc: dict[str, Any]) -> dict[str, Any]:
        """Remove an object for good, then collect its dependents (background propagation)."""
        meta = doc["metadata"]
        rv = self._next_rv(conn)
        meta["resourceVersion"] = str(rv)
        conn.execute("DELETE FROM objects WHERE uid=?", (meta["uid"],))
        self._record_event(conn, rv, "DELETED", doc, doc)
        self._collect_dependents(conn, meta["uid"], orphan=False)
        return doc

    def _collect_dependents(self, conn: sqlite3.Connection, owner_uid: str, orphan: bool) -> None:
        dependents = [
            row[0]
            for row in conn.execute("SELECT dependent_uid FROM owner_index WHERE owner_uid=?", (owner_uid,))
        ]
        for dependent_uid in dependents:
            dependent = self._row_by_uid(conn, dependent_uid)
            if dependent is None:
                continue
            refs = dependent["metadata"].get("ownerReferences", [])
            remaining = [
                r for r in refs if r["uid"] != owner_uid and self._row_by_uid(conn, r["uid"]) is not None
            ]
            if orphan or remaining:
                prev = json.loads(json.dumps(dependent))
                dependent["metadata"]["ownerReferences"] = remaining
                if not remaining:
                    dependent["metadata"].pop("ownerReferences", None)
                self._put(conn, dependent, "MODIFIED", prev)
            else:
                _log.debug(
                    "garbage collecting dependent", kind=dependent["kind"], name=dependent["metadata"]["name"]
                )
                self._delete_doc(conn, dependent, "Background")

    def _delete_doc(
        self, conn: sqlite3.Connection, doc: dict[str, Any], propagation: Propagation
    ) -> dict[str, Any]:
        meta = doc["metadata"]
        finalizers: list[str] = list(meta.get("finalizers", []))
        if propagation == "Orphan" and ORPHAN_FINALIZER not in finalizers:
            finalizers.append(ORPHAN_FINALIZER)
        if finalizers == [ORPHAN_FINALIZER]:
            self._collect_dependents(conn, meta["uid"], orphan=True)
            finalizers = []
        if not finalizers:
            meta.pop("finalizers", None)
            return self._remove(conn, doc)
        if meta.get("deletionTimestamp") and finalizers == meta.get("finalizers"):
            return doc
        prev = json.loads(json.dumps(doc))
        meta["finalizers"] = finalizers
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["deletionGracePeriodSeconds"] = 0
            if "generation" in meta:
                meta["generation"] = int(meta["generation"]) + 1
        return self._put(conn, doc, "MODIFIED", prev)

    def _to_model(self, model: type[T], doc: dict[str, Any]) -> T:
        return model.model_validate(doc)

    def _from_text(self, model: type[T], text: str) -> T:
        # Validating the stored JSON in one step (pydantic-core parses it) costs less than json.loads
        # followed by validation, and less than deep-copying an already parsed object.
        return model.model_validate_json(text)

    # -- the protocol -------------------------------------------------------------------------------
    def create(self, obj: T) -> T:
        kind = type(obj)
        obj = obj.model_copy(deep=True)
        meta = obj.metadata
        if not meta.name and meta.generate_name:
            meta.name = meta.generate_name + secrets.token_hex(3)[:5]
        if not meta.name:
            raise Invalid("required", "metadata.name")
        try:
            kind.check_name(meta.name)
        except ValueError as exc:
            raise Invalid(str(exc), "metadata.name") from exc
        meta.namespace = self._namespace(kind, meta.namespace) or None
        meta.uid = str(uuid.uuid4())
        meta.creation_timestamp = utcnow()
        meta.deletion_timestamp = None
        meta.resource_version = None
        meta.generation = 1 if kind.HAS_STATUS else None
        if kind.HAS_STATUS and "status" in type(obj).model_fields:
            # The status subresource: a create never sets status.
            default = type(obj).model_fields["status"].get_default(call_default_factory=True)
            obj.__dict__["status"] = default
        obj.prepare_for_create()
        doc = self._validated(obj)
        with self._write() as conn:
            if self._row(conn, kind, meta.name, meta.namespace or "") is not None:
                raise AlreadyExists(
                    f"{kind.KIND} {meta.namespace + '/' if meta.namespace else ''}{meta.name} already exists"
                )
            self._put(conn, doc, "ADDED", None)
        return self._to_model(kind, doc)

    def get(self, kind: type[T], name: str, namespace: str | None = None) -> T:
        self._check_kind(kind)
        ns = self._namespace(kind, namespace)
        with self._read() as conn:
            row = conn.execute(
                "SELECT doc FROM objects WHERE api_version=? AND kind=? AND namespace=? AND name=?",
                (kind.API_VERSION, kind.KIND, ns, name),
            ).fetchone()
        if row is None:
            raise NotFound(f"{kind.KIND} {ns + '/' if ns else ''}{name} not found")
        return self._from_text(kind, row[0])

    def list(
        self,
        kind: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ObjectList[T]:
        self._check_kind(kind)
        labels, fields = LabelSelector.parse(label_selector), FieldSelector.parse(field_selector)
        with self._read() as conn:
            plan = plan_list(kind, namespace, labels, fields, conn)
            rows = conn.execute(plan.sql, plan.params).fetchall()
            rv = conn.execute("SELECT value FROM counters WHERE name='rv'").fetchone()[0]
        items: list[T] = []
        if plan.residual.requirements:
            for (text,) in rows:
                doc = json.loads(text)
                if plan.residual.matches(doc):
                    items.append(self._to_model(kind, doc))
        else:
            items = [self._from_text(kind, text) for (text,) in rows]
        return ObjectList(items, str(rv))

    def update(self, obj: T) -> T:
        kind = type(obj)
        if kind.prepare_for_update is not KubeObject.prepare_for_update:  # only kinds that set something
            obj = obj.model_copy(deep=True)
            obj.prepare_for_update()
        new = self._validated(obj)
        ns = self._namespace(kind, obj.metadata.namespace)
        with self._write() as conn:
            row = self._row(conn, kind, obj.metadata.name, ns)
            if row is None:
                raise NotFound(f"{obj.ref()} not found")
            rv, current = row
            self._check_preconditions(obj, rv, current)
            cur_meta, new_meta = current["metadata"], new["metadata"]
            merged = dict(new)
            meta = dict(new_meta)
            for key in (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "resourceVersion",
            ):
                if key in cur_meta:
                    meta[key] = cur_meta[key]
                else:
                    meta.pop(key, None)
            merged["metadata"] = meta
            if kind.HAS_STATUS:
                merged.pop("status", None)
                if "status" in current:
                    merged["status"] = current["status"]
            deleting = bool(cur_meta.get("deletionTimestamp"))
            added = set(meta.get("finalizers", [])) - set(cur_meta.get("finalizers", []))
            if deleting and added:
                raise Invalid(
                    f"no new finalizers can be added while the object is being deleted: {sorted(added)}",
                    "metadata.finalizers",
                )
            if "generation" in meta and _desired(merged) != _desired(current):
                meta["generation"] = int(meta["generation"]) + 1
            if merged == current:
                return self._to_model(kind, current)
            if deleting and meta.get("finalizers", []) in ([], [ORPHAN_FINALIZER]):
                result = self._delete_doc(conn, merged, "Background")
            else:
                result = self._put(conn, merged, "MODIFIED", current)
        return self._to_model(kind, result)

    def update_status(self, obj: T) -> T:
        kind = type(obj)
        if not kind.HAS_STATUS:
            raise Invalid(f"{kind.KIND} has no status subresource", "status")
        new = self._validated(obj)
        ns = self._namespace(kind, obj.metadata.namespace)
        with self._write() as conn:
            row = self._row(conn, kind, obj.metadata.name, ns)
            if row is None:
                raise NotFound(f"{obj.ref()} not found")
            rv, current = row
            self._check_preconditions(obj, rv, current)
            merged = json.loads(json.dumps(current))
            merged.pop("status", None)
            if "status" in new:
                merged["status"] = new["status"]
            if "managedFields" in new["metadata"]:
                # Who wrote the status (capa serve records it); a write that carries none keeps them.
                merged["metadata"]["managedFields"] = new["metadata"]["managedFields"]
            if merged == current:
                return self._to_model(kind, current)
            result = self._put(conn, merged, "MODIFIED", current)
        return self._to_model(kind, result)

    def _check_preconditions(self, obj: KubeObject, rv: int, current: dict[str, Any]) -> None:
        wanted = obj.metadata.resource_version
        if wanted and wanted != str(rv):
            raise Conflict(
                f"{obj.ref()}: the object has been modified (resourceVersion {wanted} is stale, "
                f"current is {rv}); read it again and re-apply the change"
            )
        if obj.metadata.uid and obj.metadata.uid != current["metadata"]["uid"]:
            raise Conflict(f"{obj.ref()}: uid precondition failed (the object was re-created)")

    def delete(
        self,
        kind: type[T],
        name: str,
        namespace: str | None = None,
        propagation: Propagation = "Background",
        resource_version: str | None = None,
    ) -> T | None:
        """Delete (or mark for deletion) an object; returns its last state."""
        self._check_kind(kind)
        ns = self._namespace(kind, namespace)
        with self._write() as conn:
            row = self._row(conn, kind, name, ns)
            if row is None:
                raise NotFound(f"{kind.KIND} {ns + '/' if ns else ''}{name} not found")
            rv, doc = row
            if resource_version and resource_version != str(rv):
                raise Conflict(f"{kind.KIND} {name}: resourceVersion precondition failed")
            result = self._delete_doc(conn, doc, propagation)
        return self._to_model(kind, result)

    def watch(
        self,
        kind: type[T],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[WatchEvent[T]]:
        """Events for one kind after ``resource_version`` (or the current objects as ADDED, then events).

        With a label selector, an object that starts matching arrives as ADDED and one that stops
        matching as DELETED, as the Kubernetes watch cache reports them.
        """
        self._check_kind(kind)
        selector = LabelSelector.parse(label_selector)
        if not resource_version or resource_version == "0":
            current = self.list(kind, namespace, label_selector)
            for obj in current:
                yield WatchEvent("ADDED", obj, obj.metadata.resource_version or current.resource_version)
            since = int(current.resource_version)
        else:
            since = int(resource_version)
            with self._read() as conn:
                compacted = conn.execute("SELECT value FROM counters WHERE name='compacted'").fetchone()[0]
            if since < int(compacted):
                raise Expired(f"resourceVersion {since} is too old (compacted up to {compacted}); list again")
        deadline = None if timeout is None else time.monotonic() + timeout
        query = (
            "SELECT seq, type, namespace, doc, prev_labels FROM events "
            "WHERE api_version=? AND kind=? AND seq > ?"
        )
        while True:
            if stop is not None and stop.is_set():
                return
            with self._read() as conn:
                rows = conn.execute(
                    query + " ORDER BY seq LIMIT 500", (kind.API_VERSION, kind.KIND, since)
                ).fetchall()
                head, compacted = conn.execute(
                    "SELECT (SELECT value FROM counters WHERE name='rv'), "
                    "(SELECT value FROM counters WHERE name='compacted')"
                ).fetchone()
            if since < int(compacted):
                # Events this watch had not read yet were compacted away: skipping them would lose
                # changes silently, so the caller must re-list, as after a 410 from the API server.
                raise Expired(f"watch fell behind: events after {since} were compacted (up to {compacted})")
            for seq, event_type, event_ns, text, prev_labels in rows:
                since = int(seq)
                if namespace is not None and kind.NAMESPACED and event_ns != namespace:
                    continue
                doc: dict[str, Any] | None = None
                if selector.requirements:
                    doc = json.loads(text)
                    now_matches = selector.matches(_labels(doc))
                    before = None if prev_labels is None else selector.matches(json.loads(prev_labels))
                else:
                    now_matches, before = True, prev_labels is not None
                if event_type == "DELETED":
                    emitted = "DELETED" if now_matches else None
                elif now_matches:
                    emitted = "MODIFIED" if before else "ADDED"
                else:
                    emitted = "DELETED" if before else None
                if emitted is not None:
                    obj = self._from_text(kind, text) if doc is None else self._to_model(kind, doc)
                    yield WatchEvent(emitted, obj, str(seq))  # type: ignore[arg-type]
            if len(rows) < 500:
                # The read saw every event of this kind up to ``head``: an idle watch moves along with
                # the store, so compaction driven by other kinds' writes does not expire it.
                since = max(since, int(head))
            if rows:
                continue
            if deadline is not None and time.monotonic() >= deadline:
                return
            wait = self.poll_interval
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            if stop is not None:
                if stop.wait(wait):
                    return
            else:
                time.sleep(wait)

    # -- maintenance ---------------------------------------------------------------------------------
    def current_resource_version(self) -> str:
        with self._read() as conn:
            return str(conn.execute("SELECT value FROM counters WHERE name='rv'").fetchone()[0])
