"""The embedded object store: one SQLite file, Kubernetes semantics, safe for several processes.

Every write runs in a ``BEGIN IMMEDIATE`` transaction, so writers are serialised across processes by
SQLite's lock; the ``resourceVersion`` check happens inside that transaction, so of two processes racing to
update the same object one wins and the other gets ``Conflict`` — never a lost write. The database is in WAL
mode so readers never block the writer. Each write appends to an ``events`` table whose sequence number is
the new ``resourceVersion`` (a single counter, like etcd's revision); ``watch`` polls that table, which is how
it sees writes made by other processes. Labels, owner references and the fields lists select by are indexed
by triggers on the objects table (:mod:`capa_py.store.sqlite_index`), so a selector list reads and validates
only the objects it returns.

The protocol's operations are here; the tables and layout check are in :mod:`~capa_py.store.sqlite_layout`,
connections and transactions in :mod:`~capa_py.store.sqlite_connections`, rows, events and garbage collection
in :mod:`~capa_py.store.sqlite_rows` (owners resolved by :mod:`~capa_py.store.sqlite_owners`), following
events in :mod:`~capa_py.store.sqlite_watch`.

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

import json
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from capa_py import __version__
from capa_py.api.meta import KubeObject, utcnow
from capa_py.api.registry import REGISTRY, KindRegistry
from capa_py.logging import get_logger
from capa_py.store.admission import validated_status
from capa_py.store.errors import (
    AlreadyExists,
    Conflict,
    Expired,
    Invalid,
    Missing,
    NotFound,
    ObjectRef,
    Unavailable,
)
from capa_py.store.protocol import ObjectList, Propagation, T, WatchEvent
from capa_py.store.selectors import FieldSelector, LabelSelector
from capa_py.store.sqlite_connections import (
    BUSY_SECONDS,
    cannot_write,
    create_private,
    open_failure,
)
from capa_py.store.sqlite_index import INDEX_SCHEMA, ensure_indexes, plan_list
from capa_py.store.sqlite_layout import (
    LAYOUT_KEY,
    LAYOUT_VERSION,
    SCHEMA,
    STORE_UID_KEY,
    WRITER_KEY,
    check_layout,
    version_key,
)
from capa_py.store.sqlite_notify import ChangeSignal
from capa_py.store.sqlite_rows import ORPHAN_FINALIZER, SQLiteRows
from capa_py.store.sqlite_watch import follow_events

__all__ = [
    "BUSY_SECONDS",
    "LAYOUT_KEY",
    "LAYOUT_VERSION",
    "ORPHAN_FINALIZER",
    "STORE_UID_KEY",
    "WRITER_KEY",
    "SQLiteStore",
]

_log = get_logger("store.sqlite")


def _desired(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata", "status")}


class SQLiteStore(SQLiteRows):
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
        super().__init__(Path(path), registry, create)
        self.poll_interval = poll_interval
        self.retain_events = retain_events
        self._uid: str | None = None
        if self.path.is_dir():
            raise Unavailable(str(self.path), "it is a directory")
        if not create and not self.path.exists():
            raise Missing(str(self.path))
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                create_private(self.path)
            self._open_for_writing()
        except Unavailable:
            self.close()
            raise
        except (sqlite3.Error, OSError) as exc:
            self.close()
            if not (self.path.exists() and cannot_write(exc)):
                raise (
                    self._translate(exc)
                    if isinstance(exc, sqlite3.Error)
                    else Unavailable(str(self.path), open_failure(exc))
                ) from exc
            self._open_for_reading(open_failure(exc))

    def _open_for_writing(self) -> None:
        with self._lease() as leased, self._raw_transaction(leased, "BEGIN IMMEDIATE") as conn:
            self._check_layout(conn)
            for statement in (SCHEMA + INDEX_SCHEMA).split(";"):
                if statement.strip():
                    conn.execute(statement)
            ensure_indexes(conn)
            self._collect_garbage(conn)
            conn.execute(
                "INSERT OR IGNORE INTO store_meta (name, value) VALUES (?, ?)",
                (LAYOUT_KEY, str(LAYOUT_VERSION)),
            )
            row = conn.execute("SELECT value FROM store_meta WHERE name=?", (WRITER_KEY,)).fetchone()
            if row is None or version_key(__version__) > version_key(row[0]):
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
                with self._lease() as leased, self._raw_transaction(leased, "BEGIN") as conn:
                    self._check_layout(conn)
                _log.info("store opened read-only", path=str(self.path), mode=mode, reason=why)
                return
            except Unavailable:
                self.close()
                raise
            except (sqlite3.Error, OSError) as exc:
                self._drop_connections()
                failure = exc
        assert failure is not None
        if isinstance(failure, sqlite3.Error):
            raise self._translate(failure) from failure
        raise Unavailable(str(self.path), open_failure(failure)) from failure

    def _check_layout(self, conn: sqlite3.Connection) -> None:
        """Refuse a file a newer capa-py wrote in a layout this version does not know (before anything is
        written to it)."""
        check_layout(conn, str(self.path), self.registry)

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
            doc = self._write_owned(conn, doc, None)
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
                result = self._write_owned(conn, merged, current)
        return self._to_model(kind, result)

    def update_status(self, obj: T) -> T:
        """Store the object's status (the rest stays as stored). The status alone is validated and
        serialized; the stored document is changed in place by SQLite (``json_set``), so the object is not
        read into Python and written back, and the result is parsed once from the text written."""
        kind = type(obj)
        if not kind.HAS_STATUS:
            raise Invalid(f"{kind.KIND} has no status subresource", "status")
        status, _ = validated_status(self.registry, obj)
        managed = obj.metadata.managed_fields
        managed_doc = (
            None
            if not managed
            else [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in managed]
        )
        ns = self._namespace(kind, obj.metadata.namespace)
        with self._write() as conn:
            row = conn.execute(
                "SELECT rv, json_extract(doc, '$.metadata.uid'), json_extract(doc, '$.status'),"
                " json_extract(doc, '$.metadata.managedFields')"
                " FROM objects WHERE api_version=? AND kind=? AND namespace=? AND name=?",
                (kind.API_VERSION, kind.KIND, ns, obj.metadata.name),
            ).fetchone()
            if row is None:
                raise NotFound(f"{obj.ref()} not found", ObjectRef.of(kind.KIND, obj.metadata.name, ns))
            rv, uid, stored_status, stored_managed = row
            self._check_version(obj, int(rv), uid)
            unchanged = (None if stored_status is None else json.loads(stored_status)) == status and (
                managed_doc is None
                or (None if stored_managed is None else json.loads(stored_managed)) == managed_doc
            )
            if unchanged:
                text = self._doc_text(conn, kind, obj.metadata.name, ns)
            else:
                text = self._put_status(conn, kind, obj.metadata.name, ns, status, managed_doc)
        return self._from_text(kind, text)

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
        yield from follow_events(self, kind, namespace, since, selector, self.poll_interval, timeout, stop)

    # -- maintenance ---------------------------------------------------------------------------------
    def current_resource_version(self) -> str:
        with self._read() as conn:
            return str(conn.execute("SELECT value FROM counters WHERE name='rv'").fetchone()[0])

    def change_signal(self) -> ChangeSignal:
        """This file's commits, this process's and others'
        (:class:`~capa_py.store.protocol.ChangeNotification`)."""
        return self.changes

    def change_sequence(self) -> str:
        """The latest resourceVersion, from one row (:class:`~capa_py.store.protocol.ChangeSequence`)."""
        return self.current_resource_version()
