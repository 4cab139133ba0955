"""``capa apply`` and ``capa get`` with the Tinkerbell kinds: invalid objects exit 2 naming the field and
store nothing; every kind resolves by plural, singular and short name and prints its CRD's columns."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from capa_py.api.tinkerbell import Workflow
from capa_py.store import SQLiteStore
from tests.api.tinkerbell_objects import HARDWARE, MAC, OSIE, TEMPLATE, WORKFLOW, changed
from tests.cli.cli_support import Cli

TINKERBELL = ("hardware", "osies", "templates", "workflows")


def _write(path: Path, documents: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def _stored(cli: Cli) -> dict[str, list[dict[str, Any]]]:
    found = {}
    for kind in TINKERBELL:
        result = cli("get", kind, "-A", "-o", "json")
        assert result.exit_code == 0, str(result)
        found[kind] = json.loads(result.stdout)["items"]
    return found


def _table(text: str) -> list[dict[str, str]]:
    """A kubectl-style table as rows keyed by header, cut at the headers' offsets (cells may be empty)."""
    header, *lines = text.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    names = [m.group() for m in re.finditer(r"\S+(?: \S+)*", header)]
    bounds = [*starts[1:], None]
    return [
        {name: line[start:end].strip() for name, start, end in zip(names, starts, bounds, strict=True)}
        for line in lines
    ]


INVALID = [
    (
        "hardware ip",
        changed(HARDWARE, ("spec", "networkInterfaces", MAC, "dhcp", "ip"), "10.0.0.300"),
        f'(Hardware default/node-1): spec.networkInterfaces["{MAC}"].dhcp.ip: not an IPv4 address',
    ),
    (
        "osie url",
        changed(OSIE, ("spec", "kernelUrl"), "tftp://boot/vmlinuz"),
        "(OSIE default/hook): spec.kernelUrl: not an http(s) URL",
    ),
    (
        "template volume",
        changed(TEMPLATE, ("spec", "volumes"), ["/dev:dev"]),
        "(Template default/ubuntu): spec.volumes[0]: target 'dev' must be an absolute container directory",
    ),
    (
        "workflow timeout",
        changed(WORKFLOW, ("spec", "timeout"), -1),
        "(Workflow default/provision-node-1): spec.timeout: -1 is not 0 to 2147483647 seconds",
    ),
]


@pytest.mark.parametrize(("case", "bad", "message"), INVALID, ids=[c for c, _, _ in INVALID])
def test_apply_of_an_invalid_tinkerbell_object_exits_2_naming_the_field_and_stores_nothing(
    cli: Cli, tmp_path: Path, case: str, bad: dict[str, Any], message: str
) -> None:
    valid = [d for d in (HARDWARE, OSIE, TEMPLATE, WORKFLOW) if d["kind"] != bad["kind"]]
    path = _write(tmp_path / "bad.yaml", [*valid, bad])
    result = cli("apply", "-f", str(path), "--no-wait")
    assert result.exit_code == 2, f"{case}:\n{result}"
    assert f"error: {path}: document 4 {message}" in result.stderr, str(result)
    assert _stored(cli) == {kind: [] for kind in TINKERBELL}, "a refused apply stored something"


