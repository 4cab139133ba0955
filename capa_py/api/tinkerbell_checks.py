"""The value rules of the Tinkerbell kinds: MAC addresses, IPv4 addresses and masks, hostnames, URLs, device
paths, environment names, Docker volume specifications and template data.

Each check takes one value and returns ``None`` when it is valid, or a short message saying what is wrong
(never echoing free text such as userdata); the kinds in :mod:`capa_py.api.tinkerbell` put the field's wire
path in front of it. Nothing here raises on any string, so a parser fed arbitrary input either accepts it or
names the problem.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import HttpUrl, TypeAdapter, ValidationError

from capa_py.api.meta import FieldIssue, validate_dns_subdomain

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

INT32_MAX = 2**31 - 1
VLAN_ID_MAX = 4094
TEMPLATE_DATA_MAX_DEPTH = 32
"""How deeply ``templateData`` may nest maps and lists: deeper data is a mistake, not a template's input."""

_HEX2 = "[0-9A-Fa-f]{2}"
_HEX4 = "[0-9A-Fa-f]{4}"
_MAC_FORMS = (
    re.compile(rf"^{_HEX2}(:{_HEX2}){{5}}$"),
    re.compile(rf"^{_HEX2}(-{_HEX2}){{5}}$"),
    re.compile(rf"^{_HEX4}(\.{_HEX4}){{2}}$"),
)
MAC_FORMS_HELP = "six hex pairs separated by ':' or '-', or three groups of four hex digits separated by '.'"


def normalise_mac(text: str) -> str | None:
    """A MAC address in colon, dash or dot notation, any case, as lowercase colon form; ``None`` when the
    text is none of those notations."""
    if not any(form.match(text) for form in _MAC_FORMS):
        return None
    digits = re.sub(r"[:.-]", "", text).lower()
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def wire_key(key: str) -> str:
    """A map key as an error path shows it: ``["aa:bb:cc:dd:ee:ff"]``."""
    return f"[{json.dumps(key)}]"


def ipv4_issue(text: str) -> str | None:
    """Dotted-quad IPv4 only (no leading zeros, no IPv6, no CIDR suffix)."""
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return f"not an IPv4 address: {text!r}"
    return None


def netmask_prefix(text: str) -> int | None:
    """The prefix length of a dotted, contiguous IPv4 netmask (``255.255.255.0`` → 24), else ``None``."""
    try:
        value = int(ipaddress.IPv4Address(text))
    except ValueError:
        return None
    host_bits = ~value & 0xFFFFFFFF
    if host_bits & (host_bits + 1):  # the host part is not a run of ones from the right
        return None
    return 32 - host_bits.bit_length()


def netmask_issue(text: str) -> str | None:
    if netmask_prefix(text) is None:
        return f"not a contiguous IPv4 netmask in dotted form (such as 255.255.255.0): {text!r}"
    return None


_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def hostname_issue(text: str) -> str | None:
    """RFC 1123: dot-separated labels of 1 to 63 letters, digits or hyphens, not starting or ending with a
    hyphen, at most 253 characters in all."""
    if not text or len(text) > 253 or not all(_LABEL.match(label) for label in text.split(".")):
        return f"not an RFC 1123 hostname: {text!r}"
    return None


def ipv4_or_hostname_issue(text: str) -> str | None:
    if ipv4_issue(text) is None:
        return None
    if re.fullmatch(r"[0-9.]+", text) or hostname_issue(text) is not None:
        return f"not an IPv4 address or RFC 1123 hostname: {text!r}"
    return None


_HTTP_URL: TypeAdapter[HttpUrl] = TypeAdapter(HttpUrl)


def http_url_issue(text: str) -> str | None:
    """An absolute ``http://`` or ``https://`` URL with a host."""
    try:
        _HTTP_URL.validate_python(text)
        has_host = bool(urlsplit(text).hostname)
    except (ValidationError, ValueError):
        has_host = False
    if not has_host or not text.lower().startswith(("http://", "https://")):
        return f"not an http(s) URL: {text!r}"
    return None


