"""The embedded object store: one SQLite file, Kubernetes semantics, safe for several processes.

Every write runs in a ``BEGIN IMMEDIATE`` transaction, so writers are serialised across processes by
SQLite's lock; the ``resourceVersion`` check happens inside that transaction, so of two processes racing to
update the same object one wins and the other gets ``Conflict`` — never a lost write. The database is in WAL
mode so readers never block the writer. Each write appends to an ``events`` table whose sequence number is
the new ``resourceVersion`` (a single counter, like etcd's revision); ``watch`` polls that table, which is how
it sees writes made by other processes. Labels, owner references and the fields lists select by are indexed
by triggers on the objects table (:mod:`capa_py.store.sqlite_index`), so a selector list reads and validates
only the objects it returns.

:meth:`SQLiteStore.atomic` makes several writes one transaction (``capa apply`` stores a manifest so: all
of its objects or none). A file that cannot be written is opened for reading (``mode=ro``, or ``immutable``
when not even SQLite's shared-memory file can be made) and every write is refused with :class:`ReadOnly`.
The file records its layout version and the newest capa-py that wrote it: a newer layout, a table without
a column this version reads, or objects of an API version this one does not know are refused
(:class:`Newer`), never rewritten. SQLite's failures become store errors: a full or failing disk
:class:`WriteFailed` (the transaction rolled back), a corrupt file :class:`Damaged` (naming ``sqlite3
.recover``), an object this version cannot read :class:`Unreadable`.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pydantic
from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential

from capa_py import __version__
from capa_py.api.meta import KubeObject, utcnow
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.logging import get_logger
from capa_py.store.admission import check_registered, validated_document
from capa_py.store.errors import (
    AlreadyExists,
    Conflict,
    Damaged,
    Expired,
    Invalid,
    Missing,
    Newer,
    NotFound,
    ObjectRef,
    ReadOnly,
    Unavailable,
    Unreadable,
    WriteFailed,
)
from capa_py.store.protocol import ObjectList, Propagation, T, WatchEvent
from capa_py.store.selectors import FieldSelector, LabelSelector
from capa_py.store.sqlite_index import INDEX_SCHEMA, INDEX_VERSION, ensure_indexes, plan_list

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
LAYOUT_KEY = "layout"
WRITER_KEY = "newest_writer"
LAYOUT_VERSION = 1
"""The layout of the tables above: bump when a table or column changes meaning. A file with a newer layout is
refused, never rewritten; a file without the record is layout 1 (written before it was kept)."""
_COLUMNS = {
    "counters": {"name", "value"},
    "objects": {"api_version", "kind", "namespace", "name", "uid", "rv", "doc"},
    "owner_index": {"owner_uid", "dependent_uid"},
    "events": {"seq", "type", "api_version", "kind", "namespace", "name", "doc", "prev_labels"},
    "store_meta": {"name", "value"},
    "labels": {"api_version", "kind", "namespace", "name", "key", "value"},
    "field_index": {"api_version", "kind", "namespace", "name", "field", "value"},
    "index_layout": {"version"},
}
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


def _error_name(exc: sqlite3.Error) -> str:
    return str(getattr(exc, "sqlite_errorname", ""))


def _cannot_write(exc: BaseException) -> bool:
    """Whether opening failed because the file or its directory cannot be written."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    name = _error_name(exc) if isinstance(exc, sqlite3.Error) else ""
    return name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH"))


