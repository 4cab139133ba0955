"""Which Hardware a TinkerbellMachine may claim, and what the machine reports of the Hardware it holds.

A Hardware is free when it has no ``ownerName`` label and is not being deleted; a machine owns the
Hardware labelled with its name and namespace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from capa_py.api.cluster import MachineAddress
from capa_py.api.tinkerbell import Hardware
from capa_py.api.tinkerbell_capi import (
    HARDWARE_OWNER_NAME_LABEL,
    HARDWARE_OWNER_NAMESPACE_LABEL,
    PROVIDER_ID_SCHEME,
    HardwareAffinity,
    TinkerbellMachine,
)
from capa_py.store.errors import NotFound
from capa_py.store.helpers import retry_on_conflict
from capa_py.store.protocol import ObjectStore


def owned_by(hardware: Hardware, machine: TinkerbellMachine) -> bool:
    labels = hardware.metadata.labels
    return labels.get(HARDWARE_OWNER_NAME_LABEL) == machine.name and labels.get(
        HARDWARE_OWNER_NAMESPACE_LABEL
    ) == (machine.metadata.namespace or "")


def release(store: ObjectStore, hardware: Hardware, machine: TinkerbellMachine) -> None:
    """Take ``machine``'s ownership labels (and the user data it gave) off ``hardware``, if it still holds
    it (re-read on conflict); nothing when the Hardware is gone."""

    def unclaim(h: Hardware) -> None:
        if not owned_by(h, machine):
            return
        h.metadata.labels.pop(HARDWARE_OWNER_NAME_LABEL, None)
        h.metadata.labels.pop(HARDWARE_OWNER_NAMESPACE_LABEL, None)
        if h.spec.instance is not None:
            h.spec.instance.userdata = None

    with contextlib.suppress(NotFound):
        retry_on_conflict(store, hardware, unclaim)


def is_free(hardware: Hardware) -> bool:
    return HARDWARE_OWNER_NAME_LABEL not in hardware.metadata.labels and not hardware.being_deleted


def rank(candidates: Iterable[Hardware], affinity: HardwareAffinity | None) -> list[Hardware]:
    """The free Hardware ``affinity`` allows, best first: highest summed preferred weight, then name."""
    affinity = affinity or HardwareAffinity()
    allowed = [h for h in candidates if is_free(h) and affinity.qualifies(h.metadata.labels)]
    return sorted(allowed, key=lambda h: (-affinity.score(h.metadata.labels), h.name))


def hardware_addresses(hardware: Hardware) -> list[MachineAddress]:
    """InternalIP for every DHCP address and Hostname for every DHCP hostname, in MAC order."""
    found: list[MachineAddress] = []
    for _, interface in sorted(hardware.spec.network_interfaces.items()):
        if interface.dhcp is None:
            continue
        found.append(MachineAddress(type="InternalIP", address=interface.dhcp.ip))
        if interface.dhcp.hostname:
            found.append(MachineAddress(type="Hostname", address=interface.dhcp.hostname))
    unique: dict[tuple[str, str], MachineAddress] = {(a.type, a.address): a for a in found}
    return list(unique.values())


def provider_id(namespace: str, hardware: str) -> str:
    return f"{PROVIDER_ID_SCHEME}://{namespace}/{hardware}"
