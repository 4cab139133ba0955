"""A CRD's ``additionalPrinterColumns`` as the API server turns them into a ``meta.k8s.io/v1`` Table.

The first column is always Name. Each printer column's ``jsonPath`` is evaluated on the object (kubectl's
JSONPath: ``.a.b``, ``['dotted\\.key']``, ``[0]``, ``[*]``, ``[?(@.kind=="Machine")]``); the first value
found makes the cell, typed by the column's ``type``: ``string`` prints any value, ``integer``, ``number``
and ``boolean`` keep a value of their type, ``date`` shows the time since the timestamp (``5m30s``, ``3h``);
nothing found, or a value of another type, is an empty cell (``null``). Every column is returned with its
``priority``: kubectl shows those above 0 only with ``-o wide``. A CRD version without printer columns gets
Age (``.metadata.creationTimestamp``).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name of the object (metadata.name), unique within its namespace.",
    "priority": 0,
}
AGE_COLUMN = {
    "name": "Age",
    "type": "date",
    "jsonPath": ".metadata.creationTimestamp",
    "description": "Time since the object was created (metadata.creationTimestamp).",
}


def definitions(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Table's ``columnDefinitions``: Name, then each printer column."""
    result = [dict(NAME_COLUMN)]
    for column in columns or [AGE_COLUMN]:
        path = str(column.get("jsonPath", ""))
        result.append(
            {
                "name": column.get("name", ""),
                "type": column.get("type", "string"),
                "format": column.get("format", ""),
                "description": column.get("description")
                or f"Custom resource definition column (in JSONPath format): {path}",
                "priority": int(column.get("priority", 0)),
            }
        )
    return result


def cells(columns: list[dict[str, Any]], doc: dict[str, Any], now: datetime | None = None) -> list[Any]:
    """One row's cells: the name, then each column's value."""
    row: list[Any] = [doc.get("metadata", {}).get("name", "")]
    for column in columns or [AGE_COLUMN]:
        try:
            found = evaluate(str(column.get("jsonPath", "")), doc)
        except ValueError:
            found = []
        if not found:
            row.append(None)
            continue
        row.append(_cell(str(column.get("type", "string")), found[0], now))
    return row


# -- cells ------------------------------------------------------------------------------------------------
def _go_json(value: Any) -> str:
    """A map or list as Go's ``encoding/json`` writes it: compact, keys sorted, whole floats without a
    fraction, ``<``, ``>``, ``&``, U+2028 and U+2029 escaped."""

    def plain(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: plain(v) for k, v in node.items()}
        if isinstance(node, list):
            return [plain(v) for v in node]
        if isinstance(node, float) and node.is_integer() and abs(node) < 1e21:
            return int(node)
        return node

    text = json.dumps(plain(value), separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _text(value: Any) -> str:
    """A value as the API server's JSONPath prints a cell: strings as they are, maps and lists as compact
    JSON, other values in Go's default format."""
    if isinstance(value, (dict, list)):
        return _go_json(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _cell(kind: str, value: Any, now: datetime | None) -> Any:
    if kind == "string":
        return _text(value)
    if value is None:
        return None
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        try:
            when = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return "<invalid>"
        return human_duration(int(((now or datetime.now(UTC)) - when).total_seconds()))
    return None


def human_duration(seconds: int) -> str:
    """A date column's age as the API server gives it: ``45s``, ``5m30s``, ``42m``, ``3h5m``, ``20h``,
    ``3d4h``, ``40d``."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


# -- JSONPath ------------------------------------------------------------------------------------------------
_FILTER = re.compile(r"^\?\(@((?:\.[^=!<>\s]+)*)\s*(?:(==|!=)\s*(.+?))?\s*\)$")


def _steps(path: str) -> list[tuple[str, Any]]:
    """``.a['b.c'][0][?(@.x=="y")]`` as steps: ("key", "a"), ("key", "b.c"), ("index", 0), ("filter", ...)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    steps: list[tuple[str, Any]] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == ".":
            j = i + 1
            while j < len(text) and text[j] not in ".[":
                j += 1
            if j > i + 1:
                steps.append(("key", text[i + 1 : j]))
            i = j
        elif char == "[":
            j = _closing(text, i)
            inner = text[i + 1 : j].strip()
            i = j + 1
            if inner == "*":
                steps.append(("all", None))
            elif inner[:1] in ("'", '"'):
                steps.append(("key", re.sub(r"\\(.)", r"\1", inner[1:-1])))
            elif inner.startswith("?"):
                match = _FILTER.match(inner)
                if match is None:
                    raise ValueError(f"unsupported filter {inner!r}")
                field, op, literal = match.groups()
                keys = [k for k in (field or "").split(".") if k]
                steps.append(("filter", (keys, op, _literal(literal) if literal is not None else None)))
            else:
                try:
                    steps.append(("index", int(inner)))
                except ValueError as exc:
                    raise ValueError(f"unsupported JSONPath step [{inner}]") from exc
        else:
            j = i
            while j < len(text) and text[j] not in ".[":
                j += 1
            steps.append(("key", text[i:j]))
            i = j
    return steps


def _closing(text: str, start: int) -> int:
    quote = ""
    depth = 0
    for j in range(start, len(text)):
        char = text[j]
        if quote:
            if char == "\\":
                continue
            if char == quote and text[j - 1] != "\\":
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"unclosed [ in {text!r}")


def _literal(text: str) -> Any:
    text = text.strip()
    if text[:1] in ("'", '"') and text[-1:] == text[:1]:
        return text[1:-1]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _lookup(value: Any, keys: list[str]) -> tuple[bool, Any]:
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value


def evaluate(path: str, doc: Any) -> list[Any]:
    """The values ``path`` finds in ``doc`` (missing keys find nothing)."""
    current = [doc]
    for step, arg in _steps(path):
        found: list[Any] = []
        for value in current:
            if step == "key":
                if isinstance(value, dict) and arg in value:
                    found.append(value[arg])
            elif step == "index":
                if isinstance(value, list) and -len(value) <= arg < len(value):
                    found.append(value[arg])
            elif step == "all":
                if isinstance(value, list):
                    found.extend(value)
                elif isinstance(value, dict):
                    found.extend(value.values())
            else:
                keys, op, literal = arg
                items = value if isinstance(value, list) else [value]
                for item in items:
                    present, field = _lookup(item, keys)
                    matches = op is None or (op == "==") == (field == literal)
                    if present and matches:
                        found.append(item)
        current = found
    return current