def _version_key(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


def _newer(version: str | None) -> bool:
    """Whether ``version`` (a capa-py version a store records) is newer than this one."""
    return version is not None and _version_key(version) > _version_key(__version__)


def _labels(doc: dict[str, Any]) -> dict[str, str]:
    return dict(doc.get("metadata", {}).get("labels", {}))


def _desired(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata", "status")}


def _create_private(path: Path) -> None:
    """Create ``path`` empty, readable and writable by its owner only, where there is no file yet: a store
    holds Secrets (bootstrap data, agent tokens), and SQLite gives its journal and shared-memory files the
    database file's mode. An existing store keeps the mode it has."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(descriptor)


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
        self.read_only: str | None = None
        """Why the store is open for reading only (``None``: it can be written)."""
        self._read_mode = "mode=ro"
        if self.path.is_dir():
            raise Unavailable(str(self.path), "it is a directory")
        if not create and not self.path.exists():
            raise Missing(str(self.path))
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _create_private(self.path)
            self._open_for_writing()
        except Unavailable:
            self.close()
            raise
        except (sqlite3.Error, OSError) as exc:
            self.close()
            if not (self.path.exists() and _cannot_write(exc)):
                raise (
                    self._translate(exc)
                    if isinstance(exc, sqlite3.Error)
                    else Unavailable(str(self.path), _open_failure(exc))
                ) from exc
            self._open_for_reading(_open_failure(exc))

    def _open_for_writing(self) -> None:
        with self._raw_transaction(self._conn(), "BEGIN IMMEDIATE") as conn:
            self._check_layout(conn)
            for statement in (_SCHEMA + INDEX_SCHEMA).split(";"):
                if statement.strip():
                    conn.execute(statement)
            ensure_indexes(conn)
            conn.execute(
                "INSERT OR IGNORE INTO store_meta (name, value) VALUES (?, ?)",
                (LAYOUT_KEY, str(LAYOUT_VERSION)),
            )
            row = conn.execute("SELECT value FROM store_meta WHERE name=?", (WRITER_KEY,)).fetchone()
            if row is None or _version_key(__version__) > _version_key(row[0]):
                conn.execute(
                    "INSERT OR REPLACE INTO store_meta (name, value) VALUES (?, ?)", (WRITER_KEY, __version__)
                )

    def _open_for_reading(self, why: str) -> None:
        """Open a file that cannot be written for reading: ``mode=ro``, else (when SQLite cannot make its
        shared-memory file beside it, in a read-only directory) ``immutable``."""
        self.read_only = why
        failure: BaseException | None = None
        for mode in ("mode=ro", "immutable=1"):
            self._read_mode = mode
            try:
                with self._raw_transaction(self._conn(), "BEGIN") as conn:
                    self._check_layout(conn)
                _log.info("store opened read-only", path=str(self.path), mode=mode, reason=why)
                return
            except Unavailable:
                self.close()
                raise
            except (sqlite3.Error, OSError) as exc:
                self.close()
                failure = exc
        assert failure is not None
        if isinstance(failure, sqlite3.Error):
            raise self._translate(failure) from failure
        raise Unavailable(str(self.path), _open_failure(failure)) from failure

    def _check_layout(self, conn: sqlite3.Connection) -> None:
        """Refuse a file a newer capa-py wrote in a layout this version does not know (before anything is
        written to it)."""
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        meta: dict[str, str] = {}
        if "store_meta" in tables and "name" in self._columns(conn, "store_meta"):
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
                str(self.path),
                f"its layout is version {layout}, written by {by}; this capa-py ({__version__}) knows layout "
                f"{LAYOUT_VERSION} and never rewrites a newer one: use {by} or newer",
            )
        if "index_layout" in tables:
            row = conn.execute("SELECT version FROM index_layout").fetchone()
            if row is not None and (not str(row[0]).isdigit() or int(row[0]) > int(INDEX_VERSION)):
                raise Newer(
                    str(self.path),
                    f"its index layout is version {row[0]}, written by {by}; this capa-py ({__version__}) "
                    f"knows index layout {INDEX_VERSION}: use {by} or newer",
                )
        for table, wanted in _COLUMNS.items():
            if table not in tables:
                continue
            missing = sorted(wanted - self._columns(conn, table))
            if missing:
                raise Newer(
                    str(self.path),
                    f"its table {table} has no column {', '.join(missing)} (a layout written by {by}); "
                    f"this capa-py ({__version__}) cannot read it",
                )
        if _newer(writer) and "objects" in tables:
            unknown = sorted(
                f"{kind} {api_version}"
                for api_version, kind in conn.execute("SELECT DISTINCT api_version, kind FROM objects")
                if (api_version, kind) not in self._known_kinds()
            )
            if unknown:
                raise Newer(
                    str(self.path),
                    f"it holds objects of {', '.join(unknown)}, written by {by}; this capa-py "
                    f"({__version__}) does not know that API version: use {by} or newer",
                )

    def _known_kinds(self) -> set[tuple[str, str]]:
        return {(k.API_VERSION, k.KIND) for k in self.registry.kinds()}

    @staticmethod
    def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
        return {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}

    def _translate(self, exc: sqlite3.Error) -> Unavailable:
        """The store error a SQLite failure is, for the caller."""
        name, text, path = _error_name(exc), str(exc), str(self.path)
        if (
            name.startswith("SQLITE_CORRUPT")
            or "malformed" in text
            or text.startswith("Could not decode to UTF-8")  # a damaged page in the middle of a text
        ):
            return Damaged(path, text)
        if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) or "disk is full" in text:
            return WriteFailed(path, text)
        if name.startswith("SQLITE_READONLY"):
            return ReadOnly(path, text)
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            return Unavailable(path, f"{text} (another process held it for more than {BUSY_SECONDS:g}s)")
        return Unavailable(path, _open_failure(exc))

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
            uri = bool(self.read_only) or not self._creates
            target: str | Path = self.path
            if self.read_only:
                target = f"{self.path.resolve().as_uri()}?{self._read_mode}"
            elif not self._creates:
                target = f"{self.path.resolve().as_uri()}?mode=rw"
            conn = sqlite3.connect(
                target, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False, uri=uri
            )
            conn.execute(f"PRAGMA busy_timeout={int(BUSY_SECONDS * 1000)}")
            if not self.read_only:
                _enter_wal(conn)
                conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def _raw_transaction(self, conn: sqlite3.Connection, begin: str) -> Iterator[sqlite3.Connection]:
        """One transaction on ``conn``, committed when the block ends, rolled back when it raises.

        A transaction still open on the connection when this one begins, and no block of this thread in
        it, was left by an interrupted call (a KeyboardInterrupt raised as its ``BEGIN`` returned, before
        its block could undo it): it is rolled back first, so one Ctrl-C never breaks later store calls."""
        if conn.in_transaction:
            if getattr(self._local, "in_block", False):
                raise RuntimeError("a store transaction was begun inside another on the same thread")
            _log.debug("rolling back a store transaction an interrupted call left open")
            conn.execute("ROLLBACK")
        conn.execute(begin)
        try:
            self._local.in_block = True
            yield conn
        except BaseException:
            if conn.in_transaction:  # SQLite rolls back by itself after some failures (a full disk)
                conn.execute("ROLLBACK")
            raise
        else:
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        finally:
            self._local.in_block = False

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise ReadOnly(str(self.path), self.read_only)
        with self._translated():
            conn = self._conn()
            depth: int = getattr(self._local, "depth", 0)
            if not depth:
                with self._raw_transaction(conn, "BEGIN IMMEDIATE"):
                    yield conn
                return
            # Inside atomic(): a savepoint, so a write that fails undoes only itself.
            savepoint = f"write_{depth}"
            conn.execute(f"SAVEPOINT {savepoint}")
            self._local.depth = depth + 1
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute(f"ROLLBACK TO {savepoint}")
                    conn.execute(f"RELEASE {savepoint}")
                raise
            finally:
                self._local.depth = depth
            conn.execute(f"RELEASE {savepoint}")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._translated():
            conn = self._conn()
            if getattr(self._local, "depth", 0):
                yield conn  # inside atomic(): read what the transaction wrote so far
                return
            with self._raw_transaction(conn, "BEGIN"):
                yield conn

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Every write this thread makes in the block is one transaction: all of them are stored when the
        block ends, none if it raises (or the disk fails). Other writers wait until it ends."""
        with self._write():
            depth: int = getattr(self._local, "depth", 0)
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth = depth

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
        try:
            return model.model_validate(doc)
        except pydantic.ValidationError as exc:
            raise self._unreadable(model, doc, exc) from exc

    def _unreadable(
        self, model: type[KubeObject], doc: dict[str, Any], exc: pydantic.ValidationError
    ) -> Unreadable:
        """A stored object this version's model refuses: named, with the field and who wrote the store."""
        found = doc.get("metadata")
        meta: dict[str, Any] = found if isinstance(found, dict) else {}
        namespace = str(meta.get("namespace") or "")
        name = f"{namespace + '/' if namespace else ''}{meta.get('name', '?')}"
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"])
        try:  # a plain read, whether or not this thread is inside a transaction
            row = self._conn().execute("SELECT value FROM store_meta WHERE name=?", (WRITER_KEY,)).fetchone()
        except sqlite3.Error:
            row = None
        writer = None if row is None else str(row[0])
        if error["type"] == "extra_forbidden":
            problem = f"{field} is not a field this capa-py ({__version__}) knows"
        else:
            problem = f"{field}: {error['msg']} (this capa-py is {__version__})"
        by = (
            f"the store was written by capa-py {writer}: use that version or newer"
            if _newer(writer)
            else "written by a newer capa-py?"
        )
        return Unreadable(f"cannot read {model.KIND} {name} from the store: {problem}; {by}")

    def _from_text(self, model: type[T], text: str) -> T:
        # Validating the stored JSON in one step (pydantic-core parses it) costs less than json.loads
        # followed by validation, and less than deep-copying an already parsed object.
        try:
            return model.model_validate_json(text)
        except pydantic.ValidationError as exc:
            raise self._unreadable(model, json.loads(text), exc) from exc

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
            raise NotFound.missing(ObjectRef.of(kind.KIND, name, ns))
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
                raise NotFound(f"{obj.ref()} not found", ObjectRef.of(kind.KIND, obj.metadata.name, ns))
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
                raise NotFound(f"{obj.ref()} not found", ObjectRef.of(kind.KIND, obj.metadata.name, ns))
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
                raise NotFound.missing(ObjectRef.of(kind.KIND, name, ns))
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

    def change_sequence(self) -> str:
        """The latest resourceVersion, from one row (:class:`~capa_py.store.protocol.ChangeSequence`)."""
        return self.current_resource_version()
