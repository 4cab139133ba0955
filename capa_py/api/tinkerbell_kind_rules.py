"""The rules of the Tinkerbell kinds' specs (Hardware, OSIE, Template, Workflow) and of their references,
each returning FieldIssues at wire paths; the values themselves are checked by
:mod:`capa_py.api.tinkerbell_values`."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import TYPE_CHECKING

from capa_py.api.meta import FieldIssue, validate_dns_subdomain
from capa_py.api.tinkerbell_values import (
    INT32_MAX,
    MAC_FORMS_HELP,
    VLAN_ID_MAX,
    device_path_issue,
    env_name_issue,
    hostname_issue,
    http_url_issue,
    ipv4_issue,
    ipv4_or_hostname_issue,
    is_templated,
    netmask_issue,
    netmask_prefix,
    normalise_mac,
    template_data_issues,
    volume_issue,
    wire_key,
)

if TYPE_CHECKING:
    from capa_py.api.tinkerbell import (
        DHCP,
        EnvVarSource,
        HardwareSpec,
        LocalObjectReference,
        OSIESpec,
        TemplateSpec,
        WorkflowSpec,
    )


def _issue(path: str, message: str) -> FieldIssue:
    return FieldIssue(path=path, message=message)


def _set(value: str | None) -> bool:
    """Optional strings: empty means unset, as Go's ``omitempty`` treats it."""
    return bool(value)


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def reference_issues(path: str, ref: LocalObjectReference | None) -> list[FieldIssue]:
    """A reference's name is an object name (a DNS subdomain), its namespace, when set, a DNS label."""
    if ref is None:
        return []
    issues: list[FieldIssue] = []
    if not ref.name:
        issues.append(_issue(f"{path}.name", "required"))
    else:
        try:
            validate_dns_subdomain(ref.name)
        except ValueError as exc:
            issues.append(_issue(f"{path}.name", f"{ref.name!r} {exc}"))
    if ref.namespace and not _DNS_LABEL.match(ref.namespace):
        issues.append(
            _issue(f"{path}.namespace", f"{ref.namespace!r} is not a namespace name (an RFC 1123 label)")
        )
    return issues


def _dhcp_issues(path: str, dhcp: DHCP) -> tuple[list[FieldIssue], str | None]:
    """The DHCP block's issues, and its IP when that is a valid address (for the duplicate check)."""
    issues: list[FieldIssue] = []
    ip_problem = ipv4_issue(dhcp.ip)
    if ip_problem:
        issues.append(_issue(f"{path}.ip", ip_problem))
    prefix = netmask_prefix(dhcp.netmask)
    if prefix is None:
        issues.append(_issue(f"{path}.netmask", netmask_issue(dhcp.netmask) or ""))
    network = None
    if not ip_problem and prefix is not None:
        network = ipaddress.IPv4Network(f"{dhcp.ip}/{prefix}", strict=False)
        address = ipaddress.IPv4Address(dhcp.ip)
        if prefix <= 30 and address in (network.network_address, network.broadcast_address):
            which = "network" if address == network.network_address else "broadcast"
            issues.append(_issue(f"{path}.ip", f"{dhcp.ip} is the {which} address of {network}"))
    if _set(dhcp.gateway):
        gateway = str(dhcp.gateway)
        problem = ipv4_issue(gateway)
        if problem:
            issues.append(_issue(f"{path}.gateway", problem))
        elif network is not None:
            if ipaddress.IPv4Address(gateway) not in network:
                issues.append(
                    _issue(f"{path}.gateway", f"{gateway} is outside {network} (the network of ip/netmask)")
                )
            elif gateway == dhcp.ip:
                issues.append(_issue(f"{path}.gateway", f"{gateway} is the interface's own ip"))
    if _set(dhcp.hostname) and (problem := hostname_issue(str(dhcp.hostname))):
        issues.append(_issue(f"{path}.hostname", problem))
    if dhcp.vlan_id is not None and not 0 <= dhcp.vlan_id <= VLAN_ID_MAX:
        issues.append(_issue(f"{path}.vlanId", f"{dhcp.vlan_id} is not a VLAN id (0 to {VLAN_ID_MAX})"))
    for index, server in enumerate(dhcp.nameservers):
        if problem := ipv4_issue(server):
            issues.append(_issue(f"{path}.nameservers[{index}]", problem))
    for index, server in enumerate(dhcp.timeservers):
        if problem := ipv4_or_hostname_issue(server):
            issues.append(_issue(f"{path}.timeservers[{index}]", problem))
    if dhcp.lease_time is not None and not 0 <= dhcp.lease_time <= INT32_MAX:
        issues.append(_issue(f"{path}.leaseTime", f"{dhcp.lease_time} is not 0 to {INT32_MAX} seconds"))
    return issues, None if ip_problem else dhcp.ip