def test_every_kind_resolves_by_plural_singular_and_short_name_with_its_columns(
    cli: Cli, tmp_path: Path
) -> None:
    spelled = changed(
        HARDWARE,
        ("spec", "networkInterfaces"),
        {"AA-BB-CC-DD-EE-FF": HARDWARE["spec"]["networkInterfaces"][MAC]},
    )
    applied = cli(
        "apply", "-f", str(_write(tmp_path / "ok.yaml", [spelled, OSIE, TEMPLATE, WORKFLOW])), "--no-wait"
    )
    assert applied.exit_code == 0, str(applied)
    again = cli("apply", "-f", str(tmp_path / "ok.yaml"), "--no-wait")
    assert "hardware/node-1 unchanged" in again.stdout, f"the spelling of a MAC is no change:\n{again}"

    headers = {
        ("hardware", "hw"): ["NAME", "OSIE", "BMC", "AGE"],
        ("osies", "osie"): ["NAME", "KERNEL", "AGE"],
        ("templates", "tpl", "template"): ["NAME", "AGE"],
        ("workflows", "wf", "workflow"): [
            "NAME",
            "STATE",
            "CURRENT ACTION",
            "REASON",
            "HARDWARE",
            "TEMPLATE",
            "AGE",
        ],
    }
    for names, expected in headers.items():
        for name in names:
            result = cli("get", name)
            assert result.exit_code == 0, str(result)
            assert list(_table(result.stdout)[0]) == expected, f"capa get {name}:\n{result.stdout}"

    [hardware] = _table(cli("get", "hw").stdout)
    assert (hardware["NAME"], hardware["OSIE"], hardware["BMC"]) == ("node-1", "hook", "node-1-bmc")
    stored = json.loads(cli("get", "hw", "node-1", "-o", "json").stdout)
    assert list(stored["spec"]["networkInterfaces"]) == [MAC], "MAC keys are stored normalised"

    [osie] = _table(cli("get", "osies", "-o", "wide").stdout)
    assert osie["KERNEL"] == OSIE["spec"]["kernelUrl"]
    assert osie["INITRD"] == OSIE["spec"]["initrdUrl"]

    [workflow] = _table(cli("get", "workflows").stdout)
    assert workflow == {
        "NAME": "provision-node-1",
        "STATE": "",
        "CURRENT ACTION": "",
        "REASON": "",
        "HARDWARE": "node-1",
        "TEMPLATE": "ubuntu",
        "AGE": workflow["AGE"],
    }


def _set_status(state_file: Path, **status: Any) -> None:
    with SQLiteStore(state_file) as store:
        workflow = store.get(Workflow, "provision-node-1", "default")
        workflow.status = workflow.status.model_validate(
            {**workflow.status.model_dump(by_alias=True), **status}
        )
        store.update_status(workflow)


def test_capa_get_workflows_shows_state_current_action_and_reason(
    cli: Cli, tmp_path: Path, state: Path
) -> None:
    assert cli("apply", "-f", str(_write(tmp_path / "wf.yaml", [WORKFLOW])), "--no-wait").exit_code == 0
    _set_status(state, state="Failed", currentAction="stream-image", reason="Timeout")
    [row] = _table(cli("get", "wf").stdout)
    assert (row["STATE"], row["CURRENT ACTION"], row["REASON"]) == ("Failed", "stream-image", "Timeout")


def test_reapplying_a_started_workflow_with_another_spec_exits_2_naming_spec(
    cli: Cli, tmp_path: Path, state: Path
) -> None:
    assert cli("apply", "-f", str(_write(tmp_path / "wf.yaml", [WORKFLOW])), "--no-wait").exit_code == 0
    _set_status(state, state="Running", startedAt="2026-01-01T00:00:00Z")
    again = cli("apply", "-f", str(_write(tmp_path / "wf.yaml", [WORKFLOW])), "--no-wait")
    assert again.exit_code == 0, f"re-applying the same spec is allowed:\n{again}"

    longer = changed(WORKFLOW, ("spec", "timeout"), 7200)
    refused = cli("apply", "-f", str(_write(tmp_path / "wf2.yaml", [longer])), "--no-wait")
    assert refused.exit_code == 2, str(refused)
    assert (
        "Workflow default/provision-node-1: spec: immutable once the workflow has started (state Running); "
        "changed: spec.timeout"
    ) in refused.stderr, str(refused)
    stored = json.loads(cli("get", "wf", "provision-node-1", "-o", "json").stdout)
    assert stored["spec"]["timeout"] == 3600


def test_wide_output_is_only_for_get(cli: Cli) -> None:
    refused = cli("get", "osies", "-o", "wider")
    assert refused.exit_code == 2, str(refused)
    assert "table, wide, json or yaml" in refused.stderr
