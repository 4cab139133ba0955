"""Tinkerbell from the command line: ``capa tink render``, ``capa apply`` of the examples (prepared without
an agent, and without AWS), ``capa delete --wait`` showing the workflow Canceled, and the workflow
supervisor's flags on ``capa controller``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli.cli_support import Cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell"
TEMPLATE = str(EXAMPLES / "template.yaml")
HARDWARE = str(EXAMPLES / "hardware.yaml")
MANIFESTS = [str(EXAMPLES / f"{name}.yaml") for name in ("osie", "hardware", "template", "workflow")]


def files(*paths: str) -> list[str]:
    return [arg for path in paths for arg in ("-f", path)]


# -- capa tink render -----------------------------------------------------------------------------------
def test_render_prints_the_actions_in_order_merged_with_the_template_env_and_volumes(cli: Cli) -> None:
    result = cli(
        "tink", "render", "-f", TEMPLATE, "--hardware", HARDWARE, "--data", "device_1=/dev/sdb", "-o", "json"
    )
    assert result.exit_code == 0, str(result)
    actions = json.loads(result.stdout)["actions"]
    assert [a["name"] for a in actions] == [
        "stream-ubuntu-image",
        "grow-partition",
        "add-cloud-init-config",
        "reboot",
    ]
    assert actions[0]["env"]["DEST_DISK"] == "/dev/nvme0n1"
    assert actions[0]["volumes"] == ["/dev:/dev"]
    assert actions[0]["timeout"] == 600
    assert actions[1]["env"]["CMD_LINE"] == "growpart /dev/sdb 1 && resize2fs /dev/sdb1"
    assert actions[3]["command"] == "reboot"
    as_yaml = cli("tink", "render", "-f", TEMPLATE, "--hardware", HARDWARE, "--data", "device_1=/dev/sdb")
    assert as_yaml.exit_code == 0, str(as_yaml)
    assert yaml.safe_load(as_yaml.stdout) == {"actions": actions}, (
        "yaml is the default, with the same content"
    )


def test_render_error_names_the_field_and_position_and_exits_2(cli: Cli) -> None:
    result = cli("tink", "render", "-f", TEMPLATE, "--hardware", HARDWARE)
    assert result.exit_code == 2, str(result)
    assert "spec.actions[1].env.CMD_LINE: template: " in result.stderr, result.stderr
    assert "device_1" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("data", "message"),
    [("device_1", "--data 'device_1': expected KEY=VALUE"), ("Hardware=x", "spec.templateData.Hardware")],
)
def test_bad_data_exits_2_naming_it(cli: Cli, data: str, message: str) -> None:
    result = cli("tink", "render", "-f", TEMPLATE, "--hardware", HARDWARE, "--data", data)
    assert result.exit_code == 2, str(result)
    assert message in result.stderr


def test_bad_files_exit_2_naming_the_file(cli: Cli, tmp_path: Path) -> None:
    wrong_kind = cli("tink", "render", "-f", HARDWARE, "--hardware", HARDWARE)
    assert wrong_kind.exit_code == 2, str(wrong_kind)
    assert f"-f {HARDWARE}: expected exactly one Template, found Hardware" in wrong_kind.stderr
    missing = cli("tink", "render", "-f", TEMPLATE, "--hardware", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2, str(missing)
    assert "nope.yaml" in missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "apiVersion: tinkerbell.org/v1alpha2\nkind: Template\nmetadata: {name: t}\nspec: {actions: 3}\n"
    )
    invalid = cli("tink", "render", "-f", str(broken), "--hardware", HARDWARE)
    assert invalid.exit_code == 2, str(invalid)
    assert "spec.actions" in invalid.stderr


# -- capa apply / get / delete --------------------------------------------------------------------------
def test_apply_prepares_the_workflow_and_delete_shows_it_canceled(cli: Cli) -> None:
    applied = cli("apply", *files(*MANIFESTS), "--timeout", "60s")
    assert applied.exit_code == 0, str(applied)
    assert "Workflow default/provision-machine1" in applied.stdout
    shown = cli("get", "workflows", "-o", "yaml")
    assert shown.exit_code == 0, str(shown)
    document = yaml.safe_load(shown.stdout)
    [workflow] = document["items"]
    status = workflow["status"]
    assert status["state"] == "Pending"
    assert sorted(status["actions"], key=lambda n: status["actions"][n]["index"]) == [
        "stream-ubuntu-image",
        "grow-partition",
        "add-cloud-init-config",
        "reboot",
    ]
    assert status["actions"]["grow-partition"]["rendered"]["env"]["BLOCK_DEVICE"] == "/dev/nvme0n1p1"
    assert "workflow.tinkerbell.org" in workflow["metadata"]["finalizers"]

    deleted = cli("delete", "workflow", "provision-machine1", "--wait", "--timeout", "60s")
    assert deleted.exit_code == 0, str(deleted)
    assert (
        "workflow/provision-machine1 Canceled: the workflow was deleted before it was scheduled"
        in deleted.stdout
    ), deleted.stdout
    gone = cli("get", "workflow", "provision-machine1")
    assert gone.exit_code != 0, str(gone)
    events = cli("get", "events", "-o", "json")
    assert "Canceled" in events.stdout


def test_apply_of_a_workflow_whose_template_fails_to_render_reports_it(cli: Cli, tmp_path: Path) -> None:
    workflow = tmp_path / "workflow.yaml"
    workflow.write_text((EXAMPLES / "workflow.yaml").read_text().replace("device_1:", "other:"))
    result = cli("apply", *files(*MANIFESTS[:3], str(workflow)), "--timeout", "60s")
    assert result.exit_code == 1, str(result)
    assert "RenderFailed: spec.actions[1].env" in result.stderr, result.stderr


def test_apply_of_a_workflow_naming_missing_hardware_stops_waiting_and_says_why(cli: Cli) -> None:
    result = cli("apply", *files(MANIFESTS[2], MANIFESTS[3]), "--timeout", "60s")
    assert result.exit_code == 1, str(result)
    assert "HardwareNotFound" in result.stderr
    assert "hardware default/machine1 (spec.hardwareRef) does not exist" in result.stderr
    assert result.seconds < 50, "blocked, not timed out"


# -- capa controller flags ------------------------------------------------------------------------------
def test_controller_help_documents_the_workflow_timeouts_and_their_defaults(cli: Cli) -> None:
    result = cli("controller", "--help")
    assert result.exit_code == 0, str(result)
    text = " ".join(result.stdout.split())
    for flag, default in (
        ("--workflow-scheduling-timeout", "5m"),
        ("--workflow-cancel-timeout", "5m"),
        ("--workflow-action-timeout", "1h"),
    ):
        assert flag in text
        assert f"[default: {default}]" in text.split(flag, 1)[1].split("--", 1)[0], flag


@pytest.mark.parametrize(
    "args",
    [
        ["--workflow-scheduling-timeout", "soon"],
        ["--workflow-cancel-timeout", "0"],
        ["--workflow-action-timeout", "-5s"],
    ],
)
def test_controller_refuses_bad_workflow_timeouts(cli: Cli, args: list[str], state: Path) -> None:
    result = cli("controller", "--aws-endpoint", "http://127.0.0.1:9", *args)
    assert result.exit_code == 2, str(result)
    assert args[0] in result.stderr
    assert not state.exists(), "invalid input never creates the store"


def test_workflow_timeouts_parse_durations() -> None:
    from capa_app.cli.controller_flags import workflow_timeouts

    timeouts = workflow_timeouts("90s", "2m", "1h30m")
    assert (timeouts.scheduling, timeouts.cancel, timeouts.action) == (90.0, 120.0, 5400.0)


def test_reapplying_a_workflow_that_failed_to_render_with_a_fixed_spec_prepares_it(
    cli: Cli, tmp_path: Path
) -> None:
    broken = tmp_path / "workflow.yaml"
    broken.write_text((EXAMPLES / "workflow.yaml").read_text().replace("device_1:", "other:"))
    failed = cli("apply", *files(*MANIFESTS[:3], str(broken)), "--timeout", "60s")
    assert failed.exit_code == 1, str(failed)
    fixed = cli("apply", "-f", MANIFESTS[3], "--timeout", "60s")
    assert fixed.exit_code == 0, str(fixed)
    status = yaml.safe_load(cli("get", "workflow", "provision-machine1", "-o", "yaml").stdout)["status"]
    assert status["state"] == "Pending"
    assert status.get("reason") is None
    assert len(status["actions"]) == 4
