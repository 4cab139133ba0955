"""The store refuses an invalid Tinkerbell object whoever writes it, and stores MAC keys normalised."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.api.tinkerbell import Hardware, Workflow
from capa_py.store import SQLiteStore
from capa_py.store.errors import Invalid
from tests.api.tinkerbell_objects import HARDWARE, MAC, WORKFLOW, changed, interface


def test_the_store_refuses_an_invalid_hardware_naming_the_field(tmp_path: Path) -> None:
    bad = Hardware.model_validate(
        changed(HARDWARE, ("spec", "networkInterfaces", MAC, "dhcp", "vlanId"), 5000)
    )
    with SQLiteStore(tmp_path / "state.db") as store:
        with pytest.raises(Invalid) as raised:
            store.create(bad)
        assert raised.value.field == f'spec.networkInterfaces["{MAC}"].dhcp.vlanId'
        assert list(store.list(Hardware)) == []


def test_the_store_keeps_mac_keys_in_normal_form(tmp_path: Path) -> None:
    spelled = changed(HARDWARE, ("spec", "networkInterfaces"), {"AABB.CCDD.EEFF": interface()})
    with SQLiteStore(tmp_path / "state.db") as store:
        store.create(Hardware.model_validate(spelled))
        stored = store.get(Hardware, "node-1", "default")
    assert list(stored.spec.network_interfaces) == [MAC]


def test_a_workflow_status_write_is_admitted_through_the_store(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "state.db") as store:
        workflow = store.create(Workflow.model_validate(WORKFLOW))
        workflow.status.state = "Running"
        workflow.status.current_action = "stream-image"
        written = store.update_status(workflow)
    assert written.status.state == "Running"