def hardware_issues(spec: HardwareSpec) -> list[FieldIssue]:
    base = "spec.networkInterfaces"
    issues: list[FieldIssue] = []
    if not spec.network_interfaces:
        issues.append(_issue(base, "at least one network interface is required"))
    macs: dict[str, str] = {}
    ips: dict[str, str] = {}
    for key, interface in spec.network_interfaces.items():
        path = f"{base}{wire_key(key)}"
        mac = normalise_mac(key)
        if mac is None:
            issues.append(_issue(path, f"not a MAC address (expected {MAC_FORMS_HELP})"))
        elif mac in macs:
            issues.append(_issue(path, f"the same MAC address as {json.dumps(macs[mac])}"))
        else:
            macs[mac] = key
        if interface.dhcp is None:
            if not interface.disable_dhcp:
                issues.append(_issue(f"{path}.dhcp", "required unless disableDhcp is true"))
            continue
        found, ip = _dhcp_issues(f"{path}.dhcp", interface.dhcp)
        issues += found
        if ip is not None:
            if ip in ips:
                issues.append(_issue(f"{path}.dhcp.ip", f"{ip} is also the ip of {base}{ips[ip]}"))
            else:
                ips[ip] = wire_key(key)
    if spec.ipxe is not None:
        given = [name for name in ("inline", "url") if _set(getattr(spec.ipxe, name))]
        if len(given) != 1:
            issues.append(_issue("spec.ipxe", f"exactly one of inline or url is required (got {len(given)})"))
        if _set(spec.ipxe.url) and (problem := http_url_issue(str(spec.ipxe.url))):
            issues.append(_issue("spec.ipxe.url", problem))
    if spec.osie is not None:
        issues += reference_issues("spec.osie.osieRef", spec.osie.osie_ref)
    issues += reference_issues("spec.bmcRef", spec.bmc_ref)
    issues += reference_issues("spec.agentCredentialsRef", spec.agent_credentials_ref)
    devices: dict[str, int] = {}
    for index, device in enumerate(spec.storage_devices):
        path = f"spec.storageDevices[{index}]"
        if problem := device_path_issue(device):
            issues.append(_issue(path, problem))
        elif device in devices:
            issues.append(_issue(path, f"{device} is also spec.storageDevices[{devices[device]}]"))
        else:
            devices[device] = index
    return issues


def osie_issues(spec: OSIESpec) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    for name, value in (("kernelUrl", spec.kernel_url), ("initrdUrl", spec.initrd_url)):
        if problem := http_url_issue(value):
            issues.append(_issue(f"spec.{name}", problem))
    return issues


def _env_issues(path: str, env: dict[str, str]) -> list[FieldIssue]:
    return [
        _issue(f"{path}{wire_key(name)}", problem)
        for name in env
        if not is_templated(name) and (problem := env_name_issue(name))
    ]


def _env_value_from_issues(path: str, sources: dict[str, EnvVarSource]) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    for name, source in sources.items():
        at = f"{path}{wire_key(name)}"
        if problem := env_name_issue(name):
            issues.append(_issue(at, problem))
        ref = source.secret_key_ref
        if not ref.name:
            issues.append(_issue(f"{at}.secretKeyRef.name", "required"))
        else:
            try:
                validate_dns_subdomain(ref.name)
            except ValueError as exc:
                issues.append(_issue(f"{at}.secretKeyRef.name", f"{ref.name!r} {exc}"))
        if not ref.key:
            issues.append(_issue(f"{at}.secretKeyRef.key", "required"))
    return issues


def _volume_issues(path: str, volumes: list[str]) -> list[FieldIssue]:
    return [
        _issue(f"{path}[{index}]", problem)
        for index, volume in enumerate(volumes)
        if not is_templated(volume) and (problem := volume_issue(volume))
    ]


def template_issues(spec: TemplateSpec) -> list[FieldIssue]:
    """Strings holding ``{{`` are Go templates: their form (an environment name, a volume) is checked after
    the workflow controller renders them, not here. Action names are compared as written."""
    issues: list[FieldIssue] = []
    if not spec.actions:
        issues.append(_issue("spec.actions", "at least one action is required"))
    names: dict[str, int] = {}
    for index, action in enumerate(spec.actions):
        path = f"spec.actions[{index}]"
        if not action.name:
            issues.append(_issue(f"{path}.name", "required"))
        elif action.name in names:
            other = f"spec.actions[{names[action.name]}]"
            issues.append(_issue(f"{path}.name", f"{action.name!r} is also the name of {other}"))
        else:
            names[action.name] = index
        if not action.image.strip():
            issues.append(_issue(f"{path}.image", "required"))
        issues += _env_issues(f"{path}.env", action.env)
        issues += _env_value_from_issues(f"{path}.envValueFrom", action.env_value_from)
        issues += _volume_issues(f"{path}.volumes", action.volumes)
        if action.timeout is not None and not 0 <= action.timeout <= INT32_MAX:
            issues.append(_issue(f"{path}.timeout", f"{action.timeout} is not 0 to {INT32_MAX} seconds"))
    issues += _env_issues("spec.env", spec.env)
    issues += _env_value_from_issues("spec.envValueFrom", spec.env_value_from)
    issues += _volume_issues("spec.volumes", spec.volumes)
    return issues


def workflow_issues(spec: WorkflowSpec) -> list[FieldIssue]:
    issues = reference_issues("spec.hardwareRef", spec.hardware_ref)
    issues += reference_issues("spec.templateRef", spec.template_ref)
    if not 0 <= spec.timeout <= INT32_MAX:
        issues.append(_issue("spec.timeout", f"{spec.timeout} is not 0 to {INT32_MAX} seconds"))
    data = template_data_issues(spec.template_data, "spec.templateData")
    issues += [_issue(path, problem) for path, problem in data]
    return issues
