"""``meta.k8s.io/v1`` Table responses: the columns ``kubectl get`` prints.

A custom kind (capa-py's own, or one a stored CRD defines) gets its CRD's printer columns
(:mod:`capa_py.apiserver.printer_columns`), as the API server serves them; Events get the API server's
columns for Events; other Kubernetes kinds the columns ``capa get`` prints.
"""

from __future__ import annotations

from typing import Any

from capa_py.api.columns import COLUMNS, WIDE_COLUMNS, age
from capa_py.api.meta import KubeObject
from capa_py.apiserver import event_table, printer_columns


def wants_table(accept: str) -> bool:
    return any("as=Table" in part for part in accept.split(","))


COUNTS = frozenset({"DATA"})
"""Columns whose cells are counts: integers in a Table, as the API server sends them."""


def _column(
    name: str, description: str, fmt: str = "", priority: int = 0, kind: str = "string"
) -> dict[str, Any]:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


def _cell(title: str, text: str) -> Any:
    return int(text) if title in COUNTS and text.isdigit() else text


def _row(doc: dict[str, Any], cells: list[Any], include_object: str) -> dict[str, Any]:
    row: dict[str, Any] = {"cells": cells}
    if include_object == "Object":
        row["object"] = doc
    elif include_object != "None":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": doc.get("metadata", {}),
        }
    return row


def table(
    model: type[KubeObject],
    docs: list[dict[str, Any]],
    include_object: str,
    metadata: dict[str, Any],
    printer: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The Table of ``docs``; ``printer``: a CRD's ``additionalPrinterColumns`` to use."""
    if printer is not None:
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "columnDefinitions": printer_columns.definitions(printer),
            "rows": [_row(doc, printer_columns.cells(printer, doc), include_object) for doc in docs],
        }
    columns = COLUMNS.get(model.KIND, [])
    definitions = [_column("Name", "Name of the object (metadata.name).", "name")]
    wide = WIDE_COLUMNS.get(model.KIND, frozenset())
    definitions += [
        _column(
            title.title(),
            title.lower(),
            priority=1 if title in wide else 0,
            kind="integer" if title in COUNTS else "string",
        )
        for title, _ in columns
    ]
    definitions.append(_column("Age", "Time since the object was created (metadata.creationTimestamp)."))
    if model.KIND == "Event":
        definitions = list(event_table.COLUMNS)
    rows = []
    for doc in docs:
        meta = doc.get("metadata", {})
        cells: list[Any] = [meta.get("name", "")]
        cells += [_cell(title, render(doc)) for title, render in columns]
        cells.append(age(meta.get("creationTimestamp")))
        if model.KIND == "Event":
            cells = event_table.cells(doc)
        rows.append(_row(doc, cells, include_object))
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }
