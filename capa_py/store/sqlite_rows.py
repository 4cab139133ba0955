"""How the SQLite store keeps objects: rows, resource versions, the events table, deletion and collection.

Every write takes the next ``resourceVersion`` from one counter (like etcd's revision), stores the object's
document and appends an event whose sequence number is that version; the events table is compacted in batches
to keep :attr:`SQLiteRows.retain_events`. A deletion marks an object while it has finalizers and removes it
when it has none; removing an object collects its dependents through the owner index (background
propagation), and ``Orphan`` propagation strips the owner reference from them instead.

Garbage collection is Kubernetes' (its collector runs in kube-controller-manager), done in the writing
transaction: an object whose owners (:mod:`~capa_py.store.sqlite_owners` resolves them) are all absent is
deleted, whether its owner was just removed or it was created or updated naming owners already gone; with
some owners present, the references to absent ones are removed. A create or update that makes such an
object succeeds and returns the object as written; the collector's writes follow as events of their own
(ADDED or MODIFIED, then DELETED), and no reader ever finds the garbage stored.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pydantic

from capa_py import __version__
from capa_py.api.meta import KubeObject, utcnow
from capa_py.logging import get_logger
from capa_py.store.admission import check_registered, validated_document
from capa_py.store.errors import Conflict, Unreadable
from capa_py.store.protocol import Propagation, T
from capa_py.store.sqlite_connections import SQLiteConnections
from capa_py.store.sqlite_layout import WRITER_KEY, newer
from capa_py.store.sqlite_owners import owner_state

ORPHAN_FINALIZER = "orphan"

_log = get_logger("store.sqlite")


def labels_of(doc: dict[str, Any]) -> dict[str, str]:
    """The labels of a stored document."""
    return dict(doc.get("metadata", {}).get("labels", {}))


class SQLiteRows(SQLiteConnections):
    """The rows and events of a store's objects, written inside the caller's transaction."""

    retain_events: int
    """How many events the table keeps (at most twice as many between compactions)."""

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
        self._record_event(conn, rv, event, doc, prev, text)
        return doc

    def _put_status(
        self,
        conn: sqlite3.Connection,
        kind: type[KubeObject],
        name: str,
        namespace: str,
        status: dict[str, Any] | None,
        managed_fields: list[dict[str, Any]] | None,
    ) -> str:
        """Replace a stored object's status (and its managedFields, when given) in place, with the next
        resourceVersion and its MODIFIED event; the document as written. A status write changes no
        label, so the event's previous labels are the object's own."""
        rv = self._next_rv(conn)
        changes = "json_set(doc, '$.metadata.resourceVersion', ?"
        params: list[Any] = [rv, str(rv)]
        if managed_fields is not None:
            changes += ", '$.metadata.managedFields', json(?)"
            params.append(json.dumps(managed_fields, separators=(",", ":")))
        if status is None:
            changes = f"json_remove({changes}), '$.status')"
        else:
            changes += ", '$.status', json(?))"
            params.append(json.dumps(status, separators=(",", ":")))
        row = conn.execute(
            f"UPDATE objects SET rv=?, doc={changes} "
            "WHERE api_version=? AND kind=? AND namespace=? AND name=? "
            "RETURNING doc, json_extract(doc, '$.metadata.labels')",
            (*params, kind.API_VERSION, kind.KIND, namespace, name),
        ).fetchone()
        text, labels = row
        self._insert_event(
            conn, rv, "MODIFIED", (kind.API_VERSION, kind.KIND, namespace, name), text, labels or "{}"
        )
        self._compact(conn, rv)
        return str(text)

    def _doc_text(self, conn: sqlite3.Connection, kind: type[KubeObject], name: str, namespace: str) -> str:
        row = conn.execute(
            "SELECT doc FROM objects WHERE api_version=? AND kind=? AND namespace=? AND name=?",
            (kind.API_VERSION, kind.KIND, namespace, name),
        ).fetchone()
        return str(row[0])

    def _record_event(
        self,
        conn: sqlite3.Connection,
        rv: int,
        event: str,
        doc: dict[str, Any],
        prev: dict[str, Any] | None,
        text: str | None = None,
    ) -> None:
        """Append the event of a write (``text``: the document as already serialized, when it was)."""
        meta = doc["metadata"]
        self._insert_event(
            conn,
            rv,
            event,
            (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"]),
            json.dumps(doc, separators=(",", ":")) if text is None else text,
            None if prev is None else json.dumps(labels_of(prev)),
        )

    def _insert_event(
        self,
        conn: sqlite3.Connection,
        rv: int,
        event: str,
        names: tuple[str, str, str, str],
        text: str,
        prev_labels: str | None,
    ) -> None:
        conn.execute(
            "INSERT INTO events (seq, type, api_version, kind, namespace, name, doc, prev_labels) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (rv, event, *names, text, prev_labels),
        )
        self._compact(conn, rv)

    def _compact(self, conn: sqlite3.Connection, rv: int) -> None:
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
        """The owner ``owner_uid`` is gone: orphan its dependents (strip the reference), or settle them."""
        dependents = [
            row[0]
            for row in conn.execute("SELECT dependent_uid FROM owner_index WHERE owner_uid=?", (owner_uid,))
        ]
        for dependent_uid in dependents:
            dependent = self._row_by_uid(conn, dependent_uid)
            if dependent is None:
                continue
            if not orphan:
                self._settle_owners(conn, dependent, gone=owner_uid)
                continue
            refs = dependent["metadata"].get("ownerReferences", [])
            remaining = [
                r for r in refs if r["uid"] != owner_uid and self._row_by_uid(conn, r["uid"]) is not None
            ]
            prev = json.loads(json.dumps(dependent))
            dependent["metadata"]["ownerReferences"] = remaining
            if not remaining:
                dependent["metadata"].pop("ownerReferences", None)
            self._put(conn, dependent, "MODIFIED", prev)

    def _absent_owners(
        self, conn: sqlite3.Connection, doc: dict[str, Any], gone: str | None = None
    ) -> list[bool] | None:
        """For each owner reference of ``doc``, whether its owner is absent
        (:func:`~capa_py.store.sqlite_owners.owner_state`); None when the collector has nothing to do: no
        owner absent, or one it cannot resolve."""
        meta = doc["metadata"]
        refs: list[dict[str, Any]] = meta.get("ownerReferences") or []
        states = [owner_state(conn, self.registry, r, meta.get("namespace", ""), gone) for r in refs]
        if "unresolvable" in states or "absent" not in states:
            return None
        return [state == "absent" for state in states]

    def _settle_owners(self, conn: sqlite3.Connection, doc: dict[str, Any], gone: str | None = None) -> None:
        """What Kubernetes' garbage collector does to an object whose owners it checks: with every owner
        absent the object is deleted (background propagation; only marked while it has finalizers); with some
        present, the references to absent ones are removed; otherwise nothing happens."""
        absent = self._absent_owners(conn, doc, gone)
        if absent is not None:
            self._collect(conn, doc, absent)

    def _collect(self, conn: sqlite3.Connection, doc: dict[str, Any], absent: list[bool]) -> None:
        meta = doc["metadata"]
        if all(absent):
            _log.debug("garbage collecting dependent", kind=doc["kind"], name=meta["name"])
            self._delete_doc(conn, doc, "Background")
            return
        prev = json.loads(json.dumps(doc))
        meta["ownerReferences"] = [
            r for r, gone in zip(meta["ownerReferences"], absent, strict=True) if not gone
        ]
        self._put(conn, doc, "MODIFIED", prev)

    def _collect_garbage(self, conn: sqlite3.Connection) -> None:
        """Settle every object that names an owner whose uid no object has: garbage a store written by an
        earlier version kept (it collected dependents only when their owner was removed). Run when the store
        is opened for writing; the owner index finds them without reading any object that has none."""
        rows = conn.execute(
            "SELECT DISTINCT dependent_uid FROM owner_index WHERE owner_uid NOT IN (SELECT uid FROM objects)"
        ).fetchall()
        for (uid,) in rows:
            doc = self._row_by_uid(conn, uid)
            if doc is not None:
                self._settle_owners(conn, doc)

    def _write_owned(
        self, conn: sqlite3.Connection, doc: dict[str, Any], prev: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Store a created (``prev`` None: ADDED) or updated (MODIFIED) object and return it as written; when
        its owner references name absent owners the collector's writes follow in the same transaction, as
        events of their own (DELETED, or MODIFIED for a mark or a removed reference)."""
        written = self._put(conn, doc, "ADDED" if prev is None else "MODIFIED", prev)
        absent = self._absent_owners(conn, written) if written["metadata"].get("ownerReferences") else None
        if absent is None:
            return written
        result: dict[str, Any] = json.loads(json.dumps(written))
        self._collect(conn, written, absent)
        return result

    def _check_preconditions(self, obj: KubeObject, rv: int, current: dict[str, Any]) -> None:
        self._check_version(obj, rv, current["metadata"]["uid"])

    def _check_version(self, obj: KubeObject, rv: int, uid: str) -> None:
        """Conflict unless the object's resourceVersion (when it names one) is the stored ``rv`` and its
        uid (when it names one) the stored ``uid``."""
        wanted = obj.metadata.resource_version
        if wanted and wanted != str(rv):
            raise Conflict(
                f"{obj.ref()}: the object has been modified (resourceVersion {wanted} is stale, "
                f"current is {rv}); read it again and re-apply the change"
            )
        if obj.metadata.uid and obj.metadata.uid != uid:
            raise Conflict(f"{obj.ref()}: uid precondition failed (the object was re-created)")

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
            with self._lease() as conn:
                row = conn.execute("SELECT value FROM store_meta WHERE name=?", (WRITER_KEY,)).fetchone()
        except sqlite3.Error:
            row = None
        writer = None if row is None else str(row[0])
        if error["type"] == "extra_forbidden":
            problem = f"{field} is not a field this capa-py ({__version__}) knows"
        else:
            problem = f"{field}: {error['msg']} (this capa-py is {__version__})"
        by = (
            f"the store was written by capa-py {writer}: use that version or newer"
            if newer(writer)
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
