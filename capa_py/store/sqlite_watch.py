"""How a SQLite store watch follows the events table after a resource version.

The table is read in pages of 500 events whenever the file's change signal
(:mod:`~capa_py.store.sqlite_notify`) says a commit happened, in this process or another; where other
processes cannot signal, it is polled at the store's interval, and otherwise read again every
:data:`FALLBACK_SECONDS` all the same. With a label selector, an object that starts matching arrives as
ADDED and one that stops matching as DELETED, as the Kubernetes watch cache reports them. Events compacted
away before the watch read them end it with :class:`~capa_py.store.errors.Expired`, as a 410 from the API
server would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from capa_py.store.errors import Expired
from capa_py.store.protocol import T, WatchEvent
from capa_py.store.selectors import LabelSelector
from capa_py.store.sqlite_rows import SQLiteRows, labels_of

FALLBACK_SECONDS = 2.0
"""How long a watch whose file signals changes waits before reading the table anyway (a signal lost to a full
socket queue, or a writer that cannot signal, delays its events at most this long)."""


def follow_events(
    store: SQLiteRows,
    kind: type[T],
    namespace: str | None,
    since: int,
    selector: LabelSelector,
    poll_interval: float,
    timeout: float | None,
    stop: threading.Event | None,
) -> Iterator[WatchEvent[T]]:
    """The events of ``kind`` after ``since``, until ``timeout`` passes or ``stop`` is set."""
    deadline = None if timeout is None else time.monotonic() + timeout
    query = (
        "SELECT seq, type, namespace, doc, prev_labels FROM events WHERE api_version=? AND kind=? AND seq > ?"
    )
    changes = store.changes
    while True:
        if stop is not None and stop.is_set():
            return
        generation = changes.generation()
        with store._read() as conn:
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
                now_matches = selector.matches(labels_of(doc))
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
                obj = store._from_text(kind, text) if doc is None else store._to_model(kind, doc)
                yield WatchEvent(emitted, obj, str(seq))  # type: ignore[arg-type]
        if len(rows) < 500:
            # The read saw every event of this kind up to ``head``: an idle watch moves along with
            # the store, so compaction driven by other kinds' writes does not expire it.
            since = max(since, int(head))
        if rows:
            continue
        if deadline is not None and time.monotonic() >= deadline:
            return
        wait = FALLBACK_SECONDS if changes.listening else poll_interval
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - time.monotonic()))
        changes.wait(generation, wait, stop)

