"""Preparing a Workflow (capa_py.tinkerbell.prepare): the data a template sees, every field rendered with
its own name in errors, and the template-level env and volumes merged into what runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from capa_py.api.loader import load_manifests
from capa_py.api.meta import ObjectMeta
from capa_py.api.tinkerbell import (
    DHCP,
    Action,
    Hardware,
    HardwareSpec,
    Instance,
    NetworkInterface,
    Template,
    TemplateSpec,
)
from capa_py.tinkerbell import render_text
from capa_py.tinkerbell.prepare import (
    RenderFailed,
    hardware_data,
    parse_volume,
    render_workflow_actions,
    rendering_data,
)
from tests.tinkerbell.go_oracle import GoRenderer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tinkerbell"


def hardware() -> Hardware:
    return Hardware(
        metadata=ObjectMeta(name="hw", namespace="default"),
        spec=HardwareSpec(
            network_interfaces={
                "bb:00:00:00:00:02": NetworkInterface(disable_dhcp=True, disable_netboot=True),
                "aa:00:00:00:00:01": NetworkInterface(
                    dhcp=DHCP(
                        ip="10.0.0.5",
                        netmask="255.255.255.0",
                        gateway="10.0.0.1",
                        hostname="m1",
                        vlan_id=12,
                        nameservers=["1.1.1.1"],
                        timeservers=["pool.ntp.org"],
                        lease_time=3600,
                    )
                ),
            },
            storage_devices=["/dev/nvme0n1", "/dev/sda"],
            instance=Instance(userdata="#cloud-config", vendordata=None),
        ),
    )


def template(
    *actions: Action, env: dict[str, str] | None = None, volumes: list[str] | None = None
) -> Template:
    return Template(
        metadata=ObjectMeta(name="tpl", namespace="default"),
        spec=TemplateSpec(actions=list(actions), env=env or {}, volumes=volumes or []),
    )


def test_the_hardware_data_has_disks_in_order_and_interfaces_in_mac_order_with_zero_values() -> None:
    data = hardware_data(hardware())
    assert data["Disks"] == ["/dev/nvme0n1", "/dev/sda"]
    assert [i["MAC"] for i in data["Interfaces"]] == ["aa:00:00:00:00:01", "bb:00:00:00:00:02"]
    first, second = data["Interfaces"]
    assert first == {
        "MAC": "aa:00:00:00:00:01",
        "IP": "10.0.0.5",
        "Netmask": "255.255.255.0",
        "Gateway": "10.0.0.1",
        "Hostname": "m1",
        "VLANID": 12,
        "Nameservers": ["1.1.1.1"],
        "Timeservers": ["pool.ntp.org"],
        "LeaseTime": 3600,
        "DisableDHCP": False,
        "DisableNetboot": False,
    }
    assert second["IP"] == ""
    assert second["VLANID"] == 0
    assert second["Nameservers"] == []
    assert second["DisableDHCP"] is True
    assert (data["UserData"], data["VendorData"]) == ("#cloud-config", "")


def test_template_data_sits_at_the_top_level_beside_the_hardware() -> None:
    data = rendering_data({"device_1": "/dev/sda", "n": 3}, hardware())
    assert data["device_1"] == "/dev/sda"
    assert data["n"] == 3
    assert data["Hardware"]["Disks"][0] == "/dev/nvme0n1"


def test_template_data_may_not_be_named_hardware() -> None:
    with pytest.raises(RenderFailed) as caught:
        rendering_data({"Hardware": {}}, hardware())
    assert caught.value.field == "spec.templateData.Hardware"


def test_every_string_field_of_an_action_is_rendered() -> None:
    action = Action(
        name="write-{{ .device_1 }}",
        image="quay.io/{{ .org }}/image2disk",
        command="{{ .cmd }}",
        args=["{{ index .Hardware.Disks 0 }}", "plain"],
        env={"PART": "{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"},
        volumes=["{{ .vol }}:/data:ro"],
        network_namespace="{{ .ns }}",
        timeout=60,
    )
    data = {"device_1": "sda", "org": "tinkerbell", "cmd": "run", "vol": "shared", "ns": "host"}
    [rendered] = render_workflow_actions(template(action), hardware(), data)
    assert rendered == Action(
        name="write-sda",
        image="quay.io/tinkerbell/image2disk",
        command="run",
        args=["/dev/nvme0n1", "plain"],
        env={"PART": "/dev/nvme0n1p1"},
        volumes=["shared:/data:ro"],
        network_namespace="host",
        timeout=60,
    )


@pytest.mark.parametrize(
    ("action", "field"),
    [
        (Action(name="{{ .missing }}", image="i"), "spec.actions[1].name"),
        (Action(name="n", image="{{ .missing }}"), "spec.actions[1].image"),
        (Action(name="n", image="i", command="{{ .missing }}"), "spec.actions[1].command"),
        (Action(name="n", image="i", args=["ok", "{{ .missing }}"]), "spec.actions[1].args[1]"),
        (Action(name="n", image="i", env={"K": "{{ .missing }}"}), "spec.actions[1].env.K"),
        (Action(name="n", image="i", volumes=["{{ .missing }}:/x"]), "spec.actions[1].volumes[0]"),
        (Action(name="n", image="i", network_namespace="{{ .missing }}"), "spec.actions[1].networkNamespace"),
    ],
    ids=["name", "image", "command", "args", "env", "volumes", "networkNamespace"],
)
def test_a_render_error_names_the_field_before_the_template_error(action: Action, field: str) -> None:
    with pytest.raises(RenderFailed) as caught:
        render_workflow_actions(template(Action(name="first", image="i"), action), hardware(), {})
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: template: "), str(caught.value)
    assert "missing" in str(caught.value)


def test_template_level_env_and_volumes_errors_name_their_fields() -> None:
    with pytest.raises(RenderFailed) as caught:
        render_workflow_actions(
            template(Action(name="a", image="i"), env={"X": "{{ .nope }}"}), hardware(), {}
        )
    assert caught.value.field == "spec.env.X"
    with pytest.raises(RenderFailed) as caught:
        render_workflow_actions(
            template(Action(name="a", image="i"), volumes=["{{ .nope }}:/x"]), hardware(), {}
        )
    assert caught.value.field == "spec.volumes[0]"


def test_the_action_env_wins_over_the_template_env() -> None:
    tpl = template(
        Action(name="a", image="i", env={"SHARED": "action", "OWN": "mine"}),
        Action(name="b", image="i"),
        env={"SHARED": "template", "DISK": "{{ index .Hardware.Disks 1 }}"},
    )
    a, b = render_workflow_actions(tpl, hardware(), {})
    assert a.env == {"SHARED": "action", "DISK": "/dev/sda", "OWN": "mine"}
    assert b.env == {"SHARED": "template", "DISK": "/dev/sda"}


def test_an_action_volume_replaces_the_template_volume_with_the_same_container_dir() -> None:
    tpl = template(
        Action(name="a", image="i", volumes=["/host/dev:/dev:ro", "scratch:/scratch"]),
        Action(name="b", image="i"),
        volumes=["/dev:/dev", "/etc/data:/data:ro"],
    )
    a, b = render_workflow_actions(tpl, hardware(), {})
    assert a.volumes == ["/etc/data:/data:ro", "/host/dev:/dev:ro", "scratch:/scratch"]
    assert b.volumes == ["/dev:/dev", "/etc/data:/data:ro"]


def test_rendered_names_must_be_unique() -> None:
    tpl = template(Action(name="{{ .x }}", image="i"), Action(name="same", image="i"))
    with pytest.raises(RenderFailed) as caught:
        render_workflow_actions(tpl, hardware(), {"x": "same"})
    assert caught.value.field == "spec.actions[1].name"
    assert "spec.actions[0]" in str(caught.value)


@pytest.mark.parametrize("text", ["nocolon", "a:b:c:d", ":/data", "vol:relative", "vol:/data:"])
def test_a_rendered_volume_must_be_well_formed(text: str) -> None:
    with pytest.raises(ValueError, match="volume"):
        parse_volume(text)
    tpl = template(Action(name="a", image="i", volumes=["{{ .v }}"]))
    with pytest.raises(RenderFailed) as caught:
        render_workflow_actions(tpl, hardware(), {"v": text})
    assert caught.value.field == "spec.actions[0].volumes[0]"


@pytest.mark.parametrize("text", ["/etc/data:/data:ro", "shared_volume:/data", "/dev:/dev"])
def test_well_formed_volumes_parse(text: str) -> None:
    volume = parse_volume(text)
    assert volume.target.startswith("/")


def test_a_template_without_actions_does_not_render() -> None:
    with pytest.raises(RenderFailed) as caught:
        render_workflow_actions(template(), hardware(), {})
    assert caught.value.field == "spec.actions"


def test_the_example_template_renders_for_the_example_hardware() -> None:
    objects = {o.KIND: o for o in load_manifests(sorted(EXAMPLES.glob("*.yaml")))}
    workflow = objects["Workflow"]
    actions = render_workflow_actions(
        objects["Template"],  # type: ignore[arg-type]
        objects["Hardware"],  # type: ignore[arg-type]
        workflow.spec.template_data,  # type: ignore[attr-defined]
    )
    assert [a.name for a in actions] == [
        "stream-ubuntu-image",
        "grow-partition",
        "add-cloud-init-config",
        "reboot",
    ]
    stream, grow, cloud_init, reboot = actions
    assert stream.env["DEST_DISK"] == "/dev/nvme0n1", "the template-level env, rendered"
    assert stream.volumes == ["/dev:/dev"]
    assert grow.env["BLOCK_DEVICE"] == "/dev/nvme0n1p1"
    assert grow.env["CMD_LINE"] == "growpart /dev/nvme0n1 1 && resize2fs /dev/nvme0n1p1"
    assert cloud_init.env["DEST_DISK"] == "/dev/nvme0n1p1", "the action's env wins"
    assert reboot.volumes == ["/dev:/dev", "/var/run/docker.sock:/var/run/docker.sock"]


def _fields(tpl: Template) -> list[tuple[str, str]]:
    """Every templated string of a Template, by its path."""
    found = [(f"spec.env.{k}", v) for k, v in tpl.spec.env.items()]
    found += [(f"spec.volumes[{i}]", v) for i, v in enumerate(tpl.spec.volumes)]
    for i, action in enumerate(tpl.spec.actions):
        field = f"spec.actions[{i}]"
        found += [(f"{field}.name", action.name), (f"{field}.image", action.image)]
        if action.command is not None:
            found.append((f"{field}.command", action.command))
        found += [(f"{field}.args[{j}]", a) for j, a in enumerate(action.args)]
        found += [(f"{field}.env.{k}", v) for k, v in action.env.items()]
        found += [(f"{field}.volumes[{j}]", v) for j, v in enumerate(action.volumes)]
        if action.network_namespace is not None:
            found.append((f"{field}.networkNamespace", action.network_namespace))
    return found


def test_the_example_renders_field_by_field_as_go_does(go_renderer: GoRenderer) -> None:
    objects = {o.KIND: o for o in load_manifests(sorted(EXAMPLES.glob("*.yaml")))}
    tpl, hw = objects["Template"], objects["Hardware"]
    assert isinstance(tpl, Template)
    assert isinstance(hw, Hardware)
    data = rendering_data(objects["Workflow"].spec.template_data, hw)  # type: ignore[attr-defined]
    for field, text in _fields(tpl):
        go = go_renderer.render(text, data, name=field)
        assert go.error is None, f"{field}: Go failed: {go.error}"
        assert go.output is not None
        assert render_text(text, data, name=field) == go.output.decode(), field
    # And where it fails, it fails with Go's message after the field's path.
    without = {k: v for k, v in data.items() if k != "device_1"}
    go = go_renderer.render(tpl.spec.actions[1].env["CMD_LINE"], without, name="spec.actions[1].env.CMD_LINE")
    with pytest.raises(RenderFailed) as caught:
        render_workflow_actions(tpl, hw, {})
    assert str(caught.value) == f"spec.actions[1].env.CMD_LINE: {go.error}"
