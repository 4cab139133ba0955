"""managedFields entries as :mod:`capa_py.apiserver.fieldmanager` reads and writes them."""

from __future__ import annotations

from typing import Any

import pytest

from capa_py.apiserver import fieldsets
from capa_py.apiserver.fieldmanager import Managed, manager_key, manager_name


def entry(manager: str, operation: str, time: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"manager": manager, "operation": operation, "apiVersion": "v1"}
    if time is not None:
        out["time"] = time
    return {**out, "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}, **extra}


def test_entries_are_ordered_applies_first_then_by_time_then_by_manager() -> None:
    entries = [
        entry("kubectl", "Update", "2026-01-01T00:00:05Z"),
        entry("OpenAPI-Generator", "Update", "2026-01-01T00:00:09Z"),
        entry("b", "Apply", "2026-01-01T00:00:01Z"),
        entry("a", "Apply", "2026-01-01T00:00:01Z"),
        entry("z", "Apply"),
        entry("ctrl", "Update", "2026-01-01T00:00:05Z", subresource="status"),
    ]
    ordered = [(e["manager"], e.get("subresource")) for e in Managed.decode(entries).encode()]
    assert ordered == [
        ("z", None),
        ("a", None),
        ("b", None),
        ("ctrl", "status"),
        ("kubectl", None),
        ("OpenAPI-Generator", None),
    ]


def test_entries_read_back_as_written() -> None:
    written = [entry("m", "Apply", "2026-01-01T00:00:01Z"), entry("u", "Update", subresource="status")]
    assert Managed.decode(written).encode() == written


def test_times_are_written_in_seconds_in_utc() -> None:
    managed = Managed.decode([entry("m", "Apply", "2026-01-01T02:00:01.5+02:00")])
    assert managed.encode()[0]["time"] == "2026-01-01T00:00:01Z"


@pytest.mark.parametrize(
    "bad",
    [
        {"operation": "Bogus"},
        {"fieldsType": "FieldsV2"},
        {"time": "yesterday"},
        {"fieldsV1": {"f:data": []}},
    ],
)
def test_entries_the_api_server_would_not_read_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"."):
        Managed.decode([{**entry("m", "Apply"), **bad}])


def test_updates_are_told_apart_by_api_version_and_applies_are_not() -> None:
    assert manager_key("m", "Update", "v1", "") != manager_key("m", "Update", "v2", "")
    assert manager_key("m", "Apply", "v1", "") == manager_key("m", "Apply", "v2", "")


def test_the_manager_is_the_parameter_else_the_user_agent_up_to_its_first_slash() -> None:
    assert manager_name({"fieldManager": "mine"}, "kubectl/v1.32.4 (linux/amd64)") == "mine"
    assert manager_name({}, "kubectl/v1.32.4 (linux/amd64) kubernetes/4cb5f07") == "kubectl"
    assert manager_name({}, "OpenAPI-Generator/29.0.0/python") == "OpenAPI-Generator"
    assert len(manager_name({}, "x" * 300)) == 128


def test_more_than_ten_update_managers_merge_the_oldest_into_ancient_changes() -> None:
    entries = [entry(f"m{i:02}", "Update", f"2026-01-01T00:00:{i:02}Z") for i in range(12)]
    managed = Managed.decode(entries)
    managed.cap()
    managers = [e["manager"] for e in managed.encode()]
    assert len(managers) == 10
    assert managers[0] == "ancient-changes", "the oldest time it holds is m02's: still the oldest"
    assert "m00" not in managers
    assert "m02" not in managers
    assert managed.fields[manager_key("ancient-changes", "Update", "v1", "")] == {
        (fieldsets.field("data"), fieldsets.field("a"))
    }
