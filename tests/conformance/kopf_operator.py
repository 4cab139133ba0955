"""A trivial kopf operator, run by ``test_kopf.py`` with ``kopf run --standalone``: it watches the Widgets
(``widgets.example.com``, a CRD of the test's own) of one namespace. kopf puts its finalizer on a new Widget;
on creation the operator's handler returns the widget's size, which kopf writes into ``status.created``; on
deletion the handler appends the widget's name to the file ``WIDGET_DELETIONS`` names, and kopf then removes
its finalizer so that the API server deletes the Widget."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kopf

GROUP, VERSION, PLURAL = "example.com", "v1", "widgets"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 30  # re-establish watches often: the test runs for seconds
    settings.networking.request_timeout = 30


@kopf.on.create(GROUP, VERSION, PLURAL)
def created(spec: kopf.Spec, **_: Any) -> dict[str, Any]:
    return {"size": spec.get("size", 0), "state": "ready"}


@kopf.on.delete(GROUP, VERSION, PLURAL)
def deleted(name: str, **_: Any) -> None:
    with Path(os.environ["WIDGET_DELETIONS"]).open("a") as log:
        log.write(f"{name}\n")
