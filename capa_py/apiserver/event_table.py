"""The Table ``kubectl get events`` prints: the API server's columns for ``v1`` Events.

LAST SEEN (``5s``, or ``5s (x3 over 2m)`` for a repeated event), TYPE, REASON, OBJECT (``kind/name``, the
kind lowercased), MESSAGE; with ``-o wide`` also SUBOBJECT, SOURCE, FIRST SEEN, COUNT and NAME.
"""

from __future__ import annotations

from typing import Any

from capa_py.api.columns import age


def _column(name: str, description: str, priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": "string", "format": fmt, "description": description, "priority": priority}


COLUMNS = [
    _column("Last Seen", "Time since the event was last seen (lastTimestamp, else eventTime)."),
    _column("Type", "Normal or Warning."),
    _column("Reason", "Why the event happened, in CamelCase."),
    _column("Object", "The object the event is about (involvedObject)."),
    _column("Subobject", "The part of the object the event is about (involvedObject.fieldPath).", 1),
    _column("Source", "Who reported the event (source.component, source.host).", 1),
    _column("Message", "What happened."),
    _column("First Seen", "Time since the event was first seen (firstTimestamp, else eventTime).", 1),
    _column("Count", "How often the event happened.", 1),
    _column("Name", "Name of the event (metadata.name).", 1, "name"),
]


def _seconds_form(timestamp: str | None) -> str | None:
    """``metav1.Time`` as is; a ``MicroTime`` (``eventTime``) cut to whole seconds."""
    if not timestamp:
        return None
    return timestamp[:19] + "Z" if len(timestamp) > 20 else timestamp


def cells(doc: dict[str, Any]) -> list[Any]:
    involved = doc.get("involvedObject", {})
    event_time = doc.get("eventTime")
    series = doc.get("series") or {}
    first = _seconds_form(doc.get("firstTimestamp") or event_time)
    last = _seconds_form(series.get("lastObservedTime") or doc.get("lastTimestamp")) or first
    count = int(series.get("count") or doc.get("count") or 1)
    last_seen = age(last)
    if count > 1:
        last_seen = f"{last_seen} (x{count} over {age(first)})"
    source = doc.get("source", {})
    reporter = source.get("component") or doc.get("reportingComponent") or ""
    host = source.get("host") or doc.get("reportingInstance")
    return [
        last_seen,
        doc.get("type", ""),
        doc.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        f"{reporter}, {host}" if host else reporter,
        doc.get("message", ""),
        age(first),
        count,
        doc.get("metadata", {}).get("name", ""),
    ]
