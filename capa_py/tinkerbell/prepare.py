"""Preparing a Workflow: the data its Template renders with, and the rendered actions it runs.

The rendering data is the Workflow's ``spec.templateData`` at the top level (``{{ .device_1 }}``, as
upstream's hardware map gives it) plus ``.Hardware``, a map of what the Hardware tells a template:

* ``Disks``: ``spec.storageDevices`` in order (``{{ index .Hardware.Disks 0 }}``);
* ``Interfaces``: one map per ``spec.networkInterfaces`` entry, in MAC order, with the keys ``MAC``,
  ``IP``, ``Netmask``, ``Gateway``, ``Hostname``, ``VLANID``, ``Nameservers``, ``Timeservers``,
  ``LeaseTime``, ``DisableDHCP`` and ``DisableNetboot``; a field the Hardware leaves unset is its Go zero
  value (``""``, ``0``, an empty list), so a template may read any key of any interface;
* ``UserData`` and ``VendorData``: ``spec.instance.userdata`` / ``vendordata`` (``""`` when unset).

Every string of every action (name, image, command, args, env values, volumes, networkNamespace) and the
template's env values and volumes is rendered on its own, and a failure is reported with the field's path
before Go's message (``spec.actions[1].args[0]: template: ...``). The rendered action is exactly what runs:
the template's env under the action's (the action's value wins), the template's volumes then the action's
(an action volume mounting the same container directory replaces the template's). Rendered action names
must be unique and rendered volumes well formed; anything else is a :class:`RenderFailed`.

``envValueFrom`` entries (a Secret's key, read when the workflow is sent to its agent) are not rendered:
the rendered action keeps the reference, so the Workflow's status never holds a Secret's value. A name
given both ways at one level takes the Secret's value; the action's level wins over the template's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capa_py.api.tinkerbell import RENDER_FAILED, Action, EnvVarSource, Hardware, Template

HARDWARE_KEY = "Hardware"


class RenderFailed(Exception):
    """A template (with this data) does not render to a runnable set of actions; ``str()`` is the message
    a user sees: the field's path, then what is wrong with it."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}")


def interface_data(mac: str, hardware: Hardware) -> dict[str, Any]:
    """One ``.Hardware.Interfaces`` entry (see the module docstring for its keys)."""
    interface = hardware.spec.network_interfaces[mac]
    dhcp = interface.dhcp
    return {
        "MAC": mac,
        "IP": dhcp.ip if dhcp else "",
        "Netmask": dhcp.netmask if dhcp else "",
        "Gateway": (dhcp.gateway or "") if dhcp else "",
        "Hostname": (dhcp.hostname or "") if dhcp else "",
        "VLANID": (dhcp.vlan_id or 0) if dhcp else 0,
        "Nameservers": list(dhcp.nameservers) if dhcp else [],
        "Timeservers": list(dhcp.timeservers) if dhcp else [],
        "LeaseTime": (dhcp.lease_time or 0) if dhcp else 0,
        "DisableDHCP": interface.disable_dhcp,
        "DisableNetboot": interface.disable_netboot,
    }


def hardware_data(hardware: Hardware) -> dict[str, Any]:
    """``.Hardware``: what a template may read of the machine it runs on."""
    instance = hardware.spec.instance
    return {
        "Disks": list(hardware.spec.storage_devices),
        "Interfaces": [interface_data(mac, hardware) for mac in sorted(hardware.spec.network_interfaces)],
        "UserData": (instance.userdata or "") if instance else "",
        "VendorData": (instance.vendordata or "") if instance else "",
    }


def rendering_data(template_data: Mapping[str, Any], hardware: Hardware) -> dict[str, Any]:
    """The data a Workflow's template renders with; ``templateData`` may not shadow ``Hardware``."""
    if HARDWARE_KEY in template_data:
        raise RenderFailed(
            f"spec.templateData.{HARDWARE_KEY}",
            f"the key {HARDWARE_KEY!r} is reserved for the Hardware's data",
        )
    return {**template_data, HARDWARE_KEY: hardware_data(hardware)}


@dataclass(frozen=True)
class Volume:
    """A volume in the ``{SRC-VOLUME-NAME | SRC-HOST-DIR}:TGT-CONTAINER-DIR[:OPTIONS]`` form."""

    source: str
    target: str
    options: str | None


