"""The Tinkerbell kinds through ``capa serve``: kubectl discovers the group, prints the CRDs' columns and is
refused invalid objects with a 422 naming the field; the raw API answers with ``details.causes``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.tinkerbell_objects import HARDWARE, MAC, OSIE, TEMPLATE, WORKFLOW, changed
from tests.apiserver.apiserver_support import Server
from tests.apiserver.test_kubectl import Kubectl, kubectl  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")

BASE = "/apis/tinkerbell.org/v1alpha2/namespaces/default"


def _file(tmp_path: Path, name: str, *docs: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def _header(table: str) -> list[str]:
    return re.split(r"\s{2,}", table.splitlines()[0].strip())


def _cells(table: str, row: int = 1) -> list[str]:
    """One row cut at the header's column offsets (kubectl prints <none> for an empty cell)."""
    header, line = table.splitlines()[0], table.splitlines()[row]
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    return [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]


def test_kubectl_discovers_the_tinkerbell_group(kubectl: Kubectl) -> None:  # noqa: F811
    listed = kubectl.run("api-resources", "--api-group=tinkerbell.org", "-o", "wide").stdout
    rows = {line.split()[0]: line for line in listed.splitlines()[1:]}
    assert set(rows) == {"hardware", "osies", "templates", "workflows"}
    for name, short in (("hardware", "hw"), ("templates", "tpl"), ("workflows", "wf")):
        assert f" {short} " in rows[name], rows[name]
    assert "tinkerbell" in rows["workflows"], "the category kubectl get tinkerbell uses"


def test_kubectl_prints_the_tinkerbell_columns(kubectl: Kubectl, tmp_path: Path) -> None:  # noqa: F811
    applied = kubectl.run("apply", "-f", _file(tmp_path, "all.yaml", HARDWARE, OSIE, TEMPLATE, WORKFLOW))
    assert "workflow.tinkerbell.org/provision-node-1 created" in applied.stdout

    workflows = kubectl.run("get", "workflows").stdout
    assert _header(workflows) == ["NAME", "STATE", "CURRENT ACTION", "REASON", "HARDWARE", "TEMPLATE", "AGE"]
    assert _cells(workflows)[:6] == ["provision-node-1", "", "", "", "node-1", "ubuntu"]
    status = {
        "status": {"state": "Running", "currentAction": "stream-image", "startedAt": "2026-01-01T00:00:00Z"}
    }
    kubectl.run(
        "patch", "wf", "provision-node-1", "--subresource=status", "--type", "merge", "-p", json.dumps(status)
    )
    assert _cells(kubectl.run("get", "wf").stdout)[:6] == [
        "provision-node-1",
        "Running",
        "stream-image",
        "",
        "node-1",
        "ubuntu",
    ]

    assert _header(kubectl.run("get", "hw").stdout) == ["NAME", "OSIE", "BMC", "AGE"]
    assert _cells(kubectl.run("get", "hw").stdout)[:3] == ["node-1", "hook", "node-1-bmc"]
    assert _header(kubectl.run("get", "osies").stdout) == ["NAME", "KERNEL", "AGE"]
    assert _header(kubectl.run("get", "osies", "-o", "wide").stdout) == ["NAME", "KERNEL", "INITRD", "AGE"]
    assert _header(kubectl.run("get", "tpl").stdout) == ["NAME", "AGE"]
    everything = kubectl.run("get", "tinkerbell", "-o", "name").stdout.split()
    assert sorted(everything) == [
        "hardware.tinkerbell.org/node-1",
        "osie.tinkerbell.org/hook",
        "template.tinkerbell.org/ubuntu",
        "workflow.tinkerbell.org/provision-node-1",
    ]

    # Started: the spec is fixed.
    refused = kubectl.run(
        "patch", "wf", "provision-node-1", "--type", "merge", "-p", '{"spec":{"timeout":7200}}', check=False
    )
    assert refused.returncode != 0
    assert (
        "spec: immutable once the workflow has started (state Running); changed: spec.timeout"
        in refused.stderr
    )


def test_kubectl_is_refused_an_invalid_hardware_naming_the_field(
    kubectl: Kubectl,  # noqa: F811
    tmp_path: Path,
) -> None:
    bad = changed(HARDWARE, ("spec", "networkInterfaces", MAC, "dhcp", "ip"), "10.0.0.300")
    refused = kubectl.run("apply", "-f", _file(tmp_path, "bad.yaml", bad), check=False)
    assert refused.returncode != 0
    assert 'The Hardware "node-1" is invalid' in refused.stderr, refused.stderr
    assert f'spec.networkInterfaces["{MAC}"].dhcp.ip: not an IPv4 address' in refused.stderr
    assert kubectl.run("get", "hardware", "-o", "name").stdout == ""


def test_the_api_answers_422_with_a_cause_per_field(server: Server) -> None:
    bad = changed(TEMPLATE, ("spec", "actions", 0, "env"), {"1X": "y"})
    bad = changed(bad, ("spec", "actions", 1, "timeout"), -1)
    code, status = server.http("POST", f"{BASE}/templates", bad)
    assert code == 422, status
    assert status["reason"] == "Invalid"
    assert status["details"]["kind"] == "Template"
    assert status["details"]["group"] == "tinkerbell.org"
    assert [c["field"] for c in status["details"]["causes"]] == [
        'spec.actions[0].env["1X"]',
        "spec.actions[1].timeout",
    ]
    code, _ = server.http("POST", f"{BASE}/templates", TEMPLATE)
    assert code == 201


def test_the_api_refuses_a_started_workflows_spec_change_and_allows_its_status(server: Server) -> None:
    code, created = server.http("POST", f"{BASE}/workflows", WORKFLOW)
    assert code == 201, created
    created["status"] = {"state": "Scheduled"}
    code, scheduled = server.http("PUT", f"{BASE}/workflows/provision-node-1/status", created)
    assert code == 200, scheduled
    scheduled["spec"]["templateRef"]["name"] = "other"
    code, status = server.http("PUT", f"{BASE}/workflows/provision-node-1", scheduled)
    assert code == 422, status
    [cause] = status["details"]["causes"]
    assert cause["field"] == "spec"
    assert "spec.templateRef.name" in cause["message"]
