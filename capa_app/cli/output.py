"""Printing objects the way kubectl prints them: tables, ``-o json`` and ``-o yaml``.

Light to import (every command module does): YAML and the kinds' columns are loaded when first printed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from capa_py.api.meta import KubeObject


def list_document(objects: Sequence[KubeObject]) -> dict[str, Any]:
    """A ``kind: List`` as kubectl prints several objects."""
    return {
        "apiVersion": "v1",
        "items": [o.to_dict() for o in objects],
        "kind": "List",
        "metadata": {"resourceVersion": ""},
    }


def render_json(document: Any) -> str:
    return json.dumps(document, indent=4, sort_keys=True)


def render_yaml(document: Any) -> str:
    import yaml

    return yaml.safe_dump(document, sort_keys=True, default_flow_style=False)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns left-aligned and three spaces apart, as kubectl prints them."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("   ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def print_objects(
    out: TextIO,
    objects: Sequence[KubeObject],
    output: str,
    single: bool = False,
    all_namespaces: bool = False,
    wide: bool = False,
) -> None:
    from capa_py.api.columns import AGE_COLUMN, columns_for

    if output in ("json", "yaml"):
        document = objects[0].to_dict() if single and objects else list_document(objects)
        out.write(render_json(document) + "\n" if output == "json" else render_yaml(document))
        return
    if not objects:
        out.write("No resources found.\n")
        return
    columns = columns_for(objects[0].KIND, wide)
    if not any(header == "AGE" for header, _ in columns):
        columns = [*columns, AGE_COLUMN]
    headers = (["NAMESPACE"] if all_namespaces else []) + ["NAME"] + [h for h, _ in columns]
    rows = []
    for obj in objects:
        doc = obj.to_dict()
        row = [obj.metadata.namespace or ""] if all_namespaces else []
        row.append(obj.metadata.name)
        row.extend(render(doc) for _, render in columns)
        rows.append(row)
    out.write(format_table(headers, rows))