def device_path_issue(text: str) -> str | None:
    """An absolute device path under ``/dev/`` without empty, ``.`` or ``..`` components or whitespace."""
    parts = text.split("/")
    if (
        not text.startswith("/dev/")
        or any(part in ("", ".", "..") for part in parts[2:])
        or any(ch.isspace() for ch in text)
    ):
        return f"not a device path under /dev/: {text!r}"
    return None


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_name_issue(name: str) -> str | None:
    """A POSIX environment variable name: letters, digits and underscores, not starting with a digit."""
    if not _ENV_NAME.match(name):
        return f"not an environment variable name: {name!r}"
    return None


_VOLUME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]+$")
"""Docker's rule for a named volume (at least two characters)."""
_OPTION_GROUPS: dict[str, frozenset[str]] = {
    "access mode": frozenset({"ro", "rw"}),
    "SELinux label": frozenset({"z", "Z"}),
    "propagation": frozenset({"shared", "rshared", "slave", "rslave", "private", "rprivate"}),
    "copy mode": frozenset({"nocopy"}),
}
VOLUME_OPTIONS: frozenset[str] = frozenset().union(*_OPTION_GROUPS.values())


def volume_issue(text: str) -> str | None:
    """Docker's short form ``{SRC-VOLUME-NAME | SRC-HOST-DIR}:TGT-CONTAINER-DIR[:OPTIONS]``: the source a
    volume name or an absolute host directory, the target an absolute directory other than ``/``, the
    options comma-separated from Docker's set with at most one of each kind (``nocopy`` for named volumes
    only)."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        return f"not SOURCE:TARGET[:OPTIONS]: {text!r}"
    source, target = parts[0], parts[1]
    bind = source.startswith("/")
    if not bind and not _VOLUME_NAME.match(source):
        return (
            f"source {source!r} is neither an absolute host directory nor a volume name "
            "(a letter or digit, then letters, digits, '_', '.' or '-')"
        )
    if not target.startswith("/") or target == "/":
        return f"target {target!r} must be an absolute container directory other than /"
    if len(parts) == 3:
        options = parts[2].split(",")
        for option in options:
            if option not in VOLUME_OPTIONS:
                return f"unknown volume option {option!r} (expected {', '.join(sorted(VOLUME_OPTIONS))})"
        for group, members in _OPTION_GROUPS.items():
            chosen = [o for o in options if o in members]
            if len(chosen) > 1:
                return f"more than one {group} option: {', '.join(chosen)}"
        if bind and "nocopy" in options:
            return "nocopy applies to named volumes only, not to a host directory"
    return None


def is_templated(text: str) -> bool:
    """Whether a Template string holds a Go template action: its form is checked once it is rendered."""
    return "{{" in text


def template_data_issues(value: Any, path: str, depth: int = 1) -> list[tuple[str, str]]:
    """(path, problem) for everything in ``value`` that is not JSON data (strings, finite numbers,
    booleans, null, lists, maps with string keys), and for nesting deeper than
    :data:`TEMPLATE_DATA_MAX_DEPTH`. YAML timestamps, binary, sets and non-string keys are refused rather
    than converted: quoting them in the manifest says what the template receives."""
    if depth > TEMPLATE_DATA_MAX_DEPTH:
        return [(path, f"nested more than {TEMPLATE_DATA_MAX_DEPTH} levels deep")]
    if value is None or isinstance(value, (str, bool, int)):
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(path, "not JSON data: NaN and infinities have no JSON form")]
    if isinstance(value, list):
        found: list[tuple[str, str]] = []
        for index, item in enumerate(value):
            found += template_data_issues(item, f"{path}[{index}]", depth + 1)
        return found
    if isinstance(value, dict):
        found = []
        for key, item in value.items():
            if not isinstance(key, str):
                found.append((path, f"not JSON data: the key {key!r} is not a string; quote it"))
                continue
            found += template_data_issues(item, f"{path}{wire_key(key)}", depth + 1)
        return found
    return [(path, f"not JSON data: a {type(value).__name__} value; quote it to pass a string")]


# -- the kinds' rules, each returning FieldIssues at wire paths ---------------------------------------
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
