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
from typing import Any
from urllib.parse import urlsplit

from pydantic import HttpUrl, TypeAdapter, ValidationError

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
