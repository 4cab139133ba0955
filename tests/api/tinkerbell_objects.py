"""Valid Tinkerbell objects in wire form, and a helper that changes one field of a copy."""

from __future__ import annotations

import copy
from typing import Any

from capa_py.api.tinkerbell import TINKERBELL_API_VERSION

MAC = "aa:bb:cc:dd:ee:ff"

HARDWARE: dict[str, Any] = {
    "apiVersion": TINKERBELL_API_VERSION,
    "kind": "Hardware",
    "metadata": {"name": "node-1", "namespace": "default"},
    "spec": {
        "networkInterfaces": {
            MAC: {
                "dhcp": {
                    "ip": "10.0.0.10",
                    "netmask": "255.255.255.0",
                    "gateway": "10.0.0.1",
                    "hostname": "node-1",
                    "vlanId": 0,
                    "nameservers": ["1.1.1.1"],
                    "timeservers": ["pool.ntp.org", "10.0.0.1"],
                    "leaseTime": 86400,
                }
            }
        },
        "osie": {"osieRef": {"name": "hook"}, "kernelParams": ["console=ttyS0"]},
        "instance": {"userdata": "#cloud-config\npassword: s3cret\n"},
        "storageDevices": ["/dev/sda", "/dev/nvme0n1"],
        "bmcRef": {"name": "node-1-bmc"},
    },
}

OSIE: dict[str, Any] = {
    "apiVersion": TINKERBELL_API_VERSION,
    "kind": "OSIE",
    "metadata": {"name": "hook", "namespace": "default"},
    "spec": {
        "kernelUrl": "https://boot.example.com/vmlinuz-x86_64",
        "initrdUrl": "https://boot.example.com/initramfs-x86_64",
    },
}

TEMPLATE: dict[str, Any] = {
    "apiVersion": TINKERBELL_API_VERSION,
    "kind": "Template",
    "metadata": {"name": "ubuntu", "namespace": "default"},
    "spec": {
        "actions": [
            {
                "name": "stream-image",
                "image": "quay.io/tinkerbell/actions/image2disk:latest",
                "env": {"DEST_DISK": "{{ index .Hardware.Disks 0 }}", "IMG_URL": "{{ .image_url }}"},
                "volumes": ["/etc/data:/data:ro", "shared_volume:/shared"],
                "timeout": 600,
            },
            {
                "name": "reboot",
                "image": "ghcr.io/jacobweinstock/waitdaemon:latest",
                "command": "reboot",
                "args": ["now"],
                "networkNamespace": "host",
            },
        ],
        "volumes": ["/dev:/dev", "/lib/firmware:/lib/firmware:ro"],
        "env": {"HTTPS_PROXY": "http://proxy:3128"},
    },
}

WORKFLOW: dict[str, Any] = {
    "apiVersion": TINKERBELL_API_VERSION,
    "kind": "Workflow",
    "metadata": {"name": "provision-node-1", "namespace": "default"},
    "spec": {
        "hardwareRef": {"name": "node-1"},
        "templateRef": {"name": "ubuntu"},
        "templateData": {"image_url": "http://images/ubuntu.raw.gz", "disks": [{"size": 100}]},
        "timeout": 3600,
    },
}

DELETE = object()


def changed(base: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A copy of ``base`` with the field at ``path`` (keys and list indexes) set to ``value``, or removed
    when ``value`` is :data:`DELETE`."""
    doc = copy.deepcopy(base)
    *parents, last = path
    node: Any = doc
    for part in parents:
        node = node[part] if isinstance(part, int) or part in node else node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return doc


def interface(**dhcp: Any) -> dict[str, Any]:
    """The base Hardware's interface with some DHCP fields replaced."""
    return {"dhcp": {**HARDWARE["spec"]["networkInterfaces"][MAC]["dhcp"], **dhcp}}
