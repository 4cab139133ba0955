"""Python-side behaviour of the template renderer: the error's attributes, the data it accepts, and the
guards Go does not need (Python's stack). What Go itself decides is proved in the differential test."""

from __future__ import annotations

import copy
import math

import pytest

from capa_py.tinkerbell import TemplateError, render_text
from capa_py.tinkerbell.gotemplate.funcs import format_partition


def test_execution_error_names_template_line_and_byte_column() -> None:
    with pytest.raises(TemplateError) as caught:
        render_text("first line\nsé {{ .missing }}", {})
    err = caught.value
    assert isinstance(err, ValueError)
    assert str(err) == (
        'template: action:2:7: executing "action" at <.missing>: map has no entry for key "missing"'
    )
    assert (err.name, err.line, err.column) == ("action", 2, 7)


def test_parse_error_names_the_line_only_as_go_does() -> None:
    with pytest.raises(TemplateError) as caught:
        render_text("a\nb\n{{ nope 1 }}", {})
    assert str(caught.value) == 'template: action:3: function "nope" not defined'
    assert (caught.value.line, caught.value.column) == (3, None)


def test_template_name_is_used_in_messages() -> None:
    with pytest.raises(TemplateError, match=r'^template: env\.DEST_DISK:1:3: executing "env\.DEST_DISK" at'):
        render_text("{{ index .Hardware.Disks 0 }}", {"Hardware": {"Disks": []}}, name="env.DEST_DISK")


def test_error_in_a_defined_template_names_it_and_the_source_position() -> None:
    with pytest.raises(TemplateError) as caught:
        render_text('{{define "inner"}}{{.x}}{{end}}{{template "inner" .}}', {})
    assert str(caught.value) == (
        'template: action:1:20: executing "inner" at <.x>: map has no entry for key "x"'
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"a": {1, 2}}, r"^data\.a: set is not JSON data$"),
        ({"a": [math.nan]}, r"^data\.a\[0\]: nan cannot be represented in JSON$"),
        ({"a": {1: "x"}}, r"^data\.a: map keys must be strings, not int$"),
    ],
)
def test_data_json_cannot_hold_is_refused_naming_where(data: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        render_text("{{.a}}", data)


def test_integers_outside_int64_are_float64_as_kubernetes_decodes_them() -> None:
    rendered = render_text("{{.a}} {{.b}}", {"a": 2**64, "b": 2**63 - 1})
    assert rendered == "1.8446744073709552e+19 9223372036854775807"


def test_tuples_are_lists_and_rendering_leaves_the_data_alone() -> None:
    data = {"l": ("x", "y"), "m": {"k": [1, 2]}}
    before = copy.deepcopy(data)
    assert render_text("{{.l}} {{slice .m.k 1}} {{index .m.k 0}}", data) == "[x y] [2] 1"
    assert data == before


def test_runaway_template_recursion_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match=r"exceeded maximum template depth \(100000\)$"):
        render_text('{{define "r"}}{{template "r" .}}{{end}}{{template "r" .}}', {})


@pytest.mark.parametrize(
    ("device", "partition", "expected"),
    [
        ("/dev/nvme0n1", 1, "/dev/nvme0n1p1"),
        ("/dev/sda", 1, "/dev/sda1"),
        ("/dev/vdb", 2, "/dev/vdb2"),
        ("/dev/xvda", 3, "/dev/xvda3"),
        ("/dev/hda", 4, "/dev/hda4"),
        ("/dev/mmcblk0", 1, "/dev/mmcblk0"),
        ("/dev/disk/by-id/wwn-0x5000", 1, "/dev/disk/by-id/wwn-0x5000"),
    ],
)
def test_format_partition_follows_tinks_device_rule(device: str, partition: int, expected: str) -> None:
    assert format_partition(device, partition) == expected
    assert render_text(f'{{{{formatPartition "{device}" {partition}}}}}', {}) == expected
