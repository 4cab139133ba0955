"""The value rules of the Tinkerbell kinds: MAC addresses, IPv4 addresses and masks, hostnames, URLs, device
paths, environment names, Docker volume specifications and template data.

Each check takes one value and returns ``None`` when it is valid, or a short message saying what is wrong
(never echoing free text such as userdata); the kinds in :mod:`capa_py.api.tinkerbell` put the field's wire
path in front of it. Nothing here raises on any string, so a parser fed arbitrary input either accepts it or
names the problem.

The value rules live in :mod:`capa_py.api.tinkerbell_values`, the rules of the kinds' specs in
:mod:`capa_py.api.tinkerbell_kind_rules`; every name is also exported here.
"""

from __future__ import annotations

from capa_py.api.tinkerbell_kind_rules import (
    hardware_issues,
    osie_issues,
    reference_issues,
    template_issues,
    workflow_issues,
)
from capa_py.api.tinkerbell_values import (
    INT32_MAX,
    MAC_FORMS_HELP,
    TEMPLATE_DATA_MAX_DEPTH,
    VLAN_ID_MAX,
    VOLUME_OPTIONS,
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

__all__ = [
    "INT32_MAX",
    "MAC_FORMS_HELP",
    "TEMPLATE_DATA_MAX_DEPTH",
    "VLAN_ID_MAX",
    "VOLUME_OPTIONS",
    "device_path_issue",
    "env_name_issue",
    "hardware_issues",
    "hostname_issue",
    "http_url_issue",
    "ipv4_issue",
    "ipv4_or_hostname_issue",
    "is_templated",
    "netmask_issue",
    "netmask_prefix",
    "normalise_mac",
    "osie_issues",
    "reference_issues",
    "template_data_issues",
    "template_issues",
    "volume_issue",
    "wire_key",
    "workflow_issues",
]
