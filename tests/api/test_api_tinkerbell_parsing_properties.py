"""Property tests of the Tinkerbell value parsers: every valid MAC, IPv4 address and netmask round-trips and
normalises; any string at all is either accepted or refused with an issue naming the field, never a crash."""

from __future__ import annotations

import ipaddress
import json
import re

from hypothesis import given
from hypothesis import strategies as st

from capa_py.api.tinkerbell import Hardware
from capa_py.api.tinkerbell_checks import (
    device_path_issue,
    env_name_issue,
    hostname_issue,
    http_url_issue,
    ipv4_issue,
    ipv4_or_hostname_issue,
    netmask_prefix,
    normalise_mac,
    volume_issue,
)
from tests.api.tinkerbell_objects import HARDWARE, MAC, changed, interface

CANONICAL_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


@st.composite
def mac_spellings(draw: st.DrawFn) -> tuple[bytes, str]:
    """Six bytes and one way of writing them: colon, dash or dot notation, each digit in either case."""
    raw = draw(st.binary(min_size=6, max_size=6))
    digits = "".join(c.upper() if draw(st.booleans()) else c for c in raw.hex())
    notation = draw(st.sampled_from(["colon", "dash", "dot"]))
    if notation == "dot":
        return raw, ".".join(digits[i : i + 4] for i in range(0, 12, 4))
    separator = ":" if notation == "colon" else "-"
    return raw, separator.join(digits[i : i + 2] for i in range(0, 12, 2))


@given(mac_spellings())
def test_every_mac_spelling_normalises_to_its_bytes_in_lowercase_colon_form(
    spelled: tuple[bytes, str],
) -> None:
    raw, text = spelled
    normal = normalise_mac(text)
    assert normal == ":".join(f"{b:02x}" for b in raw)
    assert normalise_mac(normal) == normal


@given(mac_spellings())
def test_a_hardware_keyed_by_any_spelling_stores_the_normal_form(spelled: tuple[bytes, str]) -> None:
    _, text = spelled
    hardware = Hardware.model_validate(changed(HARDWARE, ("spec", "networkInterfaces"), {text: interface()}))
    [key] = hardware.spec.network_interfaces
    assert key == normalise_mac(text)
    assert hardware.semantic_issues() == []


@given(st.text())
def test_any_text_is_a_canonical_mac_or_none(text: str) -> None:
    normal = normalise_mac(text)
    assert normal is None or CANONICAL_MAC.match(normal)


@given(st.text(max_size=40))
def test_any_key_is_accepted_or_named_in_the_issue(key: str) -> None:
    hardware = Hardware.model_validate(changed(HARDWARE, ("spec", "networkInterfaces"), {key: interface()}))
    found = [i.path for i in hardware.semantic_issues()]
    if normalise_mac(key) is None:
        assert found == [f"spec.networkInterfaces[{json.dumps(key)}]"]
    else:
        assert found == []


@given(st.ip_addresses(v=4))
def test_every_ipv4_address_round_trips(address: ipaddress.IPv4Address) -> None:
    assert ipv4_issue(str(address)) is None
    assert ipv4_or_hostname_issue(str(address)) is None


@given(st.text(max_size=30))
def test_any_text_is_an_ipv4_address_or_refused_on_its_field(text: str) -> None:
    try:
        ipaddress.IPv4Address(text)
        parses = True
    except ValueError:
        parses = False
    assert (ipv4_issue(text) is None) is parses
    doc = changed(HARDWARE, ("spec", "networkInterfaces", MAC, "dhcp", "ip"), text)
    paths = {i.path for i in Hardware.model_validate(doc).semantic_issues()}
    ip_path = f'spec.networkInterfaces["{MAC}"].dhcp.ip'
    assert (ip_path in paths) is not parses or text in ("10.0.0.0", "10.0.0.255")


@given(st.integers(min_value=0, max_value=32))
def test_every_prefix_length_netmask_round_trips(prefix: int) -> None:
    mask = str(ipaddress.IPv4Network(f"0.0.0.0/{prefix}").netmask)
    assert netmask_prefix(mask) == prefix


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_a_netmask_is_exactly_a_run_of_ones_then_zeros(value: int) -> None:
    bits = f"{value:032b}"
    contiguous = re.fullmatch("1*0*", bits) is not None
    prefix = netmask_prefix(str(ipaddress.IPv4Address(value)))
    assert (prefix is not None) is contiguous
    if prefix is not None:
        assert prefix == bits.count("1")


@given(st.text(max_size=30))
def test_any_text_as_a_netmask_is_parsed_or_refused_on_its_field(text: str) -> None:
    doc = changed(HARDWARE, ("spec", "networkInterfaces", MAC, "dhcp", "netmask"), text)
    paths = {i.path for i in Hardware.model_validate(doc).semantic_issues()}
    refused = f'spec.networkInterfaces["{MAC}"].dhcp.netmask' in paths
    assert refused is (netmask_prefix(text) is None)


@given(st.text(max_size=60))
def test_the_other_parsers_never_crash(text: str) -> None:
    for check in (
        hostname_issue,
        ipv4_or_hostname_issue,
        http_url_issue,
        device_path_issue,
        env_name_issue,
        volume_issue,
    ):
        result = check(text)
        assert result is None or isinstance(result, str)


_PATH_PART = st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True).filter(lambda p: p not in (".", ".."))


@st.composite
def docker_volumes(draw: st.DrawFn) -> str:
    """A volume in Docker's short form: a named volume or host directory, a target, options at most one of
    each kind (nocopy only for named volumes)."""
    named = draw(st.booleans())
    if named:
        source = draw(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{1,20}", fullmatch=True))
    else:
        source = "/" + "/".join(draw(st.lists(_PATH_PART, max_size=4)))
    target = "/" + "/".join(draw(st.lists(_PATH_PART, min_size=1, max_size=4)))
    groups = [["ro", "rw"], ["z", "Z"], ["shared", "rshared", "slave", "rslave", "private", "rprivate"]]
    if named:
        groups.append(["nocopy"])
    options = [draw(st.sampled_from(group)) for group in groups if draw(st.booleans())]
    options = draw(st.permutations(options))
    return f"{source}:{target}" + (f":{','.join(options)}" if options else "")


@given(docker_volumes())
def test_every_docker_volume_form_is_accepted(volume: str) -> None:
    assert volume_issue(volume) is None, volume


@given(docker_volumes(), st.sampled_from(["ro,rw", "z,Z", "shared,private", "bogus"]))
def test_conflicting_or_unknown_options_are_refused(volume: str, extra: str) -> None:
    source, target = volume.split(":")[:2]
    assert volume_issue(f"{source}:{target}:{extra}") is not None
