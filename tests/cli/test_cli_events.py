"""``capa get events``: the Events the controllers recorded, with their type, reason, object and count."""

from __future__ import annotations

from pathlib import Path

from capa_py.api.core import ConfigMap
from capa_py.api.meta import ObjectMeta
from capa_py.runtime.events import EventRecorder
from capa_py.store import SQLiteStore
from tests.cli.cli_support import Cli


def test_get_events_shows_type_reason_object_count_and_message(cli: Cli, state: Path) -> None:
    store = SQLiteStore(state)
    try:
        subject = store.create(ConfigMap(metadata=ObjectMeta(name="subject", namespace="default")))
        recorder = EventRecorder(store)
        recorder.warning(subject, "FailedReconcileVpc", "UnauthorizedOperation: denied")
        recorder.warning(subject, "FailedReconcileVpc", "UnauthorizedOperation: denied")
    finally:
        store.close()
    result = cli("get", "events")
    assert result.exit_code == 0, result
    header, row = result.stdout.splitlines()
    assert header.split() == ["NAME", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE", "AGE"]
    cells = row.split()
    assert cells[0].startswith("subject.")
    assert cells[1:5] == ["Warning", "FailedReconcileVpc", "configmap/subject", "2"]
    assert "UnauthorizedOperation: denied" in row