def parse_volume(text: str) -> Volume:
    """ValueError (saying what is wrong) unless ``text`` is a well-formed volume."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(
            f"volume {text!r} is not of the form "
            "{SRC-VOLUME-NAME | SRC-HOST-DIR}:TGT-CONTAINER-DIR[:OPTIONS]"
        )
    source, target = parts[0], parts[1]
    if not source:
        raise ValueError(f"volume {text!r} has no source volume name or host directory")
    if not target.startswith("/"):
        raise ValueError(f"volume {text!r}: the container directory must be an absolute path")
    options = parts[2] if len(parts) == 3 else None
    if options is not None and not options:
        raise ValueError(f"volume {text!r} has an empty options part")
    return Volume(source, target, options)


def _render(text: str, data: Mapping[str, Any], field: str) -> str:
    from capa_py.tinkerbell import TemplateError, render_text

    try:
        # Each field is its own template, named by its path, so Go's message points into it.
        return render_text(text, data, name=field)
    except TemplateError as exc:
        raise RenderFailed(field, str(exc)) from exc


def _render_volumes(volumes: list[str], data: Mapping[str, Any], field: str) -> list[tuple[str, Volume]]:
    rendered: list[tuple[str, Volume]] = []
    for i, volume in enumerate(volumes):
        path = f"{field}[{i}]"
        text = _render(volume, data, path)
        try:
            rendered.append((text, parse_volume(text)))
        except ValueError as exc:
            raise RenderFailed(path, str(exc)) from exc
    return rendered


def merge_volumes(
    template_volumes: list[tuple[str, Volume]], action_volumes: list[tuple[str, Volume]]
) -> list[str]:
    """The template's volumes, less those whose container directory the action mounts, then the action's."""
    targets = {volume.target for _, volume in action_volumes}
    kept = [text for text, volume in template_volumes if volume.target not in targets]
    return kept + [text for text, _ in action_volumes]


def render_action(
    action: Action,
    index: int,
    data: Mapping[str, Any],
    template_env: Mapping[str, str],
    template_volumes: list[tuple[str, Volume]],
    template_value_from: Mapping[str, EnvVarSource] | None = None,
) -> Action:
    """One action rendered and merged with the template-level env and volumes: what the agent runs."""
    field = f"spec.actions[{index}]"
    name = _render(action.name, data, f"{field}.name")
    if not name:
        raise RenderFailed(f"{field}.name", "renders to an empty name")
    image = _render(action.image, data, f"{field}.image")
    if not image:
        raise RenderFailed(f"{field}.image", "renders to an empty image")
    env = {key: _render(value, data, f"{field}.env.{key}") for key, value in action.env.items()}
    volumes = _render_volumes(action.volumes, data, f"{field}.volumes")
    merged: dict[str, str | EnvVarSource] = {
        **template_env,
        **(template_value_from or {}),
        **env,
        **action.env_value_from,
    }
    return Action(
        name=name,
        image=image,
        command=None if action.command is None else _render(action.command, data, f"{field}.command"),
        args=[_render(arg, data, f"{field}.args[{i}]") for i, arg in enumerate(action.args)],
        env={key: value for key, value in merged.items() if isinstance(value, str)},
        env_value_from={key: value for key, value in merged.items() if isinstance(value, EnvVarSource)},
        volumes=merge_volumes(template_volumes, volumes),
        network_namespace=(
            None
            if action.network_namespace is None
            else _render(action.network_namespace, data, f"{field}.networkNamespace")
        ),
        timeout=action.timeout,
    )


def render_template(template: Template, data: Mapping[str, Any]) -> list[Action]:
    """Every action of ``template`` rendered with ``data``, in order (RenderFailed naming the field)."""
    spec = template.spec
    if not spec.actions:
        raise RenderFailed("spec.actions", "the template has no actions")
    env = {key: _render(value, data, f"spec.env.{key}") for key, value in spec.env.items()}
    volumes = _render_volumes(spec.volumes, data, "spec.volumes")
    rendered: list[Action] = []
    seen: dict[str, int] = {}
    for index, action in enumerate(spec.actions):
        result = render_action(action, index, data, env, volumes, spec.env_value_from)
        if result.name in seen:
            raise RenderFailed(
                f"spec.actions[{index}].name",
                f"renders to {result.name!r}, the name spec.actions[{seen[result.name]}] renders to "
                "(action names must be unique)",
            )
        seen[result.name] = index
        rendered.append(result)
    return rendered


def render_workflow_actions(
    template: Template, hardware: Hardware, template_data: Mapping[str, Any]
) -> list[Action]:
    """The actions a Workflow with ``template_data`` runs on ``hardware``."""
    return render_template(template, rendering_data(template_data, hardware))


__all__ = [
    "HARDWARE_KEY",
    "RENDER_FAILED",
    "RenderFailed",
    "Volume",
    "hardware_data",
    "interface_data",
    "merge_volumes",
    "parse_volume",
    "render_action",
    "render_template",
    "render_workflow_actions",
    "rendering_data",
]
