"""The Tinkerbell kinds' rules: for each, a value it accepts and values it refuses, naming the field by its
wire path. The same ``semantic_issues`` run in ``capa apply``, the store, ``capa serve`` and the webhook."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from capa_py.api.loader import ManifestError, load_manifest_text
from capa_py.api.registry import REGISTRY
from capa_py.api.tinkerbell import Hardware, NetworkInterface, Workflow
from capa_py.api.tinkerbell_checks import TEMPLATE_DATA_MAX_DEPTH, template_data_issues
from tests.api.tinkerbell_objects import (
    DELETE,
    HARDWARE,
    MAC,
    OSIE,
    TEMPLATE,
    WORKFLOW,
    changed,
    interface,
)

NICS = ("spec", "networkInterfaces")
DHCP = (*NICS, MAC, "dhcp")
WIRE = f'spec.networkInterfaces["{MAC}"]'


def issues(doc: dict[str, Any]) -> list[str]:
    model = REGISTRY.for_gvk(doc["apiVersion"], doc["kind"])
    return [f"{i.path}: {i.message}" for i in model.model_validate(doc).semantic_issues()]


@pytest.mark.parametrize("doc", [HARDWARE, OSIE, TEMPLATE, WORKFLOW], ids=lambda d: d["kind"])
def test_the_example_objects_are_valid(doc: dict[str, Any]) -> None:
    assert issues(doc) == []


ACCEPTED: list[tuple[str, dict[str, Any]]] = [
    ("interface without DHCP when disableDhcp", changed(HARDWARE, (*NICS, MAC), {"disableDhcp": True})),
    ("netmask /30", changed(HARDWARE, (*NICS, MAC), interface(ip="10.0.0.2", netmask="255.255.255.252"))),
    (
        "a /31 uses both addresses",
        changed(HARDWARE, (*NICS, MAC), interface(ip="10.0.0.0", netmask="255.255.255.254")),
    ),
    ("no gateway", changed(HARDWARE, (*DHCP, "gateway"), DELETE)),
    ("empty gateway is unset", changed(HARDWARE, (*DHCP, "gateway"), "")),
    ("hostname FQDN in any case", changed(HARDWARE, (*DHCP, "hostname"), "Node-1.Rack-2.example.com")),
    ("vlanId 4094", changed(HARDWARE, (*DHCP, "vlanId"), 4094)),
    ("leaseTime 0", changed(HARDWARE, (*DHCP, "leaseTime"), 0)),
    ("leaseTime int32 max", changed(HARDWARE, (*DHCP, "leaseTime"), 2**31 - 1)),
    ("timeserver by address", changed(HARDWARE, (*DHCP, "timeservers"), ["192.168.1.1"])),
    (
        "two interfaces, two addresses",
        changed(HARDWARE, (*NICS, "00:11:22:33:44:55"), interface(ip="10.0.0.11")),
    ),
    ("ipxe url", changed(HARDWARE, ("spec", "ipxe"), {"url": "http://boot.example.com/auto.ipxe"})),
    ("ipxe inline", changed(HARDWARE, ("spec", "ipxe"), {"inline": "#!ipxe\nautoboot"})),
    ("osieRef dotted name", changed(HARDWARE, ("spec", "osie", "osieRef", "name"), "hook-1.2.3")),
    ("device by id", changed(HARDWARE, ("spec", "storageDevices"), ["/dev/disk/by-id/nvme-Samsung_SSD"])),
    ("no storage devices", changed(HARDWARE, ("spec", "storageDevices"), [])),
    ("http URLs", changed(OSIE, ("spec", "kernelUrl"), "http://10.0.0.1:8080/vmlinuz")),
    ("templated image", changed(TEMPLATE, ("spec", "actions", 0, "image"), "{{ .image }}")),
    ("env name with underscore", changed(TEMPLATE, ("spec", "actions", 0, "env"), {"_A1": "x"})),
    ("templated env name", changed(TEMPLATE, ("spec", "env"), {"{{ .name }}": "x"})),
    (
        "every Docker option kind once",
        changed(TEMPLATE, ("spec", "volumes"), ["vol-1:/data:nocopy,ro,z,rshared", "/:/host:rw,Z,private"]),
    ),
    ("templated volume", changed(TEMPLATE, ("spec", "actions", 0, "volumes"), ["{{ .src }}:/x"])),
    ("action timeout 0", changed(TEMPLATE, ("spec", "actions", 0, "timeout"), 0)),
    ("workflow timeout 0", changed(WORKFLOW, ("spec", "timeout"), 0)),
    ("reference in a namespace", changed(WORKFLOW, ("spec", "templateRef", "namespace"), "tink-system")),
    (
        "template data 32 levels deep (the map itself the first)",
        changed(WORKFLOW, ("spec", "templateData"), {"a": json.loads("[" * 31 + "]" * 31)}),
    ),
    (
        "deep but sane template data",
        changed(WORKFLOW, ("spec", "templateData"), {"a": [[[{"b": [None, True, 1.5]}]]]}),
    ),
]


@pytest.mark.parametrize(("case", "doc"), ACCEPTED, ids=[c for c, _ in ACCEPTED])
def test_accepted(case: str, doc: dict[str, Any]) -> None:
    assert issues(doc) == [], case


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    (
        "no network interface",
        changed(HARDWARE, NICS, {}),
        "spec.networkInterfaces: at least one network interface is required",
    ),
    (
        "a key that is no MAC",
        changed(HARDWARE, NICS, {"aa:bb:cc:dd:ee": interface()}),
        'spec.networkInterfaces["aa:bb:cc:dd:ee"]: not a MAC address',
    ),
    (
        "mixed separators",
        changed(HARDWARE, NICS, {"aa:bb-cc:dd:ee:ff": interface()}),
        'spec.networkInterfaces["aa:bb-cc:dd:ee:ff"]: not a MAC address',
    ),
    (
        "the same MAC twice, spelled differently",
        changed(
            HARDWARE, NICS, {"AA-BB-CC-DD-EE-FF": interface(), "aabb.ccdd.eeff": interface(ip="10.0.0.9")}
        ),
        'spec.networkInterfaces["aabb.ccdd.eeff"]: the same MAC address as "AA-BB-CC-DD-EE-FF"',
    ),
    (
        "DHCP missing without disableDhcp",
        changed(HARDWARE, (*NICS, MAC), {"disableNetboot": True}),
        f"{WIRE}.dhcp: required unless disableDhcp is true",
    ),
    ("ip octet out of range", changed(HARDWARE, (*DHCP, "ip"), "10.0.0.256"), f"{WIRE}.dhcp.ip: not an IPv4"),
    ("ip with leading zero", changed(HARDWARE, (*DHCP, "ip"), "10.0.0.010"), f"{WIRE}.dhcp.ip: not an IPv4"),
    ("ip IPv6", changed(HARDWARE, (*DHCP, "ip"), "fd00::10"), f"{WIRE}.dhcp.ip: not an IPv4 address"),
    (
        "ip is the network address",
        changed(HARDWARE, (*DHCP, "ip"), "10.0.0.0"),
        f"{WIRE}.dhcp.ip: 10.0.0.0 is the network address of 10.0.0.0/24",
    ),
    (
        "ip is the broadcast address",
        changed(HARDWARE, (*DHCP, "ip"), "10.0.0.255"),
        f"{WIRE}.dhcp.ip: 10.0.0.255 is the broadcast address of 10.0.0.0/24",
    ),
    (
        "netmask not contiguous",
        changed(HARDWARE, (*DHCP, "netmask"), "255.0.255.0"),
        f"{WIRE}.dhcp.netmask: not a contiguous IPv4 netmask",
    ),
    (
        "netmask as a prefix length",
        changed(HARDWARE, (*DHCP, "netmask"), "24"),
        f"{WIRE}.dhcp.netmask: not a contiguous IPv4 netmask",
    ),
    (
        "netmask as a host mask",
        changed(HARDWARE, (*DHCP, "netmask"), "0.0.0.255"),
        f"{WIRE}.dhcp.netmask: not a contiguous IPv4 netmask",
    ),
    (
        "gateway outside the network",
        changed(HARDWARE, (*DHCP, "gateway"), "10.0.1.1"),
        f"{WIRE}.dhcp.gateway: 10.0.1.1 is outside 10.0.0.0/24",
    ),
    (
        "gateway not an address",
        changed(HARDWARE, (*DHCP, "gateway"), "router"),
        f"{WIRE}.dhcp.gateway: not an IPv4 address",
    ),
    (
        "gateway is the interface itself",
        changed(HARDWARE, (*DHCP, "gateway"), "10.0.0.10"),
        f"{WIRE}.dhcp.gateway: 10.0.0.10 is the interface's own ip",
    ),
    (
        "hostname starting with a hyphen",
        changed(HARDWARE, (*DHCP, "hostname"), "-node"),
        f"{WIRE}.dhcp.hostname: not an RFC 1123 hostname",
    ),
    (
        "hostname with an underscore",
        changed(HARDWARE, (*DHCP, "hostname"), "node_1"),
        f"{WIRE}.dhcp.hostname: not an RFC 1123 hostname",
    ),
    (
        "hostname label too long",
        changed(HARDWARE, (*DHCP, "hostname"), "a" * 64),
        f"{WIRE}.dhcp.hostname: not an RFC 1123 hostname",
    ),
    (
        "vlanId 4095",
        changed(HARDWARE, (*DHCP, "vlanId"), 4095),
        f"{WIRE}.dhcp.vlanId: 4095 is not a VLAN id (0 to 4094)",
    ),
    ("vlanId negative", changed(HARDWARE, (*DHCP, "vlanId"), -1), f"{WIRE}.dhcp.vlanId: -1 is not a VLAN id"),
    (
        "nameserver by name",
        changed(HARDWARE, (*DHCP, "nameservers"), ["1.1.1.1", "dns.example.com"]),
        f"{WIRE}.dhcp.nameservers[1]: not an IPv4 address",
    ),
    (
        "timeserver neither address nor name",
        changed(HARDWARE, (*DHCP, "timeservers"), ["ntp pool"]),
        f"{WIRE}.dhcp.timeservers[0]: not an IPv4 address or RFC 1123 hostname",
    ),
    (
        "timeserver with five numbers",
        changed(HARDWARE, (*DHCP, "timeservers"), ["1.2.3.4.5"]),
        f"{WIRE}.dhcp.timeservers[0]: not an IPv4 address or RFC 1123 hostname",
    ),
    ("leaseTime negative", changed(HARDWARE, (*DHCP, "leaseTime"), -1), f"{WIRE}.dhcp.leaseTime: -1 is not"),
    (
        "leaseTime beyond int32",
        changed(HARDWARE, (*DHCP, "leaseTime"), 2**31),
        f"{WIRE}.dhcp.leaseTime: 2147483648 is not 0 to 2147483647 seconds",
    ),
    (
        "the same ip on two interfaces",
        changed(HARDWARE, (*NICS, "00:11:22:33:44:55"), interface()),
        f'spec.networkInterfaces["00:11:22:33:44:55"].dhcp.ip: 10.0.0.10 is also the ip of {WIRE}',
    ),
    ("ipxe empty", changed(HARDWARE, ("spec", "ipxe"), {}), "spec.ipxe: exactly one of inline or url"),
    (
        "ipxe inline and url",
        changed(HARDWARE, ("spec", "ipxe"), {"inline": "#!ipxe", "url": "http://x/a.ipxe"}),
        "spec.ipxe: exactly one of inline or url is required (got 2)",
    ),
    (
        "ipxe url not http",
        changed(HARDWARE, ("spec", "ipxe"), {"url": "tftp://10.0.0.1/a.ipxe"}),
        "spec.ipxe.url: not an http(s) URL",
    ),
    (
        "ipxe url relative",
        changed(HARDWARE, ("spec", "ipxe"), {"url": "auto.ipxe"}),
        "spec.ipxe.url: not an http(s) URL",
    ),
    (
        "osieRef name not a subdomain",
        changed(HARDWARE, ("spec", "osie", "osieRef", "name"), "Hook_1"),
        "spec.osie.osieRef.name: 'Hook_1' must be a lowercase RFC 1123 subdomain",
    ),
    (
        "osieRef name empty",
        changed(HARDWARE, ("spec", "osie", "osieRef", "name"), ""),
        "spec.osie.osieRef.name",
    ),
    ("bmcRef name bad", changed(HARDWARE, ("spec", "bmcRef", "name"), "BMC"), "spec.bmcRef.name: 'BMC' must"),
    (
        "device not under /dev",
        changed(HARDWARE, ("spec", "storageDevices"), ["sda"]),
        "spec.storageDevices[0]: not a device path under /dev/",
    ),
    (
        "device escaping /dev",
        changed(HARDWARE, ("spec", "storageDevices"), ["/dev/sda", "/dev/../etc/passwd"]),
        "spec.storageDevices[1]: not a device path under /dev/",
    ),
    (
        "/dev itself",
        changed(HARDWARE, ("spec", "storageDevices"), ["/dev/"]),
        "spec.storageDevices[0]: not a device path under /dev/",
    ),
    (
        "device twice",
        changed(HARDWARE, ("spec", "storageDevices"), ["/dev/sda", "/dev/sdb", "/dev/sda"]),
        "spec.storageDevices[2]: /dev/sda is also spec.storageDevices[0]",
    ),
    (
        "kernel over ftp",
        changed(OSIE, ("spec", "kernelUrl"), "ftp://x/vmlinuz"),
        "spec.kernelUrl: not an http",
    ),
    ("initrd empty", changed(OSIE, ("spec", "initrdUrl"), ""), "spec.initrdUrl: not an http(s) URL"),
    ("initrd without host", changed(OSIE, ("spec", "initrdUrl"), "http:///initrd"), "spec.initrdUrl: not an"),
    (
        "no action",
        changed(TEMPLATE, ("spec", "actions"), []),
        "spec.actions: at least one action is required",
    ),
    (
        "two actions with one name",
        changed(TEMPLATE, ("spec", "actions", 1, "name"), "stream-image"),
        "spec.actions[1].name: 'stream-image' is also the name of spec.actions[0]",
    ),
    (
        "templated names compared as written",
        changed(
            changed(TEMPLATE, ("spec", "actions", 0, "name"), "{{ .n }}"),
            ("spec", "actions", 1, "name"),
            "{{ .n }}",
        ),
        "spec.actions[1].name: '{{ .n }}' is also the name of spec.actions[0]",
    ),
    (
        "action name empty",
        changed(TEMPLATE, ("spec", "actions", 1, "name"), ""),
        "spec.actions[1].name: required",
    ),
    (
        "image empty",
        changed(TEMPLATE, ("spec", "actions", 0, "image"), " "),
        "spec.actions[0].image: required",
    ),
    (
        "env name starting with a digit",
        changed(TEMPLATE, ("spec", "actions", 0, "env"), {"1X": "y"}),
        'spec.actions[0].env["1X"]: not an environment variable name',
    ),
    (
        "template env name with a hyphen",
        changed(TEMPLATE, ("spec", "env"), {"HTTP-PROXY": "y"}),
        'spec.env["HTTP-PROXY"]: not an environment variable name',
    ),
    (
        "volume without target",
        changed(TEMPLATE, ("spec", "actions", 0, "volumes"), ["/data"]),
        "spec.actions[0].volumes[0]: not SOURCE:TARGET[:OPTIONS]",
    ),
    (
        "volume with four parts",
        changed(TEMPLATE, ("spec", "volumes"), ["/a:/b:ro:x"]),
        "spec.volumes[0]: not SOURCE:TARGET[:OPTIONS]",
    ),
    (
        "relative host dir",
        changed(TEMPLATE, ("spec", "volumes"), ["./data:/data"]),
        "spec.volumes[0]: source './data' is neither an absolute host directory nor a volume name",
    ),
    (
        "one-character volume name",
        changed(TEMPLATE, ("spec", "volumes"), ["v:/data"]),
        "spec.volumes[0]: source 'v' is neither",
    ),
    (
        "relative target",
        changed(TEMPLATE, ("spec", "volumes"), ["/a:data"]),
        "spec.volumes[0]: target 'data' must be an absolute container directory",
    ),
    ("target /", changed(TEMPLATE, ("spec", "volumes"), ["vol:/"]), "spec.volumes[0]: target '/' must be"),
    (
        "unknown option",
        changed(TEMPLATE, ("spec", "volumes"), ["/a:/b:readonly"]),
        "spec.volumes[0]: unknown volume option 'readonly'",
    ),
    (
        "ro and rw",
        changed(TEMPLATE, ("spec", "volumes"), ["/a:/b:ro,rw"]),
        "more than one access mode option",
    ),
    ("z and Z", changed(TEMPLATE, ("spec", "volumes"), ["/a:/b:z,Z"]), "more than one SELinux label option"),
    (
        "two propagations",
        changed(TEMPLATE, ("spec", "volumes"), ["/a:/b:shared,rslave"]),
        "spec.volumes[0]: more than one propagation option: shared, rslave",
    ),
    (
        "nocopy on a bind mount",
        changed(TEMPLATE, ("spec", "actions", 1, "volumes"), ["/a:/b:nocopy"]),
        "spec.actions[1].volumes[0]: nocopy applies to named volumes only",
    ),
    (
        "negative action timeout",
        changed(TEMPLATE, ("spec", "actions", 0, "timeout"), -1),
        "spec.actions[0].timeout: -1 is not 0 to 2147483647 seconds",
    ),
    (
        "hardwareRef name not a subdomain",
        changed(WORKFLOW, ("spec", "hardwareRef", "name"), "Node_1"),
        "spec.hardwareRef.name: 'Node_1' must be a lowercase RFC 1123 subdomain",
    ),
    (
        "templateRef name empty",
        changed(WORKFLOW, ("spec", "templateRef", "name"), ""),
        "spec.templateRef.name",
    ),
    (
        "templateRef namespace dotted",
        changed(WORKFLOW, ("spec", "templateRef", "namespace"), "a.b"),
        "spec.templateRef.namespace: 'a.b' is not a namespace name",
    ),
    ("negative workflow timeout", changed(WORKFLOW, ("spec", "timeout"), -5), "spec.timeout: -5 is not 0 to"),
    (
        "template data nested too deep",
        changed(WORKFLOW, ("spec", "templateData"), {"a": json.loads("[" * 32 + "]" * 32)}),
        f'spec.templateData["a"]{"[0]" * (TEMPLATE_DATA_MAX_DEPTH - 1)}: nested more than 32 levels deep',
    ),
    (
        "template data NaN",
        changed(WORKFLOW, ("spec", "templateData"), {"x": [float("nan")]}),
        'spec.templateData["x"][0]: not JSON data: NaN and infinities have no JSON form',
    ),
    (
        "template data date",
        changed(WORKFLOW, ("spec", "templateData"), {"when": date(2026, 1, 1)}),
        'spec.templateData["when"]: not JSON data: a date value; quote it to pass a string',
    ),
]


@pytest.mark.parametrize(("case", "doc", "expected"), REFUSED, ids=[c for c, _, _ in REFUSED])
def test_refused_naming_the_field(case: str, doc: dict[str, Any], expected: str) -> None:
    found = issues(doc)
    assert any(expected in issue for issue in found), f"{case}: expected {expected!r} in {found}"


def test_template_data_keys_must_be_strings() -> None:
    assert template_data_issues({"ok": {1: "x"}}, "spec.templateData") == [
        ('spec.templateData["ok"]', "not JSON data: the key 1 is not a string; quote it")
    ]


def test_userdata_never_appears_in_an_issue() -> None:
    doc = changed(HARDWARE, ("spec", "storageDevices"), ["sda"])
    assert issues(doc)
    assert not any("s3cret" in issue for issue in issues(doc))


# -- MAC keys --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spelling", ["AA:BB:CC:DD:EE:FF", "aa-bb-cc-dd-ee-ff", "AABB.CCDD.EEFF", "aA:bB:cC:dD:eE:fF"]
)
def test_mac_keys_are_normalised_to_lowercase_colon_form_on_read(spelling: str) -> None:
    hardware = Hardware.model_validate(changed(HARDWARE, NICS, {spelling: interface()}))
    assert list(hardware.spec.network_interfaces) == [MAC]
    assert hardware.semantic_issues() == []
    again = Hardware.model_validate(hardware.to_dict())
    assert again.to_dict() == hardware.to_dict(), "normalising is idempotent"


def test_colliding_mac_keys_are_kept_as_written_so_the_object_stays_readable() -> None:
    doc = changed(HARDWARE, NICS, {"AA:BB:CC:DD:EE:FF": interface(), MAC: interface(ip="10.0.0.12")})
    hardware = Hardware.model_validate(doc)
    assert sorted(hardware.spec.network_interfaces) == ["AA:BB:CC:DD:EE:FF", MAC]
    assert [i.path for i in hardware.semantic_issues()] == [WIRE]


def test_an_error_inside_a_mac_keyed_map_names_the_key_in_brackets() -> None:
    doc = changed(HARDWARE, (*DHCP, "ip"), DELETE)
    with pytest.raises(ManifestError) as raised:
        load_manifest_text(json.dumps(doc))
    assert f"{WIRE}.dhcp.ip: Field required" in str(raised.value)


# -- netboot ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "netboots"),
    [
        ({}, True),
        ({"disableNetboot": True}, False),
        ({"disableDhcp": True}, False),
        ({"disableDhcp": True, "disableNetboot": False}, False),
    ],
)
def test_disabling_dhcp_disables_netboot(fields: dict[str, bool], netboots: bool) -> None:
    nic = NetworkInterface.model_validate({**interface(), **fields})
    assert nic.effective_netboot is netboots
    hardware = Hardware.model_validate(changed(HARDWARE, (*NICS, MAC), {**interface(), **fields}))
    assert hardware.semantic_issues() == [], "an explicit disableNetboot: false is accepted, and means off"


# -- Workflow spec immutability --------------------------------------------------------------------
def _workflow(status: dict[str, Any] | None = None, **spec: Any) -> Workflow:
    doc = changed(WORKFLOW, ("spec",), {**WORKFLOW["spec"], **spec})
    if status is not None:
        doc["status"] = status
    return Workflow.model_validate(doc)


STARTED = [
    {"state": "Scheduled"},
    {"state": "Running", "startedAt": "2026-01-01T00:00:00Z", "currentAction": "reboot"},
    {"state": "Succeeded"},
    {"state": "Failed", "reason": "Timeout"},
    {"state": "Cancelling"},
    {"state": "Canceled"},
    {"state": "Pending", "startedAt": "2026-01-01T00:00:00Z"},
]


@pytest.mark.parametrize(
    "status", STARTED, ids=lambda s: f"{s['state']}{'+startedAt' if 'startedAt' in s else ''}"
)
def test_a_started_workflows_spec_is_immutable(status: dict[str, Any]) -> None:
    old = _workflow(status)
    new = _workflow(status, timeout=7200, templateData={"image_url": "http://other"})
    [issue] = new.immutable_issues(old)
    assert issue.path == "spec"
    assert issue.message.startswith(f"immutable once the workflow has started (state {status['state']})")
    assert "spec.timeout" in issue.message
    assert "spec.templateData.image_url" in issue.message
    assert "http://other" not in issue.message, "template data values are not echoed"
    assert _workflow(status).immutable_issues(old) == [], "an update leaving the spec alone is allowed"


@pytest.mark.parametrize(
    "status",
    [None, {}, {"state": "Pending"}, {"state": "Failed", "reason": "RenderFailed"}],
    ids=["new", "empty status", "Pending", "failed to render"],
)
def test_a_workflow_not_started_may_change_its_spec(status: dict[str, Any] | None) -> None:
    old = _workflow(status)
    assert _workflow(status, timeout=7200).immutable_issues(old) == []


def test_workflow_and_action_states_are_the_models_literals() -> None:
    with pytest.raises(ValidationError, match="state"):
        _workflow({"state": "Exploded"})
    action = {"rendered": {"name": "a", "image": "i"}, "index": 0, "state": "Scheduled"}
    with pytest.raises(ValidationError, match="state"):
        _workflow({"state": "Running", "actions": {"a": action}})
    action["state"] = "Running"
    assert _workflow({"state": "Running", "actions": {"a": action}}).status.actions["a"].state == "Running"


def test_a_workflow_being_deleted_is_not_judged_by_spec_rules() -> None:
    """Removing its finalizer must work even when a rule added later refuses its stored spec."""
    doc = changed(WORKFLOW, ("spec", "timeout"), -1)
    doc["metadata"]["deletionTimestamp"] = datetime(2026, 1, 1, tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc["metadata"]["finalizers"] = ["workflow.tinkerbell.org"]
    assert issues(doc) == []
    assert issues(changed(WORKFLOW, ("spec", "timeout"), -1)) != []
